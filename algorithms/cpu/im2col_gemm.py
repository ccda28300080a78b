"""im2col + GEMM on the CPU: materialise the column matrix, then one BLAS GEMM per image.

Supports float32, float64 and float16 (float16 storage, float32 column matrix and GEMM)
with any stride, padding, dilation and groups. Per image, the column matrix holds, for each
group, cg*r*s rows by out_h*out_w columns; all groups share one batched GEMM.

Workspace (E = element size of the compute dtype: the problem's, or 4 for float16):
    align(c*r*s * out_h*out_w * E)                              the column matrix
  + float16 only: align(k*(c/groups)*r*s * 4)                   the filter in float32
                + align(k * out_h*out_w * 4)                    one image's output in float32
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from algorithms.cpu._common import (
    CpuAlgorithm,
    WorkspaceLayout,
    compute_dtype,
    covers_output,
    tap_windows,
)
from algorithms.problem import ConvProblem


def _layout(problem: ConvProblem) -> WorkspaceLayout:
    g = problem.groups
    cg, kg = problem.c // g, problem.k // g
    pixels = problem.out_hw[0] * problem.out_hw[1]
    depth = cg * problem.r * problem.s
    dtype = compute_dtype(problem)
    layout = WorkspaceLayout().add("col", (g, depth, pixels), dtype)
    if dtype != np.dtype(problem.dtype):
        layout.add("w", (g, kg, depth), dtype).add("y", (g, kg, pixels), dtype)
    return layout


class Im2colGemmConv(CpuAlgorithm):
    """Column matrix in the workspace, then a GEMM with the filter matrix."""

    name: ClassVar[str] = "im2col_gemm"

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """The column matrix for one image (plus float32 staging for float16)."""
        return _layout(problem).nbytes

    def _run(
        self, x: np.ndarray, w: np.ndarray, y: np.ndarray, workspace: np.ndarray | None,
        problem: ConvProblem, config: str,
    ) -> None:
        """y = x ⋆ w via im2col and GEMM, one image at a time."""
        g = problem.groups
        cg, kg = problem.c // g, problem.k // g
        out_h, out_w = problem.out_hw
        buf = _layout(problem).views(workspace)
        col = buf["col"]
        col6 = col.reshape(g, cg, problem.r, problem.s, out_h, out_w)
        windows = list(tap_windows(problem))
        # Only the padding positions must be zero, and they are the same for every image,
        # so one fill serves the whole batch (each image overwrites just the valid windows).
        if not covers_output(problem, windows):
            col.fill(0)
        staged = "y" in buf
        if staged:
            w_mat = buf["w"]
            np.copyto(w_mat, w.reshape(w_mat.shape))
        else:
            w_mat = w.reshape(g, kg, cg * problem.r * problem.s)
        for b in range(problem.n):
            x_img = x[b].reshape(g, cg, problem.h, problem.w)
            for win in windows:
                np.copyto(
                    col6[:, :, win.r, win.s, win.out_h, win.out_w],
                    x_img[:, :, win.in_h, win.in_w],
                )
            y_img = buf["y"] if staged else y[b].reshape(g, kg, out_h * out_w)
            np.matmul(w_mat, col, out=y_img)
            if staged:
                np.copyto(y[b].reshape(y_img.shape), y_img)
