"""GPU depthwise convolution (kernels/depthwise.cu): shared-memory tiles, or flat threads.

Supports groups == c with any channel multiplier k / c, kernel size, stride, padding and
dilation; float16 and bfloat16 (float accumulation), float32 and float64. Forward only. Not
supported: tensors of 2**31 elements or more.

The kernel is memory-bound: judge it in GB/s, `problem.buffer_bytes` (x, w and y once each,
the least any algorithm moves) over its time, against the HBM copy rate.

Workspace: 0 bytes.

Configurations:
- "<TILE_W>x<TILE_H>p<PH>" (`depthwise_conv`): a TILE_W x TILE_H tile of output pixels per
  block, its input footprint staged in shared memory (offered where it fits 48 KB),
  TILE_W x TILE_H / PH threads, PH vertically adjacent outputs per thread. Large tiles share
  their halo over more outputs; small ones waste fewer threads on 7x7 and 14x14 images.
- "flat_q<QV>" (`depthwise_flat`): one thread per QV adjacent outputs of a row, inputs read
  from global memory through the caches, no shared memory or barrier (PyTorch's design for
  NCHW). On the H100 (2026-11-23, MobileNet-v2 b32) the tiles ran at 0.33-0.49x PyTorch's
  speed on 7x7 outputs, 0.73-0.81x on the other strided and 14x14 layers, and 1.04-1.08x on
  stride-1 planes of 28x28 and more.
  "_s1": stride and dilation 1 along the width compiled in (offered only then), so a filter
  row's QV + S - 1 inputs are loaded once for the QV outputs.
A "_3x3" suffix: the filter size compiled in (offered for 3x3 filters).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from algorithms.base import SUPPORTED, Support, Work, depthwise_limits, unsupported
from algorithms.cuda._base import CudaAlgorithm
from algorithms.cuda._launch import POINTER, KernelLaunch, enqueue
from algorithms.cuda._loader import (
    CTYPES,
    DEFAULT_SMEM_LIMIT,
    ceil_div,
    fastdiv_args,
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


@dataclass(frozen=True)
class DwFlat:
    """A flat instance: QV outputs per thread; a fixed filter size; a fixed width stride."""

    qv: int  # adjacent output columns per thread
    taps: tuple[int, int] = (0, 0)  # (r, s) compiled in, or (0, 0): any, read at run time
    stride_w: int = 0  # the width stride, with width dilation 1, compiled in; 0: any

    def fits(self, problem: ConvProblem) -> bool:
        """Whether this instance computes `problem`'s filter size and width stride."""
        return self.taps in ((0, 0), (problem.r, problem.s)) and (
            not self.stride_w or (problem.stride[1], problem.dilation[1]) == (self.stride_w, 1))


#: Threads per block of depthwise_flat (DW_FLAT_THREADS in kernels/depthwise.cu).
FLAT_THREADS = 256
#: Shipped flat configurations (names are stored: add, never rename).
FLAT_CONFIGS: dict[str, DwFlat] = {
    "flat_q1": DwFlat(1),
    "flat_q1_3x3": DwFlat(1, (3, 3)),
    "flat_q4_3x3_s1": DwFlat(4, (3, 3), stride_w=1),
    # Stride 2 (MobileNet-v2's downsampling layers): 4 outputs a thread, sharing a row's 9
    # inputs. flat_q1 left those layers at 0.37-0.53 of cuDNN's device time on the H200
    # (2026-11-26): one output a thread makes a short thread whose loads' latency nothing
    # hides, wave after wave.
    "flat_q4_3x3_s2": DwFlat(4, (3, 3), stride_w=2),
}

#: Storage dtype -> C++ type (bfloat16 is kernels/common.cuh's bf16_t, uint16 bits in CuPy).
DW_CTYPES: dict[str, str] = {**CTYPES, "bfloat16": "bf16_t"}


