"""GPU implicit GEMM on Hopper's warpgroup tensor cores (kernels/implicit_gemm_wgmma.cu):
wgmma.mma_async, sm_90a only, float16 and bfloat16 with FP32 accumulation.

The same GEMM as implicit_gemm_tc's NHWC configurations (x copied to NHWC and the filter to
(K, R, S, C/groups) in the workspace, _rearrange.to_nhwc), but each warpgroup of 128 threads
multiplies a 64 x 128 tile with one wgmma m64n128k16 per 16 of K, straight from shared
memory: no fragment loads through registers (ldmatrix), which is what bounds the mma.sync
kernel's 16-bit rate (implicit_gemm_tc's docstring: 192-256 bytes of shared memory moved per
mma m16n8k16). Why a name of its own rather than more implicit_gemm_tc configurations: it
runs on one architecture only, is built by another path (_loader.FEATURE_ARCH: NVRTC for
sm_90a) and has its own limits, and the store keeps its measurements apart.

Configurations "BMx128x64-sS": BM output channels (64, 128 or 256: one, two or four
warpgroups) by 128 output pixels per block, K-steps of 64, S cp.async stages in 96-144 KiB of
opted-in dynamic shared memory (Hopper gives a block up to 227 KiB).

Limits: float16 or bfloat16 (math "fp32": 16-bit products, FP32 sums, as the other 16-bit
kernels); C/groups a whole number of 16-byte vectors (8 values); tensors below 2**31
elements; a compute-capability-9.0 GPU (the loader refuses any other with a RuntimeError,
which the tuner records as a failed candidate, before compiling anything). No split K yet.
Workspace: the NHWC copies of x and w.

Resources (ptxas, CUDA 13, sm_90a): 64x128: 168 registers, 128x128: 135, 256x128: 123; no
spills, no stack; one block per SM (`__launch_bounds__(threads, 1)`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from math import prod
from typing import Any, ClassVar

from algorithms.base import SUPPORTED, Support, Work, WorkspaceLayout, unsupported
from algorithms.cuda import _rearrange
from algorithms.cuda._base import CudaAlgorithm, fitting_tiles, gemm_fill, gemm_grid
from algorithms.cuda._by_forward import CudaByForward
from algorithms.cuda._loader import (
    allow_shared_memory,
    fastdiv_args,
    get_kernel,
    shape_args,
    tensors_fit_int32,
)
from algorithms.problem import ConvProblem

KERNEL_FILE = "implicit_gemm_wgmma.cu"
#: The block's pixel tile (the wgmma N) and K-step, fixed by the kernel.
BN, BK = 128, 64
#: 16-bit values per 16-byte copy: C/groups must be a multiple (a copy stays in one tap).
VECTOR = 8


@dataclass(frozen=True)
class WgmmaTile:
    """One configuration: BM output channels (64 per warpgroup) and its pipeline depth."""

    bm: int
    stages: int

    @property
    def bn(self) -> int:
        """Output pixels per block: the kernel's one N."""
        return BN

    @property
    def threads(self) -> int:
        """Threads per block: a warpgroup per 64 rows."""
        return self.bm // 64 * 128

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: the stages' A (BM x BK) and B (BN x BK) 16-bit tiles."""
        return self.stages * (self.bm + self.bn) * BK * 2


#: Shipped configurations; tests/test_kernels_compile.py builds each for sm_90a.
CONFIGS: dict[str, WgmmaTile] = {
    "64x128x64-s4": WgmmaTile(64, 4),
    "128x128x64-s4": WgmmaTile(128, 4),
    "256x128x64-s3": WgmmaTile(256, 3),
}

#: Storage dtype -> C++ type (kernels/common.cuh).
CTYPES: dict[str, str] = {"float16": "half_t", "bfloat16": "bf16_t"}


def parse_config(config: str) -> WgmmaTile:
    """The tile of a configuration name; ValueError for any other name."""
    if config not in CONFIGS:
        raise ValueError(f"implicit_gemm_wgmma: unknown config {config!r}")
    return CONFIGS[config]


@functools.lru_cache(maxsize=64)  # asked on every run
def name_expression(dtype: str, config: str) -> str:
    """The kernel template instance of a dtype and configuration."""
    tile = parse_config(config)
    return f"implicit_gemm_wgmma_conv<{CTYPES[dtype]}, {tile.bm}, {tile.stages}>"


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for."""
    return tuple(name_expression(d, c) for d in CTYPES for c in CONFIGS)


@functools.lru_cache(maxsize=4096)  # asked on every run
def workspace_layout(problem: ConvProblem) -> WorkspaceLayout:
    """The NHWC copies of x and w."""
    return _rearrange.add_nhwc_operands(WorkspaceLayout(), problem)


class _ImplicitGemmWgmmaCudaForward(CudaAlgorithm):
    """Implicit-GEMM convolution on Hopper's wgmma, 16-bit operands, NHWC copies."""

    name: ClassVar[str] = "implicit_gemm_wgmma"
    dtypes: ClassVar[tuple[str, ...]] = tuple(CTYPES)

    def _limits(self, problem: ConvProblem) -> Support:
        """16-bit channels in whole vectors per group, 32-bit indexing, a grid that fits."""
        cg = problem.c // problem.groups
        if cg % VECTOR:
            return unsupported(f"implicit_gemm_wgmma needs C/groups a multiple of {VECTOR} "
                               f"(16-byte copies within one filter tap), got {cg}")
        if not tensors_fit_int32(problem):
            return unsupported("a tensor has 2**31 elements or more (32-bit indexing)")
        if not self.configs(problem):
            return unsupported("too many groups x channel tiles for the grid")
        return SUPPORTED

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """The tiles whose grid fits this problem."""
        return fitting_tiles(problem, CONFIGS)

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """The NHWC copies of x and w."""
        return workspace_layout(problem).nbytes

    def work(self, problem: ConvProblem, config: str) -> Work:
        """The GEMM kernel's tiles, after the two NHWC copies."""
        tile = parse_config(config)
        return Work(prod(gemm_grid(problem, tile.bm, tile.bn)),
                    gemm_fill(problem, tile.bm, tile.bn), 3)

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue the NHWC copies and the GEMM kernel on the current stream; no sync."""
        tile = parse_config(config)
        out_h, out_w = problem.out_hw
        x, w = _rearrange.to_nhwc(x, w, workspace_layout(problem).views(workspace), problem)
        kernel = get_kernel(KERNEL_FILE, name_expression(problem.dtype, config))
        allow_shared_memory(kernel, tile.smem_bytes)
        grid = gemm_grid(problem, tile.bm, tile.bn)
        kernel(grid, (tile.threads,),
               (x, w, y, *shape_args(problem),
                *fastdiv_args(problem.c // problem.groups, problem.s, out_h * out_w, out_w)),
               shared_mem=tile.smem_bytes)


class ImplicitGemmWgmmaCuda(CudaByForward, _ImplicitGemmWgmmaCudaForward):
    """The forward algorithm above, and both backward directions through it."""
