"""Implicit GEMM on the CPU: GEMM tiles gathered from the input on the fly, no column matrix.

Supports float32, float64, float16 and bfloat16 (16-bit storage, float32 tiles, accumulator)
with any stride, padding, dilation and groups. Per group the convolution is the GEMM
M = k/groups (output channels) x N = output pixels x K = (c/groups)*r*s. A pixel tile is
either whole images (when an image has at most BN pixels) or BN pixels of one image; for
each K-step of BK rows of (c, r, s) the [BK, BN] input tile is gathered straight from x at
flat offsets row_offset[(c, r, s)] + col_offset[(image, oh, ow)], the positions that fall
in the padding are zeroed, and acc[kg, BN] += w_tile[kg, BK] @ tile.

BK is rounded down to a multiple of r*s (and is at least r*s), so every K-step holds whole
(r, s) cycles and one [r*s, BN] padding mask per pixel tile serves all of its steps.

Workspace, independent of n and of h*w beyond one tile (E: compute element size, the
problem's or 4 for 16-bit storage; BN, BK: the tile sizes actually used):
    align(BK*BN*E) tile + align(BK*BN*8) gather offsets + align(r*s*BN) padding mask
  + align(kg*BN*E) accumulator (+ align(kg*BN*E) partial product when K > BK)
  + 16-bit storage only: align(BK*BN*2) gathered float16 tile + align(k*(c/groups)*r*s*4) filter
Configs name the tile caps, "bn<BN>_bk<BK>".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from algorithms.base import Work, WorkspaceLayout
from algorithms.cpu._by_forward import CpuByForward
from algorithms.cpu._common import CpuAlgorithm, compute_dtype
from algorithms.cpu.gemm import matmul
from algorithms.problem import ConvProblem

#: Tile caps: large tiles keep the Python loop short and BLAS calls big; small ones need
#: several times less workspace (what a tight workspace limit leaves) and stay in cache.
_CONFIGS: tuple[str, ...] = ("bn4096_bk256", "bn1024_bk64")
_CONFIG_RE = re.compile(r"bn(\d+)_bk(\d+)")


@dataclass(frozen=True)
class _Tiling:
    """The tile sizes one config gives one problem."""

    images: int  # images per pixel tile (1 when an image is split into several tiles)
    pixels: int  # pixels per tile (BN actually used)
    depth: int  # K rows per step (BK actually used)


def _tiling(problem: ConvProblem, config: str) -> _Tiling:
    match = _CONFIG_RE.fullmatch(config)
    assert match is not None  # check_config has vetted the name
    bn, bk = int(match.group(1)), int(match.group(2))
    taps = problem.r * problem.s
    per_image = problem.out_hw[0] * problem.out_hw[1]
    depth = min(max(taps, bk // taps * taps), (problem.c // problem.groups) * taps)
    if per_image <= bn:
        images = min(problem.n, bn // per_image)
        return _Tiling(images, images * per_image, depth)
    return _Tiling(1, bn, depth)


def _layout(problem: ConvProblem, tiling: _Tiling) -> WorkspaceLayout:
    dtype = compute_dtype(problem)
    kg = problem.k // problem.groups
    depth = (problem.c // problem.groups) * problem.r * problem.s
    tile = (tiling.depth, tiling.pixels)
    layout = (
        WorkspaceLayout()
        .add("tile", tile, dtype)
        .add("index", tile, np.intp)
        .add("pad", (problem.r, problem.s, tiling.pixels), np.bool_)
        .add("acc", (kg, tiling.pixels), dtype)
    )
    if depth > tiling.depth:
        layout.add("part", (kg, tiling.pixels), dtype)
    if dtype != np.dtype(problem.dtype):
        layout.add("tile_in", tile, problem.dtype).add("w", (problem.k, depth), dtype)
    return layout


def _flat(buffer: np.ndarray, *shape: int) -> np.ndarray:
    """A contiguous `shape` view of the start of a buffer (partial tiles stay contiguous)."""
    return buffer.reshape(-1)[: int(np.prod(shape))].reshape(shape)


class _ImplicitGemmConvForward(CpuAlgorithm):
    """GEMM over gathered input tiles; bounded workspace."""

    name: ClassVar[str] = "implicit_gemm"

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """Two tile-size caps: bn4096_bk256 and bn1024_bk64."""
        return _CONFIGS

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """One gathered tile, its offsets and masks, and the accumulator."""
        return _layout(problem, _tiling(problem, config)).nbytes

    def work(self, problem: ConvProblem, config: str) -> Work:
        """One gather and GEMM per (pixel tile, group, K-step): the Python loop's length."""
        tiling = _tiling(problem, config)
        out_h, out_w = problem.out_hw
        # _run's two tile loops: over image groups, then over each one's pixels.
        pixel_tiles = -(-problem.n // tiling.images) * -(-(out_h * out_w) // tiling.pixels)
        k_steps = -(-(problem.c // problem.groups) * problem.r * problem.s // tiling.depth)
        return Work(launches=pixel_tiles * problem.groups * k_steps)

    def _run(
        self, x: np.ndarray, w: np.ndarray, y: np.ndarray, workspace: np.ndarray | None,
        problem: ConvProblem, config: str,
    ) -> None:
        """y = x ⋆ w as tiled GEMMs over on-the-fly gathered input tiles."""
        tiling = _tiling(problem, config)
        buf = _layout(problem, tiling).views(workspace)
        n, c, h, wd = problem.n, problem.c, problem.h, problem.w
        g = problem.groups
        cg, kg = c // g, problem.k // g
        (ph, pw), (sh, sw), (dh, dw) = problem.pad, problem.stride, problem.dilation
        out_h, out_w = problem.out_hw
        per_image = out_h * out_w
        depth = cg * problem.r * problem.s

        # Row (K) offsets of (c, r, s), in the filter's own order so w needs no reorder.
        ci, ri, si = np.meshgrid(
            np.arange(cg), np.arange(problem.r), np.arange(problem.s), indexing="ij"
        )
        row_off = (ci * h * wd + ri * dh * wd + si * dw).ravel()
        tap_h = np.arange(problem.r) * dh
        tap_w = np.arange(problem.s) * dw

        if "w" in buf:
            w_mat = buf["w"]
            np.copyto(w_mat, w.reshape(w_mat.shape))
        else:
            w_mat = w.reshape(problem.k, depth)
        x_flat = x.reshape(-1)
        y3 = y.reshape(n, problem.k, per_image)

        for b0 in range(0, n, tiling.images):
            b1 = min(n, b0 + tiling.images)
            for p0 in range(0, per_image, tiling.pixels):
                p1 = min(per_image, p0 + tiling.pixels)
                # Column (N) coordinates of this tile's output pixels.
                pix = np.arange(p0, p1)
                col_h = np.tile(pix // out_w * sh - ph, b1 - b0)
                col_w = np.tile(pix % out_w * sw - pw, b1 - b0)
                col_off = np.repeat(np.arange(b0, b1) * (c * h * wd), p1 - p0)
                col_off += col_h * wd + col_w
                width = col_off.size
                # Padding depends on (r, s) and the pixel only, not on the channel.
                pad = _flat(buf["pad"], problem.r, problem.s, width)
                # As unsigned, negative coordinates wrap to huge values: one compare per axis.
                bad_h = (tap_h[:, None] + col_h).view(np.uintp) >= h
                bad_w = (tap_w[:, None] + col_w).view(np.uintp) >= wd
                np.logical_or(bad_h[:, None, :], bad_w[None, :, :], out=pad)
                pad_rows = pad.reshape(1, problem.r * problem.s, width) if pad.any() else None
                acc = _flat(buf["acc"], kg, width)
                for gi in range(g):
                    group_off = col_off + gi * cg * h * wd
                    for k0 in range(0, depth, tiling.depth):
                        k1 = min(depth, k0 + tiling.depth)
                        tile = self._gather(buf, x_flat, row_off[k0:k1], group_off, pad_rows)
                        w_tile = w_mat[gi * kg : (gi + 1) * kg, k0:k1]
                        if k0 == 0:
                            matmul(w_tile, tile, out=acc)
                        else:
                            part = _flat(buf["part"], kg, width)
                            matmul(w_tile, tile, out=part)
                            acc += part
                    dest = y3[b0:b1, gi * kg : (gi + 1) * kg, p0:p1]
                    np.copyto(dest, acc.reshape(kg, b1 - b0, p1 - p0).transpose(1, 0, 2))

    @staticmethod
    def _gather(
        buf: dict[str, np.ndarray],
        x_flat: np.ndarray,
        row_off: np.ndarray,
        col_off: np.ndarray,
        pad_rows: np.ndarray | None,
    ) -> np.ndarray:
        """Gather the [rows, cols] input tile into the workspace, padding positions zeroed."""
        shape = (row_off.size, col_off.size)
        tile = _flat(buf["tile"], *shape)
        index = _flat(buf["index"], *shape)
        np.add(row_off[:, None], col_off[None, :], out=index)
        # "clip" keeps padding positions' (meaningless) offsets in bounds; they are zeroed.
        if "tile_in" in buf:
            tile_in = _flat(buf["tile_in"], *shape)
            np.take(x_flat, index, out=tile_in, mode="clip")
            np.copyto(tile, tile_in)
        else:
            np.take(x_flat, index, out=tile, mode="clip")
        if pad_rows is not None:
            # Steps hold whole (r, s) cycles, so the mask broadcasts over the channels.
            np.copyto(tile.reshape(-1, *pad_rows.shape[1:]), 0, where=pad_rows)
        return tile


class ImplicitGemmConv(CpuByForward, _ImplicitGemmConvForward):
    """The forward algorithm above, and both backward directions through it."""
