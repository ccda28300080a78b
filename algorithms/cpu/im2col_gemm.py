"""im2col + GEMM on the CPU: materialise the column matrix, then one BLAS GEMM per image.

Supports float32, float64, float16 and bfloat16 (16-bit storage, float32 column matrix and GEMM)
with any stride, padding, dilation and groups. Per image, the column matrix holds, for each
group, cg*r*s rows by out_h*out_w columns; all groups share one batched GEMM.

Every direction: forward, backward_data (col = W^T dy, then col2im) and backward_filter
(dW = sum over images of dy col^T).

Pointwise layers (1x1, stride 1, no padding) in float32 or float64 have no column matrix: an
image of x (forward, backward_filter) or dx (backward_data) is its own.

Workspace (E = element size of the compute dtype: the problem's, or 4 for 16-bit storage):
    align(c*r*s * out_h*out_w * E)                              the column matrix (but for
                                                                pointwise layers unstaged)
  + 16-bit storage only, float32 staging of: forward: the filter and one image's output;
    backward_data: dy of one image, the filter, dx of one image; backward_filter: dy of one
    image and the dW accumulator.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from algorithms.base import Work, WorkspaceLayout
from algorithms.cpu._common import (
    CpuAlgorithm,
    TapWindow,
    compute_dtype,
    covers_output,
    tap_windows,
)
from algorithms.cpu.gemm import matmul
from algorithms.problem import ConvProblem


def _layout(problem: ConvProblem) -> WorkspaceLayout:
    g = problem.groups
    cg, kg = problem.c // g, problem.k // g
    pixels = problem.out_hw[0] * problem.out_hw[1]
    depth = cg * problem.r * problem.s
    dtype = compute_dtype(problem)
    layout = WorkspaceLayout()
    staged = dtype != np.dtype(problem.dtype)
    if staged or not problem.pointwise:
        layout.add("col", (g, depth, pixels), dtype)
    if not staged:
        return layout
    # 16-bit storage: operands and results staged in float32 for the BLAS calls.
    if problem.direction == "forward":
        return layout.add("w", (g, kg, depth), dtype).add("y", (g, kg, pixels), dtype)
    layout.add("dy", (g, kg, pixels), dtype)
    if problem.direction == "backward_data":
        return layout.add("w", (g, kg, depth), dtype).add(
            "dx", (g, cg, problem.h, problem.w), dtype)
    return layout.add("dw", (g, kg, depth), dtype)


class Im2colGemmConv(CpuAlgorithm):
    """Column matrix in the workspace, then a GEMM with the filter matrix (every direction).

    backward_data is col = W^T dy then col2im (a scatter-add of the columns);
    backward_filter is dW = sum over images of dy col^T.
    """

    name: ClassVar[str] = "im2col_gemm"
    directions: ClassVar[tuple[str, ...]] = ("forward", "backward_data", "backward_filter")

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """The column matrix for one image (plus float32 staging for 16-bit storage)."""
        return _layout(problem).nbytes

    def work(self, problem: ConvProblem, config: str) -> Work:
        """Per image, a copy per filter tap and one GEMM: the Python loop's length."""
        return Work(launches=problem.n * (problem.r * problem.s + 1))

    def _run(
        self, a: np.ndarray, b: np.ndarray, out: np.ndarray, workspace: np.ndarray | None,
        problem: ConvProblem, config: str,
    ) -> None:
        """The problem's direction via im2col (or col2im) and GEMMs, one image at a time."""
        layout = _layout(problem)
        buf = layout.views(workspace) if layout.nbytes else {}
        windows = list(tap_windows(problem))
        if problem.direction == "backward_data":
            _backward_data(a, b, out, buf, problem, windows)
            return
        # Only the padding positions of the column matrix must be zero, and they are the
        # same for every image: one fill serves the batch (images overwrite valid windows).
        if not covers_output(problem, windows):
            buf["col"].fill(0)
        if problem.direction == "backward_filter":
            _backward_filter(a, b, out, buf, problem, windows)
        else:
            _forward(a, b, out, buf, problem, windows)


