"""Helpers shared by the CPU algorithms: tap windows and compute dtypes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from algorithms.base import AlgorithmBase
from algorithms.problem import ConvProblem


def compute_dtype(problem: ConvProblem) -> np.dtype[Any]:
    """The dtype arithmetic runs in: float32 for 16-bit storage, else the storage dtype."""
    if problem.dtype in ("float16", "bfloat16"):
        return np.dtype(np.float32)
    return np.dtype(problem.dtype)


def tap_range(out_len: int, in_len: int, stride: int, pad: int, offset: int) -> tuple[int, int]:
    """Output indices [lo, hi) whose input index o*stride - pad + offset lies in [0, in_len).

    `offset` is the tap's position in the dilated footprint (tap * dilation); hi <= lo
    means the tap only ever reads padding.
    """
    first = pad - offset  # o*stride must be >= this
    lo = max(0, -(-first // stride))
    hi = min(out_len, (in_len - 1 + pad - offset) // stride + 1)
    return lo, max(lo, hi)


@dataclass(frozen=True)
class TapWindow:
    """Where one filter tap (r, s) contributes: output slices and the matching input slices."""

    r: int
    s: int
    out_h: slice
    out_w: slice
    in_h: slice
    in_w: slice


def tap_windows(problem: ConvProblem) -> Iterator[TapWindow]:
    """The taps that read at least one real (non-padding) input element, with their windows."""
    (ph, pw), (sh, sw), (dh, dw) = problem.pad, problem.stride, problem.dilation
    out_h, out_w = problem.out_hw
    rows = [tap_range(out_h, problem.h, sh, ph, r * dh) for r in range(problem.r)]
    cols = [tap_range(out_w, problem.w, sw, pw, s * dw) for s in range(problem.s)]
    for r, (oh0, oh1) in enumerate(rows):
        if oh1 <= oh0:
            continue
        ih0 = oh0 * sh - ph + r * dh
        in_h = slice(ih0, ih0 + (oh1 - oh0 - 1) * sh + 1, sh)
        for s, (ow0, ow1) in enumerate(cols):
            if ow1 <= ow0:
                continue
            iw0 = ow0 * sw - pw + s * dw
            in_w = slice(iw0, iw0 + (ow1 - ow0 - 1) * sw + 1, sw)
            yield TapWindow(r, s, slice(oh0, oh1), slice(ow0, ow1), in_h, in_w)


def covers_output(problem: ConvProblem, windows: list[TapWindow]) -> bool:
    """Whether every tap reads real input at every output position (no padding is ever read)."""
    out_h, out_w = problem.out_hw
    if len(windows) != problem.r * problem.s:
        return False
    return all(
        (win.out_h.start, win.out_h.stop, win.out_w.start, win.out_w.stop) == (0, out_h, 0, out_w)
        for win in windows
    )


class CpuAlgorithm(AlgorithmBase):
    """A CPU implementation: NumPy arrays in and out, run on the calling thread."""

    backend: ClassVar[str] = "cpu"
