"""GPU direct convolution (kernels/direct.cu): tiled, shared memory for input patch and filter.

Supports float16 (float accumulation), float32 and float64; any stride, padding, dilation and
groups. Not supported: a batch over 65535 images, tensors of 2**31 elements or more, or a
problem whose one-channel input patch plus filter slice exceeds 48 KB of shared memory for
every configuration (very large dilation or stride). Each block stages up to 16 input
channels at a time.

Workspace: 0 bytes.

Configurations "THxTWkKPT": a TH x TW tile of output pixels per block (one thread each),
KPT output channels per thread.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from algorithms.base import SUPPORTED, Support, unsupported
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

KERNEL_FILE = "direct.cu"

#: config name -> (TH, TW, KPT).
CONFIGS: dict[str, tuple[int, int, int]] = {
    "16x16k8": (16, 16, 8),
    "8x8k16": (8, 8, 16),
    "8x32k4": (8, 32, 4),
}

#: Input channels staged per step at most (more only lengthens the unrolled tail).
MAX_CHANNELS_PER_STEP = 16

_GRID_YZ_LIMIT = 65535


def name_expression(dtype: str, config: str) -> str:
    """The kernel template instance for a dtype and configuration."""
    th, tw, kpt = CONFIGS[config]
    return f"direct_conv<{CTYPES[dtype]}, {th}, {tw}, {kpt}>"


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for."""
    return tuple(name_expression(d, c) for d in CTYPES for c in CONFIGS)


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

    name: ClassVar[str] = "direct"

    def _limits(self, problem: ConvProblem) -> Support:
        """Any stride, padding, dilation and groups that fit the limits above."""
        if problem.n > _GRID_YZ_LIMIT:
            return unsupported(f"batch {problem.n} exceeds the grid limit {_GRID_YZ_LIMIT}")
        if not tensors_fit_int32(problem):
            return unsupported("a tensor has 2**31 elements or more (32-bit indexing)")
        if not self.configs(problem):
            return unsupported("no tile configuration fits 48 KB of shared memory")
        return SUPPORTED

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """The tile configurations whose shared memory and grid fit this problem."""
        return tuple(
            c for c in CONFIGS
            if channels_per_step(problem, c) > 0 and _grid(problem, c)[1] <= _GRID_YZ_LIMIT
        )

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue the kernel; no workspace (registers and shared memory only)."""
        th, tw, _kpt = CONFIGS[config]
        cb = channels_per_step(problem, config)
        smem = cb * channel_words(problem, config) * _acc_bytes(problem)
        out_w = problem.out_hw[1]
        kernel = get_kernel(KERNEL_FILE, name_expression(problem.dtype, config))
        kernel(
            _grid(problem, config), (tw, th, 1),
            (x, w, y, *shape_args(problem), np.int32(ceil_div(out_w, tw)), np.int32(cb)),
            shared_mem=smem,
        )
