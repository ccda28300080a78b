"""GPU direct convolution (kernels/direct.cu), every direction.

forward: tiled, shared memory for input patch and filter; configurations "THxTWkKPT": a
TH x TW tile of output pixels per block (one thread each), KPT output channels per thread.
Each block stages up to 16 input channels at a time.
backward_data: each dx element gathers dy * w over the taps whose output position is
integral and in range (stride holes get none); configurations "gather_cCPT": CPT input
channels per thread.
backward_filter: one block per dw element reduces over the batch and the output pixels
(float accumulation for float16, double for float64, then a shared-memory tree);
configurations "reduceT": T threads per block.

Supports float16 (float accumulation), float32 and float64; any stride, padding, dilation and
groups. Not supported: a batch over 65535 images (except backward_filter), tensors of 2**31
elements or more, a forward problem whose one-channel input patch plus filter slice exceeds
48 KB of shared memory for every configuration (very large dilation or stride), or a
backward_data grid over 65535 channel blocks.

Workspace: 0 bytes.
"""

from __future__ import annotations

import functools
import math
from typing import Any, ClassVar

import numpy as np

from algorithms.base import SUPPORTED, Support, Work, unsupported
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

KERNEL_FILE = "direct.cu"

#: config name -> (TH, TW, KPT).
CONFIGS: dict[str, tuple[int, int, int]] = {
    "16x16k8": (16, 16, 8),
    "8x8k16": (8, 8, 16),
    "8x32k4": (8, 32, 4),
}

#: backward_data config name -> input channels per thread.
DATA_CONFIGS: dict[str, int] = {"gather_c1": 1, "gather_c4": 4}
#: backward_filter config name -> threads per block (a power of two: the tree halves it).
FILTER_CONFIGS: dict[str, int] = {"reduce128": 128, "reduce256": 256}

#: Threads per backward_data block (the kernel's __launch_bounds__).
_DATA_THREADS = 256

#: Input channels staged per step at most (more only lengthens the unrolled tail).
MAX_CHANNELS_PER_STEP = 16

_GRID_YZ_LIMIT = 65535


