"""Direct convolution on the CPU: one accumulation into the result per filter tap.

Supports float32 and float64 with any stride, padding, dilation and groups, in every
direction: forward (y += w_tap x_window), backward_data (dx_window += w_tap^T dy) and
backward_filter (dw_tap = sum over the batch of dy x_window^T). 16-bit storage is
unsupported: the sums accumulate in the result buffer, which would round every partial
sum. Workspace: 0 bytes. Nothing is padded or copied as a whole: for each tap (r, s) only
the positions whose input lands inside the image are updated, from strided views (one
image at a time going forward and backward-data, so temporaries stay one image's size).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from algorithms.base import Work
from algorithms.cpu._common import CpuAlgorithm, tap_windows
from algorithms.cpu.gemm import matmul
from algorithms.problem import ConvProblem


class DirectConv(CpuAlgorithm):
    """Tap-by-tap accumulation straight into the result; no workspace (every direction)."""

    name: ClassVar[str] = "direct"
    directions: ClassVar[tuple[str, ...]] = ("forward", "backward_data", "backward_filter")

    # Sums accumulate in the output buffer: 16-bit storage would round every partial sum.
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "float64")

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """Always 0."""
        return 0

    def work(self, problem: ConvProblem, config: str) -> Work:
        """One accumulation per filter tap, per image except for backward_filter."""
        images = 1 if problem.direction == "backward_filter" else problem.n
        return Work(launches=images * problem.r * problem.s)

    def _run(
        self, a: np.ndarray, b: np.ndarray, out: np.ndarray, workspace: np.ndarray | None,
        problem: ConvProblem, config: str,
    ) -> None:
        """The problem's direction, accumulated one filter tap at a time."""
        g = problem.groups
        cg, kg = problem.c // g, problem.k // g
        out_h, out_w = problem.out_hw
        x_shape = (problem.n, g, cg, problem.h, problem.w)
        y_shape = (problem.n, g, kg, out_h, out_w)
        windows = list(tap_windows(problem))
        out.fill(0)  # also the stride holes of dx, which no tap reaches
        if problem.direction == "backward_filter":
            xg, dyg = a.reshape(x_shape), b.reshape(y_shape)
            dwg = out.reshape(g, kg, cg, problem.r, problem.s)
            for win in windows:
                # Sum over the batch and the tap's output window: (g, kg, cg) per tap.
                dy_tap = dyg[:, :, :, win.out_h, win.out_w]
                x_tap = xg[:, :, :, win.in_h, win.in_w]
                dwg[:, :, :, win.r, win.s] = np.einsum("ngkpq,ngcpq->gkc", dy_tap, x_tap)
            return
        wg = b.reshape(g, kg, cg, problem.r, problem.s)
        forward = problem.direction == "forward"
        src = a.reshape(x_shape if forward else y_shape)
        dst = out.reshape(y_shape if forward else x_shape)
        # Image-outer order keeps one image's result cache-resident across all its taps.
        for i in range(problem.n):
            for win in windows:
                rows = win.out_h.stop - win.out_h.start
                cols = win.out_w.stop - win.out_w.start
                w_tap = wg[:, :, :, win.r, win.s]  # (g, kg, cg)
                if forward:
                    read, write, mat = (win.in_h, win.in_w), (win.out_h, win.out_w), w_tap
                else:  # backward_data: the transposed tap, from dy's window onto dx's
                    read, write = (win.out_h, win.out_w), (win.in_h, win.in_w)
                    mat = w_tap.transpose(0, 2, 1)
                part_in = src[i, :, :, read[0], read[1]].reshape(g, mat.shape[2], rows * cols)
                # Depthwise-style (one channel per group): a broadcast product beats g
                # 1-deep GEMMs.
                part = mat * part_in if mat.shape[2] == 1 else matmul(mat, part_in)
                dst[i, :, :, write[0], write[1]] += part.reshape(g, mat.shape[1], rows, cols)
