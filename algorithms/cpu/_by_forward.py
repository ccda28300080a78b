"""Backward directions computed by a forward algorithm on a rearranged problem.

Both gradients of a cross-correlation are cross-correlations themselves:

- backward_data: dx = (dy with stride-1 zeros inserted, framed by (r-1)*dilation rows and
  columns of zeros) cross-correlated, stride 1 and the same dilation, with the filter
  flipped in (r, s) and transposed within each group (k <-> c/groups).
- backward_filter, per group: dw^T = x^T (batch and channel swapped, padded, cropped to
  (r-1)*dilation + (out-1)*stride + 1) cross-correlated with dy^T as the filter
  (out_h x out_w taps), stride = the dilation and dilation = the stride; the result
  (c/groups, k/groups, r, s) is dw of that group transposed.

The rearranged operands are exact copies (no arithmetic), so the error is the forward
algorithm's on the rearranged problem. `ByForward` wraps a forward-only CPU algorithm:
the subclass lists it after `ByForward` in its bases, and every method maps a backward
problem to `forward_problem(problem)` before calling the forward implementation.

Workspace (E: the storage element size; F: the forward algorithm's workspace for the
rearranged problem):
    backward_data:   align(n*k*(h+(r-1)*dh)*(w+(s-1)*dw)*E) + align(c*(k/g)*r*s*E) + F
    backward_filter: align((c/g)*n*H'*W'*E) + align((k/g)*n*out_h*out_w*E)
                     + align((c/g)*(k/g)*r*s*E) + F, with H' = (r-1)*dh + (out_h-1)*sh + 1
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from algorithms.base import Support, unsupported
from algorithms.cpu._common import CpuAlgorithm, WorkspaceLayout
from algorithms.problem import DIRECTIONS, ConvProblem


def forward_problem(problem: ConvProblem) -> ConvProblem:
    """The forward problem whose output is (a rearrangement of) the backward result."""
    if problem.direction == "forward":
        return problem
    (dh, dw), (sh, sw) = problem.dilation, problem.stride
    out_h, out_w = problem.out_hw
    g = problem.groups
    if problem.direction == "backward_data":
        return ConvProblem(
            n=problem.n, c=problem.k, h=problem.h + (problem.r - 1) * dh,
            w=problem.w + (problem.s - 1) * dw, k=problem.c, r=problem.r, s=problem.s,
            dilation=problem.dilation, groups=g, dtype=problem.dtype, math=problem.math,
        )
    # backward_filter, one group at a time: batch c/g, channels n, k/g out_h x out_w filters.
    return ConvProblem(
        n=problem.c // g, c=problem.n, h=(problem.r - 1) * dh + (out_h - 1) * sh + 1,
        w=(problem.s - 1) * dw + (out_w - 1) * sw + 1, k=problem.k // g, r=out_h, s=out_w,
        stride=problem.dilation, dilation=problem.stride, dtype=problem.dtype,
        math=problem.math,
    )


def _layout(problem: ConvProblem, inner: ConvProblem) -> WorkspaceLayout:
    """The rearranged operands (storage dtype), before the forward algorithm's workspace."""
    a_shape, b_shape, out_shape = inner.operand_shapes
    layout = WorkspaceLayout().add("a", a_shape, problem.dtype).add("b", b_shape, problem.dtype)
    if problem.direction == "backward_filter":
        layout.add("out", out_shape, problem.dtype)
    return layout


