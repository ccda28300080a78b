"""GPU Winograd F(2x2,3x3) and F(4x4,3x3): transform kernels around one cuBLAS batched GEMM.

Steps, all enqueued on the current stream (kernels/winograd.cu; the matrices are
algorithms/winograd.py's):
1. winograd_filter: U[p] = G g G^T per (k, c), formed in double and rounded once;
2. winograd_input: V[p] = B^T d B per (c, tile), reading the alpha x alpha input tile with
   zeros outside the image (padding and the last tiles' overhang);
3. cuBLAS strided-batched GEMM over the alpha^2 transform points p: M[p] (k x T) =
   U[p] (k x c) @ V[p] (c x T), T = n * tiles_h * tiles_w, strict FP32 (or FP64) math;
4. winograd_output: y = A^T M[p] A per (k, tile), cropped at the output's edge.

Forward only; 3x3 filters, stride 1, dilation 1, groups 1, any padding and size. Supports
float16 (transformed in float32, float32 GEMM), float32 and float64. Under math "tf32" the
F(2x2) GEMM reads TF32 operands, which the transforms store rounded (`tf32_gemm`); F(4x4)
keeps the FP32 GEMM, since its transforms amplify TF32's rounding past the 1e-3 allowed.
Every buffer must have fewer than 2**31 elements.

Workspace (E = 8 for float64, else 4; each region aligned to 256 bytes; the workspace itself
must be aligned to E, as every CuPy allocation is; run() checks):
    U: alpha^2 * k * c * E    V: alpha^2 * c * T * E    M: alpha^2 * k * T * E
cuBLAS uses its per-handle workspace, not allocated per call.
Configurations: "f2x2" and "f4x4" (the output tile side).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from algorithms import winograd
from algorithms.base import SUPPORTED, Support, align, unsupported
from algorithms.cuda._base import CudaAlgorithm
from algorithms.cuda._cublas import OP_N, gemm_strided_batched
from algorithms.cuda._launch import POINTER, Address, KernelLaunch, enqueue
from algorithms.cuda._loader import (
    CTYPES,
    fastdiv_args,
    get_kernel,
    grid_stride_blocks,
    require_aligned,
    tensors_fit_int32,
)
from algorithms.problem import ConvProblem

KERNEL_FILE = "winograd.cu"

_THREADS = 256
_STEPS = ("filter", "input", "output")


def name_expression(step: str, dtype: str, config: str, tf32: bool = False) -> str:
    """The kernel template instance of one step for a dtype and config; `tf32`: the filter
    or input transform storing TF32-rounded values (see tf32_gemm)."""
    return (f"winograd_{step}<{CTYPES[dtype]}, {winograd.TRANSFORMS[config].m}"
            f"{', true' if tf32 else ''}>")


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for: 3 steps x dtypes x configs, and the
    TF32-storing filter and input transforms of float32 F(2x2)."""
    return (*(name_expression(step, dtype, config)
              for dtype in CTYPES for config in winograd.CONFIGS for step in _STEPS),
            *(name_expression(step, "float32", "f2x2", tf32=True)
              for step in ("filter", "input")))


def gemm_dtype(problem: ConvProblem) -> str:
    """The dtype of the transformed buffers and the GEMM: float64 or float32."""
    return "float64" if problem.dtype == "float64" else "float32"


def tf32_gemm(problem: ConvProblem, config: str) -> bool:
    """Whether the GEMM reads TF32 (its U and V stored rounded to TF32): math "tf32", F(2x2)
    only. A simulation of one layer (benchmarks/tf32_error.py) puts F(2x2) at 4.9e-4
    relative error with rounded TF32 operands (8.7e-4 truncated) and F(4x4) at 3.2e-3 even
    rounded; math "tf32" allows 1e-3."""
    return problem.math == "tf32" and config == "f2x2"


def _counts(problem: ConvProblem, config: str) -> dict[str, int]:
    """Element counts of U, V and M."""
    t = winograd.tiling(problem, config)
    points, tiles = t.alpha ** 2, t.tiles(problem.n)
    return {"u": points * problem.k * problem.c, "v": points * problem.c * tiles,
            "m": points * problem.k * tiles}


def workspace_layout(problem: ConvProblem, config: str) -> dict[str, tuple[int, int]]:
    """Region name -> (byte offset, bytes) inside the workspace."""
    item = np.dtype(gemm_dtype(problem)).itemsize
    layout: dict[str, tuple[int, int]] = {}
    offset = 0
    for name, count in _counts(problem, config).items():
        layout[name] = (offset, count * item)
        offset += align(count * item)
    return layout


