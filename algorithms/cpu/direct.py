"""Direct convolution on the CPU: one accumulation into the output per filter tap.

Supports float32 and float64 with any stride, padding, dilation and groups. float16 is
unsupported: the sums accumulate in the output buffer, which would round every partial sum
to float16. Workspace: 0 bytes. The input is never padded or copied as a whole: for each
tap (r, s) only the output positions whose input lands inside the image are updated, from
a strided view of the input (one image at a time, so temporaries stay one image's size).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from algorithms.base import SUPPORTED, Support, unsupported
from algorithms.cpu._common import CpuAlgorithm, tap_windows
from algorithms.problem import ConvProblem


class DirectConv(CpuAlgorithm):
    """Tap-by-tap accumulation straight into y; no workspace."""

    name: ClassVar[str] = "direct"

    def supports(self, problem: ConvProblem) -> Support:
        """float32 and float64 only (float16 would accumulate in float16)."""
        if problem.dtype == "float16":
            return unsupported(
                "direct accumulates in the output buffer, so float16 would round every "
                "partial sum to float16; use an algorithm with float32 accumulation"
            )
        return SUPPORTED

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """Always 0."""
        return 0

    def _run(
        self, x: np.ndarray, w: np.ndarray, y: np.ndarray, workspace: np.ndarray | None,
        problem: ConvProblem, config: str,
    ) -> None:
        """y = x ⋆ w, accumulated one filter tap at a time."""
        g = problem.groups
        cg, kg = problem.c // g, problem.k // g
        out_h, out_w = problem.out_hw
        xg = x.reshape(problem.n, g, cg, problem.h, problem.w)
        wg = w.reshape(g, kg, cg, problem.r, problem.s)
        yg = y.reshape(problem.n, g, kg, out_h, out_w)
        y.fill(0)
        windows = list(tap_windows(problem))
        # Image-outer order keeps one image's output cache-resident across all its taps.
        for b in range(problem.n):
            for win in windows:
                rows = win.out_h.stop - win.out_h.start
                cols = win.out_w.stop - win.out_w.start
                w_tap = wg[:, :, :, win.r, win.s]  # (g, kg, cg)
                x_tap = xg[b, :, :, win.in_h, win.in_w].reshape(g, cg, rows * cols)
                # Depthwise-style (cg == 1): a broadcast product beats g 1-deep GEMMs.
                part = w_tap * x_tap if cg == 1 else np.matmul(w_tap, x_tap)
                yg[b, :, :, win.out_h, win.out_w] += part.reshape(g, kg, rows, cols)
