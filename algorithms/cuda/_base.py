"""What the CUDA algorithms share: the backend, the dtype check, the run-time checks."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any, ClassVar, Protocol

from algorithms.base import SUPPORTED, AlgorithmBase, Support, unsupported
from algorithms.cuda import _replay
from algorithms.cuda._loader import CTYPES, ceil_div, tensors_fit_int32
from algorithms.problem import ConvProblem

#: CUDA's limit on gridDim.y (and z).
GRID_Y_LIMIT = 65535


class CudaAlgorithm(AlgorithmBase):
    """A CUDA implementation: CuPy arrays in and out, work enqueued on the current stream.

    A subclass sets `name` and `dtypes`, puts its other limits in `_limits`, and
    implements `_run` (and `configs` / `_workspace` where it has variants or a workspace).
    The default `directions` is forward only. direct and im2col_gemm compute backward_data
    and backward_filter with kernels of their own (each says so in its own `directions`);
    implicit_gemm, implicit_gemm_tc and fft through their forward pass on a rearranged
    problem (_by_forward.CudaByForward).
    """

    backend: ClassVar[str] = "cuda"
    #: The storage dtypes the kernels are instantiated for.
    dtypes: ClassVar[tuple[str, ...]] = tuple(CTYPES)
    #: Whether a run makes every GPU call through _launch.enqueue or
    #: _cublas.gemm_strided_batched, so that plans may replay it (algorithms.cuda._replay).
    replayable: ClassVar[bool] = False

    def direct_runner(self, problem: ConvProblem, config: str,
                      workspace: Callable[[Hashable], Any]) -> _replay.Runner:
        """What a plan runs ready operands through (CudaRuntime.ready's lane, x, w, y;
        `workspace` gives a lane's): a Replayer where runs replay and replays are on
        (CONVTUNE_REPLAY), else a Runner."""
        if self.replayable and _replay.enabled():
            return _replay.Replayer(self, problem, config, workspace)
        return _replay.Runner(self, problem, config, workspace)


class BlockTile(Protocol):
    """An implicit GEMM's block tile: bm output channels by bn output pixels."""

    @property
    def bm(self) -> int: ...
    @property
    def bn(self) -> int: ...


def gemm_grid(problem: ConvProblem, bm: int, bn: int) -> tuple[int, int, int]:
    """An implicit GEMM's grid of bm x bn tiles: (pixel tiles, groups x channel tiles, 1)."""
    out_h, out_w = problem.out_hw
    kg = problem.k // problem.groups
    return (ceil_div(problem.n * out_h * out_w, bn), problem.groups * ceil_div(kg, bm), 1)


def gemm_fill(problem: ConvProblem, bm: int, bn: int) -> float:
    """The share of gemm_grid's bm x bn tiles that is real output (the rest overhangs)."""
    gx, gy, _ = gemm_grid(problem, bm, bn)
    out_h, out_w = problem.out_hw
    return problem.n * out_h * out_w * problem.k / (gx * bn * gy * bm)


def fitting_tiles(problem: ConvProblem, tiles: Mapping[str, BlockTile]) -> tuple[str, ...]:
    """The names of `tiles` whose implicit-GEMM grid fits CUDA's."""
    return tuple(name for name, t in tiles.items()
                 if gemm_grid(problem, t.bm, t.bn)[1] <= GRID_Y_LIMIT)


def gemm_limits(problem: ConvProblem, configs: tuple[str, ...]) -> Support:
    """The limits every tiled implicit-GEMM kernel shares: 32-bit indexing, and a grid that
    fits for at least one of `configs` (the algorithm's offer for the problem)."""
    if not tensors_fit_int32(problem):
        return unsupported("a tensor has 2**31 elements or more (32-bit indexing)")
    if not configs:
        return unsupported("too many groups x channel tiles for the grid")
    return SUPPORTED
