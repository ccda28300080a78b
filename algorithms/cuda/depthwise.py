"""GPU depthwise convolution (kernels/depthwise.cu): one block per (image, channel) tile.

Supports groups == c with any channel multiplier k / c, kernel size, stride, padding and
dilation; float16 and bfloat16 (float accumulation), float32 and float64. Forward only. Not
supported: tensors of 2**31 elements or more, or a problem whose input footprint plus filter
taps exceed 48 KB of shared memory for every configuration (very large dilation or stride).

The kernel is memory-bound: judge it in GB/s, `problem.buffer_bytes` (x, w and y once each,
the least any algorithm moves) over its time, against the HBM copy rate.

Workspace: 0 bytes.

Configurations "<TILE_W>x<TILE_H>p<PH>": a TILE_W x TILE_H tile of output pixels per block,
TILE_W x TILE_H / PH threads, PH vertically adjacent outputs per thread. Large tiles share
their halo over more outputs; small ones waste fewer threads on 7x7 and 14x14 images. A
"_3x3" suffix: the same tile with the filter size compiled in (offered for 3x3 filters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from algorithms.base import SUPPORTED, Support, Work, depthwise_limits, unsupported
from algorithms.cuda._base import CudaAlgorithm
from algorithms.cuda._loader import (
    CTYPES,
    DEFAULT_SMEM_LIMIT,
    ceil_div,
    get_kernel,
    shape_args,
    tensors_fit_int32,
)
from algorithms.problem import ConvProblem

KERNEL_FILE = "depthwise.cu"


@dataclass(frozen=True)
class DwTile:
    """One block's output tile: TW x (TH * PH) pixels, TW x TH threads; a fixed filter size."""

    tw: int  # threads (and output columns) along the width
    th: int  # threads along the height
    ph: int  # output rows per thread
    taps: tuple[int, int] = (0, 0)  # (r, s) compiled in, or (0, 0): any, read at run time

    def fits(self, problem: ConvProblem) -> bool:
        """Whether this instance computes `problem`'s filter size."""
        return self.taps in ((0, 0), (problem.r, problem.s))

    @property
    def tile_h(self) -> int:
        """Output rows per block."""
        return self.th * self.ph


#: Shipped configurations; tests/test_kernels_compile.py checks each compiles spill-free.
CONFIGS: dict[str, DwTile] = {
    "32x32p4": DwTile(32, 8, 4),
    "32x16p2": DwTile(32, 8, 2),
    "16x16p2": DwTile(16, 8, 2),
    "8x8p1": DwTile(8, 8, 1),
    # MobileNet's 3x3 with the tap loops unrolled, at two tiles. Not at 32x32p4: unrolled,
    # its double instance needs more than the 64-register cap and spilled 196 bytes.
    "32x16p2_3x3": DwTile(32, 8, 2, (3, 3)),
    "16x16p2_3x3": DwTile(16, 8, 2, (3, 3)),
}

#: Storage dtype -> C++ type (bfloat16 is kernels/common.cuh's bf16_t, uint16 bits in CuPy).
DW_CTYPES: dict[str, str] = {**CTYPES, "bfloat16": "bf16_t"}


def name_expression(dtype: str, config: str) -> str:
    """The kernel template instance for a dtype and configuration."""
    t = CONFIGS[config]
    return f"depthwise_conv<{DW_CTYPES[dtype]}, {t.tw}, {t.th}, {t.ph}, {t.taps[0]}, {t.taps[1]}>"


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for."""
    return tuple(name_expression(d, c) for d in DW_CTYPES for c in CONFIGS)


def footprint(problem: ConvProblem, config: str) -> tuple[int, int]:
    """Rows and columns of input one block stages: its output tile's receptive field."""
    t = CONFIGS[config]
    return ((t.tile_h - 1) * problem.stride[0] + problem.dilated_r,
            (t.tw - 1) * problem.stride[1] + problem.dilated_s)


def smem_bytes(problem: ConvProblem, config: str) -> int:
    """Dynamic shared memory of one block: the footprint and the channel's M*R*S taps."""
    in_h, in_w = footprint(problem, config)
    words = in_h * in_w + problem.k // problem.c * problem.r * problem.s
    return words * (8 if problem.dtype == "float64" else 4)


def tiles(problem: ConvProblem, config: str) -> tuple[int, int]:
    """Output tiles per plane along the height and the width."""
    t = CONFIGS[config]
    out_h, out_w = problem.out_hw
    return ceil_div(out_h, t.tile_h), ceil_div(out_w, t.tw)


class DepthwiseCuda(CudaAlgorithm):
    """Depthwise convolution, one shared-memory input tile per (image, channel) block."""

    name: ClassVar[str] = "depthwise"
    dtypes: ClassVar[tuple[str, ...]] = tuple(DW_CTYPES)

    def _limits(self, problem: ConvProblem) -> Support:
        """groups == c, 32-bit indexing, and a tile that fits shared memory."""
        depthwise = depthwise_limits(problem)
        if not depthwise:
            return depthwise
        if not tensors_fit_int32(problem):
            return unsupported("a tensor has 2**31 elements or more (32-bit indexing)")
        if not self.configs(problem):
            return unsupported("no tile's input footprint and taps fit 48 KB of shared memory")
        return SUPPORTED

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """The instances for this filter size whose footprint and taps fit shared memory."""
        return tuple(c for c, t in CONFIGS.items()
                     if t.fits(problem) and smem_bytes(problem, c) <= DEFAULT_SMEM_LIMIT)

    def work(self, problem: ConvProblem, config: str) -> Work:
        """One block per output tile of every (image, channel) plane."""
        t = CONFIGS[config]
        tiles_h, tiles_w = tiles(problem, config)
        out_h, out_w = problem.out_hw
        fill = out_h * out_w / (tiles_h * t.tile_h * tiles_w * t.tw)
        return Work(problem.n * problem.c * tiles_h * tiles_w, fill)

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue the kernel; no workspace (registers and shared memory only)."""
        t = CONFIGS[config]
        tiles_h, tiles_w = tiles(problem, config)
        per_plane = tiles_h * tiles_w
        kernel = get_kernel(KERNEL_FILE, name_expression(problem.dtype, config))
        # n * c * per_plane <= n * k * out_h * out_w < 2**31 (every tile has an output pixel).
        kernel(
            (problem.n * problem.c * per_plane, 1, 1), (t.tw, t.th, 1),
            (x, w, y, *shape_args(problem), np.int32(tiles_w), np.int32(per_plane)),
            shared_mem=smem_bytes(problem, config),
        )
