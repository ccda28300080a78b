"""The launch of an implicit-GEMM tensor-core kernel (implicit_gemm_tc's mma.sync tiles or
wgmma's), worked out once per (problem, config): on every run only the operands change
(prepared launches, algorithms.cuda._launch). With split K the kernel sums the splits
itself, counting finished splits per tile in counters kept apart from the workspace
(algorithms.cuda._counters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from algorithms.base import WorkspaceLayout
from algorithms.cuda import _counters
from algorithms.cuda._launch import INT32, POINTER, Address, KernelLaunch, enqueue
from algorithms.cuda._loader import fastdiv_args, shape_struct
from algorithms.problem import ConvProblem


@dataclass(frozen=True)
class GemmLaunch:
    """The GEMM kernel's launch: see the module docstring."""

    gemm: KernelLaunch  # (x, w, y, geometry..., partials, counters, K per split, pairs)
    part_bytes: slice | None  # split K's partial sums in the workspace; None without splits
    pair_bytes: int  # see paired_stores, for y or (split) the partial sums
    counters: int  # split K's tile counters (one per tile of the grid); 0 without splits

    def enqueue(self, get_kernel: Any, x: Any, w: Any, y: Any, workspace: Any) -> None:
        """The GEMM kernel; `get_kernel` is the calling module's (tests replace it per
        module)."""
        if self.part_bytes is None:  # no split: y in their places, never touched as them
            enqueue(self.gemm, get_kernel, x, w, y, y, y,
                    paired_stores(self.pair_bytes, y.data.ptr))
            return
        part = Address(workspace.data.ptr + self.part_bytes.start)
        enqueue(self.gemm, get_kernel, x, w, y, part,
                Address(_counters.counters_at(workspace.data.ptr, self.counters)),
                paired_stores(self.pair_bytes, part.ptr))


def gemm_launch(problem: ConvProblem, layout: WorkspaceLayout, file: str, name: str,
                smem: int, threads: int, grid: tuple[int, int, int], kper: int,
                k_divisor: int) -> GemmLaunch:
    """The GemmLaunch of a kernel instance on `problem` (`layout`: its workspace, whose
    "part" region holds split K's partial sums; `k_divisor`: the K index's first divisor)."""
    out_h, out_w = problem.out_hw
    split = grid[2] > 1
    geometry = (*shape_struct(problem), *fastdiv_args(k_divisor, problem.s, out_h * out_w,
                                                      out_w))
    return GemmLaunch(
        gemm=KernelLaunch(file, name, grid, (threads,),
                          (POINTER, POINTER, POINTER, *geometry, POINTER, POINTER,
                           np.int32(kper), INT32), smem),
        part_bytes=layout.byte_ranges()["part"] if split else None,
        pair_bytes=pair_bytes(problem, 4 if split else problem.itemsize),
        counters=grid[0] * grid[1] if split else 0)


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
