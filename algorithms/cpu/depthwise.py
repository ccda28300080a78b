"""Depthwise convolution on the CPU: groups == c, one filter plane per output channel.

Supports every dtype (float16 and bfloat16 are converted to float32 once per batch chunk and
accumulated in float32) with any kernel size, stride, padding, dilation and channel
multiplier m = k / c, in every direction. Output channel c*m + j reads input channel c only,
so each filter tap (r, s) is one broadcast multiply-add over all images and channels:

- forward:          y[:, c, j, window] += w[c, j, r, s] * x[:, c, tap window]
- backward_data:    dx[:, c, tap window] += sum_j w[c, j, r, s] * dy[:, c, j, window]
- backward_filter:  dw[c, j, r, s] = sum over images and window of dy[:, c, j] * x[:, c]

Only the part of each tap's window that reads real input is touched (no padded copy). Images
go in chunks of at most CHUNK_BYTES per buffer so the temporaries stay cache-sized.

Workspace (E: compute element size, 4 for 16-bit storage; cn: images per chunk; oh x ow the
output, m = k / c):
    align(cn*c*m*oh*ow*E) product of one tap (backward_data: align(cn*c*oh*ow*E))
  + 16-bit storage only: the chunk's two operands converted to float32, and the result's
    float32 accumulator (backward_filter: align(c*m*r*s*4), the whole filter).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from algorithms.base import Support, depthwise_limits
from algorithms.cpu._common import (
    CpuAlgorithm,
    TapWindow,
    WorkspaceLayout,
    compute_dtype,
    tap_windows,
)
from algorithms.problem import ConvProblem

#: Largest per-chunk buffer: a few MB keeps one tap's multiply-add inside L2/L3.
CHUNK_BYTES = 4 << 20


@dataclass(frozen=True)
class _Plan:
    """One problem's chunking and workspace."""

    images: int  # images per chunk
    layout: WorkspaceLayout
    converts: bool  # 16-bit storage: operands converted, results accumulated in float32