class WinogradCuda(CudaAlgorithm):
    """Winograd transforms in kernels, the per-point GEMMs in cuBLAS."""

    replayable: ClassVar[bool] = True  # every GPU call through _launch or _cublas

    name: ClassVar[str] = "winograd"

    def _limits(self, problem: ConvProblem) -> Support:
        """3x3, stride 1, dilation 1, groups 1, every buffer under 2**31 elements."""
        support = winograd.limits(problem)
        if not support:
            return support
        largest = max(max(_counts(problem, c).values()) for c in winograd.CONFIGS)
        if not tensors_fit_int32(problem, largest):
            return unsupported("a tensor or a Winograd buffer has 2**31+ elements")
        return SUPPORTED

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """F(2x2,3x3) and F(4x4,3x3)."""
        return winograd.CONFIGS

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """U, V and M (see the module docstring)."""
        offset, nbytes = workspace_layout(problem, config)["m"]
        return align(offset + nbytes)

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue the filter and input transforms, the GEMMs and the output transform."""
        plan = _launches(problem, config)
        require_aligned("winograd: workspace", workspace, plan.item)
        # U, V and M as Addresses in the workspace, not views (host time on every run).
        u, v, m = (Address(workspace.data.ptr + offset) for offset, _ in plan.regions)
        enqueue(plan.kernels[0], get_kernel, w, u)
        enqueue(plan.kernels[1], get_kernel, x, v)
        _gemm(plan, u.ptr, v.ptr, m.ptr)
        enqueue(plan.kernels[2], get_kernel, m, y)


def _gemm(plan: _Launches, u: int, v: int, m: int) -> None:
    # Row-major M[p] = U[p] @ V[p] is column-major M^T = V^T @ U^T: cuBLAS sees m = T,
    # n = k, k = c with V first.
    tiles, k, c = plan.gemm
    gemm_strided_batched(plan.real, OP_N, OP_N, tiles, k, c, v, tiles, c * tiles, u, c,
                         k * c, m, tiles, k * tiles, plan.points, tf32=plan.tf32)


@dataclass(frozen=True)
class _Launches:
    """What `_run` enqueues for one (problem, config), worked out once: a plan's calls
    differ only in their operands."""

    real: str  # the GEMM's dtype
    item: int
    regions: tuple[tuple[int, int], ...]  # U, V, M: (byte offset, bytes)
    tf32: bool
    #: the filter (w -> U), input (x -> V) and output (M -> y) transforms
    kernels: tuple[KernelLaunch, KernelLaunch, KernelLaunch]
    gemm: tuple[int, int, int]  # T, K, C
    points: int


@functools.lru_cache(maxsize=1024)
def _launches(problem: ConvProblem, config: str) -> _Launches:
    real = gemm_dtype(problem)
    t = winograd.tiling(problem, config)
    n, c, k = problem.n, problem.c, problem.k
    tiles = t.tiles(n)
    out_h, out_w = problem.out_hw
    tf32 = tf32_gemm(problem, config)
    layout = workspace_layout(problem, config)
    divisors = fastdiv_args(tiles, t.tiles_w, t.tiles_h)
    tiling_args = (np.int32(t.tiles_h), np.int32(t.tiles_w), np.int32(tiles))
    launch = functools.partial(KernelLaunch, KERNEL_FILE, block=(_THREADS,))
    return _Launches(
        real=real, item=np.dtype(real).itemsize,
        regions=tuple(layout[name] for name in ("u", "v", "m")), tf32=tf32,
        # The transforms into the GEMM store TF32-rounded values when it reads TF32.
        kernels=(
            launch(name_expression("filter", problem.dtype, config, tf32),
                   grid=(grid_stride_blocks(k * c, _THREADS),),
                   args=(POINTER, POINTER, np.int32(k * c))),
            launch(name_expression("input", problem.dtype, config, tf32),
                   grid=(grid_stride_blocks(c * tiles, _THREADS),),
                   args=(POINTER, POINTER, np.int32(c), np.int32(problem.h),
                         np.int32(problem.w), *(np.int32(p) for p in problem.pad),
                         *tiling_args, np.int32(c * tiles), *divisors)),
            launch(name_expression("output", problem.dtype, config),
                   grid=(grid_stride_blocks(k * tiles, _THREADS),),
                   args=(POINTER, POINTER, np.int32(k), np.int32(out_h), np.int32(out_w),
                         *tiling_args, np.int32(k * tiles), *divisors))),
        gemm=(tiles, k, c), points=t.alpha ** 2,
    )
