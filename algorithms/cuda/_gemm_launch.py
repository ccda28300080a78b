"""The launch of an implicit-GEMM tensor-core kernel (implicit_gemm_tc's mma.sync tiles or
wgmma's) and, with split K, of the sum after it (wgmma's) or of its tile counters (the
mma.sync kernel sums in place: algorithms.cuda._counters), worked out once per (problem,
config): on every run only the operands change (prepared launches, algorithms.cuda._launch).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from algorithms.base import WorkspaceLayout
from algorithms.cuda import _counters
from algorithms.cuda._launch import INT32, POINTER, Address, KernelLaunch, enqueue
from algorithms.cuda._loader import fastdiv_args, grid_stride_blocks, shape_struct
from algorithms.problem import ConvProblem


@dataclass(frozen=True)
class GemmLaunch:
    """The GEMM kernel's launch and split K's sum: see the module docstring."""

    gemm: KernelLaunch  # (x, w, y, geometry..., partials, [counters,] K per split, pairs)
    total: KernelLaunch | None  # split K's sum (partials, y); None without one
    part_bytes: slice | None  # split K's partial sums in the workspace; None without splits
    pair_bytes: int  # see paired_stores, for y or (split) the partial sums
    #: a kernel that sums split K itself: its tile counters, 0 without splits; None for a
    #: kernel without the parameter
    counters: int | None = None

    def enqueue(self, get_kernel: Any, x: Any, w: Any, y: Any, workspace: Any) -> None:
        """The GEMM kernel, then split K's sum where it is a kernel of its own; `get_kernel`
        is the calling module's (tests replace it per module)."""
        # Split K's partial sums, a byte range of the workspace; else y, which the kernel
        # then never touches as partials (nor as counters).
        part = y if self.part_bytes is None else Address(
            workspace.data.ptr + self.part_bytes.start)
        pairs = paired_stores(self.pair_bytes, part.data.ptr)
        if self.counters is None:
            enqueue(self.gemm, get_kernel, x, w, y, part, pairs)
        else:
            count = y if not self.counters else Address(
                _counters.counters_at(workspace.data.ptr, self.counters))
            enqueue(self.gemm, get_kernel, x, w, y, part, count, pairs)
        if self.total is not None:
            enqueue(self.total, get_kernel, part, y)


def gemm_launch(problem: ConvProblem, layout: WorkspaceLayout, file: str, name: str,
                smem: int, threads: int, grid: tuple[int, int, int], kper: int,
                k_divisor: int, sum_kernel: tuple[str, str] | None) -> GemmLaunch:
    """The GemmLaunch of a kernel instance on `problem` (`layout`: its workspace, whose
    "part" region holds split K's partial sums; `k_divisor`: the K index's first divisor;
    `sum_kernel`: the (file, instance) that sums split K's partials, None for a kernel that
    sums them itself, with a counter per tile of its grid)."""
    out_h, out_w = problem.out_hw
    split = grid[2] > 1
    total = prod(problem.output_shape)
    geometry = (*shape_struct(problem), *fastdiv_args(k_divisor, problem.s, out_h * out_w,
                                                      out_w))
    counters = () if sum_kernel is not None else (POINTER,)
    return GemmLaunch(
        gemm=KernelLaunch(file, name, grid, (threads,),
                          (POINTER, POINTER, POINTER, *geometry, POINTER, *counters,
                           np.int32(kper), INT32), smem),
        total=KernelLaunch(*sum_kernel, (grid_stride_blocks(total),), (256,),
                           (POINTER, POINTER, np.int32(total), np.int32(grid[2])))
        if split and sum_kernel is not None else None,
        part_bytes=layout.byte_ranges()["part"] if split else None,
        pair_bytes=pair_bytes(problem, 4 if split else problem.itemsize),
        counters=None if sum_kernel is not None else grid[0] * grid[1] if split else 0)


def pair_bytes(problem: ConvProblem, itemsize: int) -> int:
    """The alignment in bytes that paired epilogue stores of `itemsize`-byte outputs need
    (two elements), or 0 when P*Q is odd (an even column's pixel and the next may then lie
    in two images)."""
    out_h, out_w = problem.out_hw
    return 0 if out_h * out_w % 2 else 2 * itemsize


def paired_stores(alignment: int, address: int) -> bool:
    """The kernels' `pairs` flag: whether the epilogue may store two adjacent outputs at
    once (`pair_bytes` nonzero, and the address it writes, y or split K's float32
    partials, aligned to it: a caller's y may be one element off)."""
    return alignment != 0 and address % alignment == 0