def name_expression(dtype: str, config: str) -> str:
    """The kernel template instance for a dtype and configuration."""
    if config in FLAT_CONFIGS:
        f = FLAT_CONFIGS[config]
        return (f"depthwise_flat<{DW_CTYPES[dtype]}, {f.qv}, {f.taps[0]}, {f.taps[1]}, "
                f"{f.stride_w}>")
    t = CONFIGS[config]
    return f"depthwise_conv<{DW_CTYPES[dtype]}, {t.tw}, {t.th}, {t.ph}, {t.taps[0]}, {t.taps[1]}>"


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for."""
    return tuple(name_expression(d, c) for d in DW_CTYPES for c in (*CONFIGS, *FLAT_CONFIGS))


def flat_threads(problem: ConvProblem, config: str) -> tuple[int, int]:
    """(threads with work, column groups per output row) of a flat configuration."""
    out_h, out_w = problem.out_hw
    groups_q = ceil_div(out_w, FLAT_CONFIGS[config].qv)
    return problem.n * problem.k * out_h * groups_q, groups_q


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
    """Depthwise convolution: shared-memory tiles per (image, channel) plane, or flat threads."""

    replayable: ClassVar[bool] = True  # every GPU call through _launch or _cublas

    name: ClassVar[str] = "depthwise"
    dtypes: ClassVar[tuple[str, ...]] = tuple(DW_CTYPES)

    def _limits(self, problem: ConvProblem) -> Support:
        """groups == c and 32-bit indexing (flat_q1 takes any geometry)."""
        depthwise = depthwise_limits(problem)
        if not depthwise:
            return depthwise
        if not tensors_fit_int32(problem):
            return unsupported("a tensor has 2**31 elements or more (32-bit indexing)")
        return SUPPORTED

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """The tiles for this filter size whose footprint and taps fit shared memory, then
        the flat instances for this filter size and width stride."""
        return tuple(
            [c for c, t in CONFIGS.items()
             if t.fits(problem) and smem_bytes(problem, c) <= DEFAULT_SMEM_LIMIT]
            + [c for c, f in FLAT_CONFIGS.items() if f.fits(problem)])

    def work(self, problem: ConvProblem, config: str) -> Work:
        """One block per output tile of every (image, channel) plane; flat: one thread per
        QV outputs of a row, in blocks of FLAT_THREADS."""
        if config in FLAT_CONFIGS:
            blocks = ceil_div(flat_threads(problem, config)[0], FLAT_THREADS)
            outputs = problem.n * problem.k * problem.out_hw[0] * problem.out_hw[1]
            return Work(blocks, outputs / (blocks * FLAT_THREADS * FLAT_CONFIGS[config].qv))
        t = CONFIGS[config]
        tiles_h, tiles_w = tiles(problem, config)
        out_h, out_w = problem.out_hw
        fill = out_h * out_w / (tiles_h * t.tile_h * tiles_w * t.tw)
        return Work(problem.n * problem.c * tiles_h * tiles_w, fill)

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue the kernel; no workspace (registers and shared memory only)."""
        enqueue(_launch(problem, config), get_kernel, x, w, y)


@functools.lru_cache(maxsize=4096)  # asked on every run: worked out once
def _launch(problem: ConvProblem, config: str) -> KernelLaunch:
    """The launch of `config` on `problem`: (x, w, y, shape, then the instance's own)."""
    name = name_expression(problem.dtype, config)
    operands = (POINTER, POINTER, POINTER, *shape_args(problem))
    if config in FLAT_CONFIGS:
        total, groups_q = flat_threads(problem, config)
        return KernelLaunch(
            KERNEL_FILE, name, (ceil_div(total, FLAT_THREADS), 1, 1), (FLAT_THREADS, 1, 1),
            (*operands, np.int32(groups_q),
             *fastdiv_args(groups_q, problem.out_hw[0], problem.k, problem.k // problem.c),
             np.int32(total)))
    t = CONFIGS[config]
    tiles_h, tiles_w = tiles(problem, config)
    per_plane = tiles_h * tiles_w
    # n * c * per_plane <= n * k * out_h * out_w < 2**31 (every tile has an output pixel).
    return KernelLaunch(
        KERNEL_FILE, name, (problem.n * problem.c * per_plane, 1, 1), (t.tw, t.th, 1),
        (*operands, np.int32(tiles_w), np.int32(per_plane)), smem_bytes(problem, config))