class ByForward(CpuAlgorithm):
    """Serves both backward directions through the forward implementation after it in the MRO."""

    directions: ClassVar[tuple[str, ...]] = DIRECTIONS

    def _limits(self, problem: ConvProblem) -> Support:
        """The forward algorithm's limits on the rearranged problem."""
        if problem.direction == "forward":
            return super()._limits(problem)
        try:
            inner = forward_problem(problem)
        except ValueError as exc:  # e.g. a rearranged size over the problem limits
            return unsupported(f"the rearranged forward problem is invalid: {exc}")
        found = super().supports(inner)
        if not found:
            return unsupported(f"{problem.direction} as a forward problem: {found.reason}")
        return found

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """The forward algorithm's configs for the rearranged problem."""
        return super().configs(forward_problem(problem))

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """Rearranged operands plus the forward algorithm's workspace."""
        if problem.direction == "forward":
            return super()._workspace(problem, config)
        inner = forward_problem(problem)
        return _layout(problem, inner).nbytes + super()._workspace(inner, config)

    def _run(
        self, a: Any, b: Any, out: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Rearrange, run forward, rearrange back."""
        if problem.direction == "forward":
            super()._run(a, b, out, workspace, problem, config)
            return
        inner = forward_problem(problem)
        layout = _layout(problem, inner)
        buf = layout.views(workspace)
        rest = workspace[layout.nbytes:] if super()._workspace(inner, config) else None
        if problem.direction == "backward_data":
            _spread_dy(a, buf["a"], problem)
            _flip_transpose(b, buf["b"], problem)
            super()._run(buf["a"], buf["b"], out, rest, inner, config)
            return
        g, kg, cg = problem.groups, problem.k // problem.groups, problem.c // problem.groups
        (ph, pw) = problem.pad
        dwg = out.reshape(g, kg, cg, problem.r, problem.s)
        for gi in range(g):
            _window_x(a[:, gi * cg:(gi + 1) * cg], buf["a"], ph, pw)
            np.copyto(buf["b"], b[:, gi * kg:(gi + 1) * kg].transpose(1, 0, 2, 3))
            super()._run(buf["a"], buf["b"], buf["out"], rest, inner, config)
            np.copyto(dwg[gi], buf["out"].transpose(1, 0, 2, 3))


def _spread_dy(dy: np.ndarray, dst: np.ndarray, problem: ConvProblem) -> None:
    """dst = dy with stride-1 zeros between its elements, placed so that a stride-1 dilated
    correlation with the flipped filter gives dx (positions outside dst are never read)."""
    dst.fill(0)
    (ph, pw), (sh, sw), (dh, dw) = problem.pad, problem.stride, problem.dilation
    out_h, out_w = problem.out_hw
    rows = _placed(out_h, (problem.r - 1) * dh - ph, sh, dst.shape[2])
    cols = _placed(out_w, (problem.s - 1) * dw - pw, sw, dst.shape[3])
    dst[:, :, rows[0], cols[0]] = dy[:, :, rows[1], cols[1]]


def _placed(count: int, first: int, step: int, size: int) -> tuple[slice, slice]:
    """(destination, source) slices of the `count` positions first + i*step inside [0, size)."""
    lo = max(0, -(first // step))  # the first i with first + i*step >= 0
    hi = max(lo, min(count, (size - 1 - first) // step + 1))
    return slice(first + lo * step, first + hi * step, step), slice(lo, hi)


def _flip_transpose(w: np.ndarray, dst: np.ndarray, problem: ConvProblem) -> None:
    """dst (c, k/g, r, s) = w (k, c/g, r, s) flipped in (r, s), k and c swapped per group."""
    g, kg, cg = problem.groups, problem.k // problem.groups, problem.c // problem.groups
    wg = w.reshape(g, kg, cg, problem.r, problem.s)[:, :, :, ::-1, ::-1]
    np.copyto(dst.reshape(g, cg, kg, problem.r, problem.s), wg.transpose(0, 2, 1, 3, 4))


def _window_x(x: np.ndarray, dst: np.ndarray, ph: int, pw: int) -> None:
    """dst (c, n, H', W') = x (n, c, h, w) with batch and channel swapped, zero-padded by
    (ph, pw) and cropped to H' x W' (rows past H' are read by no output)."""
    dst.fill(0)
    height, width = dst.shape[2], dst.shape[3]
    rows = slice(0, min(x.shape[2], height - ph)) if height > ph else slice(0, 0)
    cols = slice(0, min(x.shape[3], width - pw)) if width > pw else slice(0, 0)
    src = x[:, :, rows, cols].transpose(1, 0, 2, 3)
    dst[:, :, ph:ph + src.shape[2], pw:pw + src.shape[3]] = src
