"""The float64 reference as one batched GEMM per filter tap, over a NumPy-like array module.

The CUDA runtime passes CuPy, so the reference is computed on the device (cuBLAS DGEMM)
and candidates are compared there: only two scalars cross to the host, where the NumPy
reference and full host copies used to cost most of a tuning pass. The formulation (a
strided tap view times the tap's filter slice, groups as a batch dimension) differs from
`algorithms.reference`'s einsum windows, so each checks the other in tests, with NumPy
standing in for CuPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from algorithms.problem import ConvProblem

#: Float64 bytes of one batch chunk (padded input, output, one tap copy): bounds the
#: reference's memory on GPU-sized problems.
CHUNK_BYTES = 256 << 20


def as_float64(xp: Any, array: Any, dtype: str) -> Any:
    """`array` holding a problem's `dtype` as float64; bfloat16 bits (uint16) widen exactly."""
    if dtype == "bfloat16" and array.dtype == xp.uint16:
        return (array.astype(xp.uint32) << 16).view(xp.float32).astype(xp.float64)
    return array.astype(xp.float64)


#: bfloat16's quiet NaN, as the uint16 bits a GPU array holds it in.
BF16_NAN_BITS = 0x7FC0


def fill_nan(array: Any) -> None:
    """Fill `array` with NaN in its storage: bfloat16 bits (uint16) take BF16_NAN_BITS.

    `fill(nan)` on those bits is no NaN (NumPy refuses it; on a GPU a float-to-integer cast),
    so an unwritten output of a bfloat16 candidate did not show in its verification.
    """
    array.fill(BF16_NAN_BITS if array.dtype == np.uint16 else np.nan)


def errors(xp: Any, out: Any, ref: Any, dtype: str) -> tuple[float, float]:
    """(max abs error, relative 2-norm error) of `out` against float64 `ref`, where they live.

    NaN in `out` (unwritten, poisoned elements) makes both NaN.
    """
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"compare: shapes {tuple(out.shape)} and {tuple(ref.shape)} differ")
    if not ref.size:
        return 0.0, 0.0
    diff = as_float64(xp, out, dtype) - ref
    norm = float(xp.linalg.norm(ref.ravel()))
    dist = float(xp.linalg.norm(diff.ravel()))
    return float(xp.max(xp.abs(diff))), dist / norm if norm else dist


def _taps(problem: ConvProblem) -> list[tuple[int, int, slice, slice]]:
    """(r, s, rows, cols) of each filter tap: where it reads the padded input."""
    (sh, sw), (dh, dw) = problem.stride, problem.dilation
    out_h, out_w = problem.out_hw
    return [
        (r, s, slice(r * dh, r * dh + (out_h - 1) * sh + 1, sh),
         slice(s * dw, s * dw + (out_w - 1) * sw + 1, sw))
        for r in range(problem.r) for s in range(problem.s)
    ]


def _padded(xp: Any, x: Any, problem: ConvProblem) -> Any:
    (ph, pw) = problem.pad
    return xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))


def _forward(xp: Any, x: Any, w: Any, p: ConvProblem) -> Any:
    n, g, pixels = x.shape[0], p.groups, p.out_hw[0] * p.out_hw[1]
    wg = w.reshape(g, p.k // g, p.c // g, p.r, p.s)
    xpad = _padded(xp, x, p)
    y = xp.zeros((n, g, p.k // g, pixels))
    for r, s, rows, cols in _taps(p):
        tap = xpad[:, :, rows, cols].reshape(n, g, p.c // g, pixels)
        y += wg[:, :, :, r, s] @ tap  # (g, kg, cg) @ (n, g, cg, P)
    return y.reshape(n, p.k, *p.out_hw)


def _backward_data(xp: Any, dy: Any, w: Any, p: ConvProblem) -> Any:
    n, g, (ph, pw) = dy.shape[0], p.groups, p.pad
    wg = w.reshape(g, p.k // g, p.c // g, p.r, p.s)
    dyg = dy.reshape(n, g, p.k // g, -1)
    dx = xp.zeros((n, p.c, p.h + 2 * ph, p.w + 2 * pw))
    for r, s, rows, cols in _taps(p):
        # The adjoint of the forward tap: scatter W_rs^T dy back where the tap read.
        dx[:, :, rows, cols] += (wg[:, :, :, r, s].transpose(0, 2, 1) @ dyg).reshape(
            n, p.c, *p.out_hw
        )
    return dx[:, :, ph:ph + p.h, pw:pw + p.w]


def _backward_filter(xp: Any, x: Any, dy: Any, p: ConvProblem) -> Any:
    n, g = x.shape[0], p.groups
    dyg = dy.reshape(n, g, p.k // g, -1)
    xpad = _padded(xp, x, p)
    dw = xp.empty((g, p.k // g, p.c // g, p.r, p.s))
    for r, s, rows, cols in _taps(p):
        tap = xpad[:, :, rows, cols].reshape(n, g, p.c // g, -1)
        dw[..., r, s] = (dyg @ tap.transpose(0, 1, 3, 2)).sum(axis=0)
    return dw.reshape(p.filter_shape)


def reference_gemm(xp: Any, a: Any, b: Any, problem: ConvProblem,
                   chunk_bytes: int = CHUNK_BYTES) -> Any:
    """The float64 result of `problem` from operands (a, b) in `xp` (numpy or cupy).

    forward: y from (x, w); backward_data: dx from (dy, w); backward_filter: dw from (x, dy).
    Operands hold the problem's dtype in storage; the batch is processed in chunks of
    about `chunk_bytes`.
    """
    p = problem
    a_shape, b_shape, out_shape = p.operand_shapes
    if tuple(a.shape) != a_shape or tuple(b.shape) != b_shape:
        raise ValueError(f"reference_gemm: shapes {tuple(a.shape)} and {tuple(b.shape)} "
                         f"do not match {p.describe()}")
    (ph, pw), (oh, ow) = p.pad, p.out_hw
    per_image = 8 * (p.c * (p.h + 2 * ph) * (p.w + 2 * pw) + 2 * max(p.c, p.k) * oh * ow)
    chunk = max(1, chunk_bytes // per_image)

    def wide(t: Any) -> Any:
        return as_float64(xp, t, p.dtype)

    if p.direction == "backward_filter":
        dw = xp.zeros(out_shape)
        for n0 in range(0, p.n, chunk):
            dw += _backward_filter(xp, wide(a[n0:n0 + chunk]), wide(b[n0:n0 + chunk]), p)
        return dw
    step = _forward if p.direction == "forward" else _backward_data
    w64 = wide(b)
    out = xp.empty(out_shape)
    for n0 in range(0, p.n, chunk):
        out[n0:n0 + chunk] = step(xp, wide(a[n0:n0 + chunk]), w64, p)
    return out
