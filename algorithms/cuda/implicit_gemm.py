"""GPU implicit GEMM (kernels/implicit_gemm.cu): our own tiled FP32 GEMM that gathers input
patches from the NCHW tensor while it loads shared-memory tiles; no column matrix.

Per group, Y (kg x N*P*Q) = W (kg x cg*R*S) @ X, X gathered on the fly. Register tiling
(8x8 or 4x4 outputs per thread), float4 shared-memory reads, two shared-memory stages with
the next tile's global loads in flight during the multiply, float4 output stores when P*Q is
a multiple of 4 and y is aligned. Index divisions use multiply-shift constants computed on
the host per call (plain ints, nothing allocated).

Supports float32 and float16 (float32 accumulation; float16 configs compile without the
occupancy register cap); any stride, padding, dilation and groups. Not supported: float64;
tensors of 2**31 elements or more; a padded input of 16384 pixels or more in height or
width (the kernel packs a pixel's (h, w) into two 16-bit halves); more than 65535
groups x channel tiles.

Workspace: 0 bytes forward.

backward_data and backward_filter run this forward kernel on a rearranged problem
(algorithms/by_forward.py: the filter flipped over dy, by stride phases or over dy spread
with zeros; x and dy transposed for backward_filter, one grouped forward launch), the
rearranged operands in the workspace. backward_filter's reduction over n*P*Q becomes the
forward GEMM's K, over a grid of only (c/g)*R*S x k outputs: correct, but a small grid on
large layers.

Configurations "BMxBNxBK": block tile of BM output channels by BN output pixels, K-step BK;
the thread tile and the occupancy cap are fixed per configuration in CONFIGS.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from algorithms.base import SUPPORTED, Support, Work, unsupported
from algorithms.cuda._base import CudaAlgorithm, fitting_tiles, gemm_fill, gemm_grid
from algorithms.cuda._by_forward import CudaByForward
from algorithms.cuda._launch import INT32, POINTER, KernelLaunch, enqueue
from algorithms.cuda._loader import (
    CTYPES,
    fastdiv_args,
    get_kernel,
    shape_struct,
    tensors_fit_int32,
)
from algorithms.problem import ConvProblem

KERNEL_FILE = "implicit_gemm.cu"


@dataclass(frozen=True)
class Tile:
    """One template configuration of implicit_gemm_conv."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    min_blocks: int  # __launch_bounds__ minimum blocks per SM for float32 (1 for float16)

    @property
    def threads(self) -> int:
        """Threads per block."""
        return (self.bm // self.tm) * (self.bn // self.tn)


#: Shipped configurations; tests/test_kernels_compile.py checks each compiles spill-free.
CONFIGS: dict[str, Tile] = {
    "128x128x8": Tile(128, 128, 8, 8, 8, 2),
    "128x64x8": Tile(128, 64, 8, 8, 8, 2),
    "64x128x8": Tile(64, 128, 8, 8, 8, 2),
    "64x64x8": Tile(64, 64, 8, 4, 4, 2),
    "128x128x16": Tile(128, 128, 16, 8, 8, 1),
}

DTYPES = ("float32", "float16")
_PACKED_LIMIT = 1 << 14  # signed 16-bit (h, w) halves, with room for the sentinel


def name_expression(dtype: str, config: str) -> str:
    """The kernel template instance for a dtype and configuration."""
    t = CONFIGS[config]
    min_blocks = t.min_blocks if dtype == "float32" else 1
    return (
        f"implicit_gemm_conv<{CTYPES[dtype]}, {t.bm}, {t.bn}, {t.bk}, {t.tm}, {t.tn}, "
        f"{min_blocks}>"
    )


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for."""
    return tuple(name_expression(d, c) for d in DTYPES for c in CONFIGS)


def launch_grid(problem: ConvProblem, config: str) -> tuple[int, int, int]:
    """(pixel tiles over the whole batch, groups x channel tiles, 1)."""
    return gemm_grid(problem, CONFIGS[config].bm, CONFIGS[config].bn)


class _ImplicitGemmCudaForward(CudaAlgorithm):
    """Implicit-GEMM convolution with our own register-tiled kernel."""

    name: ClassVar[str] = "implicit_gemm"
    dtypes: ClassVar[tuple[str, ...]] = DTYPES

    def _limits(self, problem: ConvProblem) -> Support:
        """Any geometry within the packing and indexing limits."""
        if not tensors_fit_int32(problem):
            return unsupported("a tensor has 2**31 elements or more (32-bit indexing)")
        if max(problem.h + 2 * problem.pad[0], problem.w + 2 * problem.pad[1]) >= _PACKED_LIMIT:
            return unsupported(f"padded input of {_PACKED_LIMIT} pixels or more per side")
        if not self.configs(problem):
            return unsupported("too many groups x channel tiles for the grid")
        return SUPPORTED

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """The tile configurations whose grid fits this problem."""
        return fitting_tiles(problem, CONFIGS)

    def work(self, problem: ConvProblem, config: str) -> Work:
        """One kernel over the tile grid."""
        t = CONFIGS[config]
        return Work(math.prod(launch_grid(problem, config)), gemm_fill(problem, t.bm, t.bn))

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue the kernel; no workspace (patches are gathered in the tile loads)."""
        # Whole-vector stores need 4 pixels of one image together and an aligned y.
        vec_bytes = 4 * problem.itemsize
        vec_out = problem.out_hw[0] * problem.out_hw[1] % 4 == 0 and y.data.ptr % vec_bytes == 0
        enqueue(_launch(problem, config), get_kernel, x, w, y, vec_out)


@functools.lru_cache(maxsize=4096)  # asked on every run: worked out once
def _launch(problem: ConvProblem, config: str) -> KernelLaunch:
    """The kernel's launch on `problem`: (x, w, y, shape, vec_out flag, fast divisions)."""
    out_h, out_w = problem.out_hw
    return KernelLaunch(
        KERNEL_FILE, name_expression(problem.dtype, config), launch_grid(problem, config),
        (CONFIGS[config].threads,),
        (POINTER, POINTER, POINTER, *shape_struct(problem), INT32,
         *fastdiv_args(problem.r * problem.s, problem.s, out_h * out_w, out_w)))


class ImplicitGemmCuda(CudaByForward, _ImplicitGemmCudaForward):
    """The forward algorithm above, and both backward directions through it."""

    replayable: ClassVar[bool] = True  # every GPU call through _launch or _cublas