def _plan(problem: ConvProblem) -> _Plan:
    dtype = compute_dtype(problem)
    converts = dtype != np.dtype(problem.dtype)
    a_shape, b_shape, out_shape = problem.operand_shapes
    # The product of one tap has the shape of whichever image-sized operand the tap's
    # window writes: y going forward and backward-filter, dx backward-data.
    c, m = problem.c, problem.k // problem.c
    oh, ow = problem.out_hw
    tap = (c, problem.h, problem.w) if problem.direction == "backward_data" else (c * m, oh, ow)
    # The operands chunked by image: a, and b too for backward_filter (b is w otherwise).
    chunked = {"a": a_shape[1:]}
    if problem.direction == "backward_filter":
        chunked["b"] = b_shape[1:]
    per_image = max(int(np.prod(tap)), *(int(np.prod(s)) for s in chunked.values()))
    images = max(1, min(problem.n, CHUNK_BYTES // (per_image * dtype.itemsize)))
    layout = WorkspaceLayout().add("tap", (images, *tap), dtype)
    if converts:
        for name, shape in chunked.items():
            layout.add(name, (images, *shape), dtype)
        if problem.direction == "backward_filter":
            layout.add("out", out_shape, dtype)
        else:
            layout.add("out", (images, *out_shape[1:]), dtype)
    return _Plan(images, layout, converts)


class DepthwiseConv(CpuAlgorithm):
    """Depthwise (groups == c) convolution, one broadcast multiply-add per filter tap."""

    name: ClassVar[str] = "depthwise"
    directions: ClassVar[tuple[str, ...]] = ("forward", "backward_data", "backward_filter")

    def _limits(self, problem: ConvProblem) -> Support:
        return depthwise_limits(problem)

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """The tap product, plus float32 copies for 16-bit storage (module docstring)."""
        return _plan(problem).layout.nbytes

    def _run(
        self, a: np.ndarray, b: np.ndarray, out: np.ndarray, workspace: np.ndarray | None,
        problem: ConvProblem, config: str,
    ) -> None:
        """The problem's direction, chunk by chunk of images, tap by tap."""
        plan = _plan(problem)
        buf = plan.layout.views(workspace)
        windows = list(tap_windows(problem))
        c, m = problem.c, problem.k // problem.c
        oh, ow = problem.out_hw
        # Every operand as (images, c, m or 1, rows, cols): channel c*m + j is [:, c, j].
        x5, y5 = (problem.n, c, 1, problem.h, problem.w), (problem.n, c, m, oh, ow)
        if problem.direction == "backward_filter":
            acc = buf["out"] if plan.converts else out
            acc.fill(0)
            dw = acc.reshape(c, m, problem.r, problem.s)
            for n0 in range(0, problem.n, plan.images):
                xs = self._chunk(a, x5, n0, plan, buf, "a")
                dys = self._chunk(b, y5, n0, plan, buf, "b")
                _filter_taps(xs, dys, dw, windows, buf["tap"])
            if plan.converts:
                out[...] = acc
            return
        forward = problem.direction == "forward"
        src_shape, dst_shape = (x5, y5) if forward else (y5, x5)
        w = b.reshape(c, m, problem.r, problem.s)
        if plan.converts:
            w = w.astype(np.float32)  # c*m*r*s values: negligible next to the images
        for n0 in range(0, problem.n, plan.images):
            src = self._chunk(a, src_shape, n0, plan, buf, "a")
            dst = out.reshape(dst_shape)[n0:n0 + src.shape[0]]
            acc = _head(buf["out"], dst.shape) if plan.converts else dst
            acc.fill(0)  # also the stride holes of dx, which no tap reaches
            for win in windows:
                if forward:
                    _forward_tap(src, acc, w, win, buf["tap"])
                else:
                    _backward_data_tap(src, acc, w, win, buf["tap"])
            if plan.converts:
                dst[...] = acc

    @staticmethod
    def _chunk(array: np.ndarray, shape: tuple[int, ...], n0: int, plan: _Plan,
               buf: dict[str, np.ndarray], name: str) -> np.ndarray:
        """Images [n0, n0 + chunk) of `array` as `shape`, in the compute dtype."""
        part = array.reshape(shape)[n0:n0 + plan.images]
        if not plan.converts:
            return part
        converted = _head(buf[name], part.shape)
        converted[...] = part
        return converted


def _head(buffer: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A contiguous `shape` view of the start of a buffer (a short last chunk included)."""
    return buffer.reshape(-1)[: int(np.prod(shape))].reshape(shape)


def _forward_tap(x: np.ndarray, acc: np.ndarray, w: np.ndarray, win: TapWindow,
                 tap: np.ndarray) -> None:
    """acc[:, c, j, out window] += w[c, j, tap] * x[:, c, 0, in window]."""
    part = x[:, :, :, win.in_h, win.in_w]  # (cn, c, 1, rows, cols)
    prod = _head(tap, (part.shape[0], acc.shape[1], acc.shape[2], *part.shape[3:]))
    np.multiply(part, w[None, :, :, win.r, win.s, None, None], out=prod)
    acc[:, :, :, win.out_h, win.out_w] += prod


def _backward_data_tap(dy: np.ndarray, acc: np.ndarray, w: np.ndarray, win: TapWindow,
                       tap: np.ndarray) -> None:
    """acc[:, c, 0, in window] += sum_j w[c, j, tap] * dy[:, c, j, out window]."""
    part = dy[:, :, :, win.out_h, win.out_w]  # (cn, c, m, rows, cols)
    prod = _head(tap, (part.shape[0], part.shape[1], 1, *part.shape[3:]))
    if part.shape[2] == 1:  # multiplier 1: a plain broadcast product, no reduction
        np.multiply(part, w[None, :, :, win.r, win.s, None, None], out=prod)
    else:
        np.einsum("ncjpq,cj->ncpq", part, w[:, :, win.r, win.s], out=prod[:, :, 0])
    acc[:, :, :, win.in_h, win.in_w] += prod


def _filter_taps(x: np.ndarray, dy: np.ndarray, dw: np.ndarray, windows: list[TapWindow],
                 tap: np.ndarray) -> None:
    """dw[c, j, r, s] += sum over the chunk's images and window of dy[:, c, j] * x[:, c, 0]."""
    for win in windows:
        part_dy = dy[:, :, :, win.out_h, win.out_w]  # (cn, c, m, rows, cols)
        prod = _head(tap, part_dy.shape)
        np.multiply(part_dy, x[:, :, :, win.in_h, win.in_w], out=prod)
        dw[:, :, win.r, win.s] += prod.sum(axis=(0, 3, 4))
