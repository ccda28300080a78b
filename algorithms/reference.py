"""The float64 reference convolution: the oracle for tests and for the tuner's verification."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from algorithms.problem import ConvProblem

#: einsum copies the windows of each batch chunk into one (n*oh*ow, cg*r*s) float64 matrix:
#: keeping that copy near this size lets GPU-sized problems verify without tens of GB.
CHUNK_BYTES = 256 << 20


def reference_conv(x: np.ndarray, w: np.ndarray, problem: ConvProblem) -> np.ndarray:
    """Cross-correlate NumPy `x` (n, c, h, w) with `w` (k, c/g, r, s) in float64."""
    if tuple(x.shape) != problem.input_shape or tuple(w.shape) != problem.filter_shape:
        raise ValueError(
            f"reference_conv: shapes {x.shape} and {w.shape} do not match {problem.describe()}"
        )
    (ph, pw), (sh, sw), (dh, dw) = problem.pad, problem.stride, problem.dilation
    g, cg, kg = problem.groups, problem.c // problem.groups, problem.k // problem.groups
    out_h, out_w = problem.out_hw
    xp = np.pad(np.asarray(x, dtype=np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    # Windows of the dilated footprint, then keep every dilation-th tap and stride-th origin.
    win = sliding_window_view(xp, (problem.dilated_r, problem.dilated_s), axis=(2, 3))
    win = win[:, :, : (out_h - 1) * sh + 1 : sh, : (out_w - 1) * sw + 1 : sw, ::dh, ::dw]
    w64 = np.asarray(w, dtype=np.float64)
    y = np.empty(problem.output_shape, dtype=np.float64)
    per_image = out_h * out_w * cg * problem.r * problem.s * 8
    chunk = max(1, CHUNK_BYTES // per_image)
    for gi in range(g):
        ws = w64[gi * kg : (gi + 1) * kg]  # (kg, cg, r, s)
        for n0 in range(0, problem.n, chunk):
            xs = win[n0 : n0 + chunk, gi * cg : (gi + 1) * cg]  # (n, cg, oh, ow, r, s)
            y[n0 : n0 + chunk, gi * kg : (gi + 1) * kg] = np.einsum(
                "ncpqrs,kcrs->nkpq", xs, ws, optimize=True
            )
    return y


def reference(a: np.ndarray, b: np.ndarray, problem: ConvProblem) -> np.ndarray:
    """The float64 result of `problem` in its direction from its operands (a, b).

    forward: y from (x, w). backward_data: dx from (dy, w), the adjoint of the forward
    pass's window extraction, accumulated into a padded dx and cropped. backward_filter:
    dw from (x, dy), each tap the sum over the batch and the output pixels.
    """
    if problem.direction == "forward":
        return reference_conv(a, b, problem)
    (ph, pw), (sh, sw), (dh, dw) = problem.pad, problem.stride, problem.dilation
    g, cg, kg = problem.groups, problem.c // problem.groups, problem.k // problem.groups
    out_h, out_w = problem.out_hw
    rows = slice(0, (out_h - 1) * sh + 1, sh)
    cols = slice(0, (out_w - 1) * sw + 1, sw)
    if problem.direction == "backward_data":
        dy, w = np.asarray(a, np.float64), np.asarray(b, np.float64)
        dx = np.zeros((problem.n, problem.c, problem.h + 2 * ph, problem.w + 2 * pw))
        for gi in range(g):
            dyg, wg = dy[:, gi * kg:(gi + 1) * kg], w[gi * kg:(gi + 1) * kg]
            for r in range(problem.r):
                for s in range(problem.s):
                    window = (slice(None), slice(gi * cg, (gi + 1) * cg),
                              slice(r * dh + rows.start, r * dh + rows.stop, sh),
                              slice(s * dw + cols.start, s * dw + cols.stop, sw))
                    dx[window] += np.einsum("nkpq,kc->ncpq", dyg, wg[:, :, r, s])
        return dx[:, :, ph:ph + problem.h, pw:pw + problem.w]
    x, dy = np.asarray(a, np.float64), np.asarray(b, np.float64)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    dwt = np.empty(problem.filter_shape)
    for gi in range(g):
        dyg = dy[:, gi * kg:(gi + 1) * kg]
        for r in range(problem.r):
            for s in range(problem.s):
                xs = xp[:, gi * cg:(gi + 1) * cg,
                        r * dh:r * dh + rows.stop:sh, s * dw:s * dw + cols.stop:sw]
                dwt[gi * kg:(gi + 1) * kg, :, r, s] = np.einsum("nkpq,ncpq->kc", dyg, xs)
    return dwt


def relative_error(y: np.ndarray, ref: np.ndarray) -> float:
    """‖y - ref‖ / ‖ref‖ in float64 (0 when both are zero)."""
    diff = np.linalg.norm((np.asarray(y, dtype=np.float64) - ref).ravel())
    norm = np.linalg.norm(ref.ravel())
    return float(diff / norm) if norm else float(diff)


def max_abs_error(y: np.ndarray, ref: np.ndarray) -> float:
    """Largest absolute difference, in float64."""
    return float(np.max(np.abs(np.asarray(y, dtype=np.float64) - ref))) if ref.size else 0.0


#: Relative-error tolerances by (dtype, algorithm family): FFT rounds more than GEMM paths.
#: float16 and bfloat16 are dominated by rounding the output to storage (2**-11 and 2**-8
#: relative, per element), with float32 accumulation.
TOLERANCES: dict[str, dict[str, float]] = {
    "float64": {"default": 1e-10, "fft": 1e-9},
    "float32": {"default": 1e-5, "fft": 1e-4},
    "float16": {"default": 2e-3, "fft": 4e-3},
    "bfloat16": {"default": 1e-2, "fft": 2e-2},
}

#: What math="tf32" allows, like PyTorch's allow_tf32: operands rounded to 10 mantissa bits.
TF32_TOLERANCE = 1e-3


def tolerance(dtype: str, algorithm: str, math: str = "fp32") -> float:
    """The relative error a correct `algorithm` may show in `dtype` under `math`.

    Under "tf32" any algorithm within TF32's error is correct, FP32-accurate ones included.
    """
    table = TOLERANCES[dtype]
    limit = table.get(algorithm, table["default"])
    return max(limit, TF32_TOLERANCE) if math == "tf32" else limit