def name_expression(dtype: str, config: str) -> str:
    """The kernel template instance for a dtype and configuration (of any direction)."""
    if config in DATA_CONFIGS:
        return f"direct_bwd_data<{CTYPES[dtype]}, {DATA_CONFIGS[config]}>"
    if config in FILTER_CONFIGS:
        return f"direct_bwd_filter<{CTYPES[dtype]}, {FILTER_CONFIGS[config]}>"
    th, tw, kpt = CONFIGS[config]
    return f"direct_conv<{CTYPES[dtype]}, {th}, {tw}, {kpt}>"


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for."""
    every = (*CONFIGS, *DATA_CONFIGS, *FILTER_CONFIGS)
    return tuple(name_expression(d, c) for d in CTYPES for c in every)


def _acc_bytes(problem: ConvProblem) -> int:
    return 8 if problem.dtype == "float64" else 4


def channel_words(problem: ConvProblem, config: str) -> int:
    """Shared-memory words one input channel takes: its input patch plus filter slice."""
    th, tw, kpt = CONFIGS[config]
    in_h = (th - 1) * problem.stride[0] + problem.dilated_r
    in_w = (tw - 1) * problem.stride[1] + problem.dilated_s
    return in_h * in_w + kpt * problem.r * problem.s


def channels_per_step(problem: ConvProblem, config: str) -> int:
    """Input channels staged per step (0: not even one fits in shared memory)."""
    per_channel = channel_words(problem, config) * _acc_bytes(problem)
    fit = DEFAULT_SMEM_LIMIT // per_channel
    return min(problem.c // problem.groups, MAX_CHANNELS_PER_STEP, fit)


def _grid(problem: ConvProblem, config: str) -> tuple[int, int, int]:
    th, tw, kpt = CONFIGS[config]
    out_h, out_w = problem.out_hw
    kg = problem.k // problem.groups
    return (ceil_div(out_h, th) * ceil_div(out_w, tw), problem.groups * ceil_div(kg, kpt),
            problem.n)


class DirectCuda(CudaAlgorithm):
    """Tiled direct convolution on the GPU."""

    replayable: ClassVar[bool] = True  # every GPU call through _launch or _cublas

    name: ClassVar[str] = "direct"
    directions: ClassVar[tuple[str, ...]] = ("forward", "backward_data", "backward_filter")

    def _limits(self, problem: ConvProblem) -> Support:
        """Any stride, padding, dilation and groups that fit the limits above."""
        # backward_filter puts no batch on the grid (each block loops over the images).
        if problem.n > _GRID_YZ_LIMIT and problem.direction != "backward_filter":
            return unsupported(f"batch {problem.n} exceeds the grid limit {_GRID_YZ_LIMIT}")
        if not tensors_fit_int32(problem):
            return unsupported("a tensor has 2**31 elements or more (32-bit indexing)")
        if not self.configs(problem):
            if problem.direction == "backward_data":
                return unsupported(f"{problem.groups} groups of input channels exceed the "
                                   f"grid limit {_GRID_YZ_LIMIT}")
            return unsupported("no tile configuration fits 48 KB of shared memory")
        return SUPPORTED

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """The configurations of the problem's direction whose grid (and smem) fit it."""
        if problem.direction == "backward_filter":
            return tuple(FILTER_CONFIGS)
        if problem.direction == "backward_data":
            cg = problem.c // problem.groups
            return tuple(c for c, cpt in DATA_CONFIGS.items()
                         if problem.groups * ceil_div(cg, cpt) <= _GRID_YZ_LIMIT)
        return tuple(
            c for c in CONFIGS
            if channels_per_step(problem, c) > 0 and _grid(problem, c)[1] <= _GRID_YZ_LIMIT
        )

    def work(self, problem: ConvProblem, config: str) -> Work:
        """One kernel: forward over output tiles (whose overhang is the waste); backward_data
        over pixel x channel blocks; backward_filter one block per filter element."""
        if problem.direction == "backward_data":
            cg = problem.c // problem.groups
            blocks = (ceil_div(problem.h * problem.w, _DATA_THREADS) * problem.groups
                      * ceil_div(cg, DATA_CONFIGS[config]) * problem.n)
            return Work(blocks)
        if problem.direction == "backward_filter":
            return Work(problem.k * (problem.c // problem.groups) * problem.r * problem.s)
        th, tw, kpt = CONFIGS[config]
        out_h, out_w = problem.out_hw
        blocks = math.prod(_grid(problem, config))  # each th x tw pixels of kpt channels
        return Work(blocks, problem.n * problem.k * out_h * out_w / (blocks * th * tw * kpt))

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue the direction's kernel; no workspace (registers and shared memory only)."""
        enqueue(_launch(problem, config), get_kernel, x, w, y)


@functools.lru_cache(maxsize=4096)  # asked on every run: worked out once
def _launch(problem: ConvProblem, config: str) -> KernelLaunch:
    """The direction's launch of `config` on `problem`: (x, w, y, shape, then its own)."""
    name = name_expression(problem.dtype, config)
    operands = (POINTER, POINTER, POINTER, *shape_args(problem))
    if problem.direction == "backward_data":
        cblocks = ceil_div(problem.c // problem.groups, DATA_CONFIGS[config])
        grid = (ceil_div(problem.h * problem.w, _DATA_THREADS), problem.groups * cblocks,
                problem.n)
        return KernelLaunch(KERNEL_FILE, name, grid, (_DATA_THREADS, 1, 1),
                            (*operands, np.int32(cblocks)))
    if problem.direction == "backward_filter":
        out_h, out_w = problem.out_hw
        grid = (problem.k * (problem.c // problem.groups) * problem.r * problem.s, 1, 1)
        return KernelLaunch(KERNEL_FILE, name, grid, (FILTER_CONFIGS[config], 1, 1),
                            (*operands, *fastdiv_args(out_h * out_w, out_w)))
    th, tw, _kpt = CONFIGS[config]
    cb = channels_per_step(problem, config)
    smem = cb * channel_words(problem, config) * _acc_bytes(problem)
    out_w = problem.out_hw[1]
    return KernelLaunch(KERNEL_FILE, name, _grid(problem, config), (tw, th, 1),
                        (*operands, np.int32(ceil_div(out_w, tw)), np.int32(cb)), smem)