def _columns(x_img: np.ndarray, buf: dict[str, np.ndarray], problem: ConvProblem,
             windows: list[TapWindow]) -> np.ndarray:
    """The column matrix (g, cg*r*s, pixels) of one image: im2col into buf["col"] (its
    padding positions already zero), or the image itself where the layout has no "col"."""
    g = problem.groups
    if "col" not in buf:  # unstaged pointwise
        return x_img.reshape(g, problem.c // g, -1)
    out_h, out_w = problem.out_hw
    col = buf["col"]
    col6 = col.reshape(g, problem.c // g, problem.r, problem.s, out_h, out_w)
    x_img = x_img.reshape(g, problem.c // g, problem.h, problem.w)
    for win in windows:
        np.copyto(col6[:, :, win.r, win.s, win.out_h, win.out_w],
                  x_img[:, :, win.in_h, win.in_w])
    return col


def _forward(x: np.ndarray, w: np.ndarray, y: np.ndarray, buf: dict[str, np.ndarray],
             problem: ConvProblem, windows: list[TapWindow]) -> None:
    g, kg = problem.groups, problem.k // problem.groups
    staged = "y" in buf
    w_mat = buf["w"] if staged else w.reshape(g, kg, -1)
    if staged:
        np.copyto(w_mat, w.reshape(w_mat.shape))
    for i in range(problem.n):
        col = _columns(x[i], buf, problem, windows)
        y_img = buf["y"] if staged else y[i].reshape(g, kg, -1)
        matmul(w_mat, col, out=y_img)
        if staged:
            np.copyto(y[i].reshape(y_img.shape), y_img)


def _backward_filter(x: np.ndarray, dy: np.ndarray, dw: np.ndarray,
                     buf: dict[str, np.ndarray], problem: ConvProblem,
                     windows: list[TapWindow]) -> None:
    g, kg = problem.groups, problem.k // problem.groups
    staged = "dw" in buf
    acc = buf["dw"] if staged else dw.reshape(g, kg, -1)
    acc.fill(0)
    for i in range(problem.n):
        col = _columns(x[i], buf, problem, windows)
        dy_img = dy[i].reshape(g, kg, -1)
        if "dy" in buf:
            np.copyto(buf["dy"], dy_img)
            dy_img = buf["dy"]
        acc += matmul(dy_img, col.transpose(0, 2, 1))
    if staged:
        np.copyto(dw.reshape(acc.shape), acc)


def _backward_data(dy: np.ndarray, w: np.ndarray, dx: np.ndarray, buf: dict[str, np.ndarray],
                   problem: ConvProblem, windows: list[TapWindow]) -> None:
    g = problem.groups
    cg, kg = problem.c // g, problem.k // g
    out_h, out_w = problem.out_hw
    w_mat = w.reshape(g, kg, -1)
    if "w" in buf:
        np.copyto(buf["w"], w_mat)
        w_mat = buf["w"]
    w_t = w_mat.transpose(0, 2, 1)  # (g, cg*r*s, kg)
    for i in range(problem.n):
        dy_img = dy[i].reshape(g, kg, -1)
        if "dy" in buf:
            np.copyto(buf["dy"], dy_img)
            dy_img = buf["dy"]
        if "col" not in buf:  # unstaged pointwise: dx's image is the column matrix
            matmul(w_t, dy_img, out=dx[i].reshape(g, cg, -1))
            continue
        matmul(w_t, dy_img, out=buf["col"])
        col6 = buf["col"].reshape(g, cg, problem.r, problem.s, out_h, out_w)
        dx_img = buf["dx"] if "dx" in buf else dx[i].reshape(g, cg, problem.h, problem.w)
        dx_img.fill(0)  # positions no tap reaches (stride holes) stay zero
        for win in windows:  # col2im: every column entry back onto its input pixel
            dx_img[:, :, win.in_h, win.in_w] += col6[:, :, win.r, win.s, win.out_h, win.out_w]
        if "dx" in buf:
            np.copyto(dx[i].reshape(dx_img.shape), dx_img)
