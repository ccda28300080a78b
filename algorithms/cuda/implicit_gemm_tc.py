"""GPU implicit GEMM on tensor cores (kernels/implicit_gemm_tc.cu): mma.sync, sm_80 or newer.

Per group, Y (kg x N*P*Q) = W (kg x cg*R*S) @ X, X gathered from the NCHW input (the
project's layout) while shared-memory tiles are filled. NHWC would let a warp copy 16-byte
runs of channels; NCHW gives one 4-byte cp.async per float element and register-staged
element-wise 16-bit loads (measured on an H100: about 70 TFLOP/s in float16). The filter's
rows are contiguous, though: when C/groups*R*S is a whole number of 16-byte vectors and w
is 16-byte aligned, A tiles are filled with 16-byte cp.async. Pointwise layers (1x1,
stride 1, no padding) go further: B's rows are contiguous runs of pixels, so when P*Q is a
whole number of vectors and x is aligned, B tiles are too (`vector_widths`; chosen per
call, so a misaligned caller buffer is copied element-wise).

Precision (`problem.math`):
- float32, math "fp32": 3xTF32 (big/small split of both operands, FP32 accumulation), meant
  to meet the FP32 tolerance;
- float32, math "tf32": 1xTF32 (PyTorch's allow_tf32 accuracy, about 1e-3);
- float16 / bfloat16: m16n8k16 with FP32 accumulation (bfloat16 data is uint16 bits).

Limits: tensors below 2**31 elements, at most 65535 groups x channel tiles; any stride,
padding, dilation and groups; compute capability 8.0 or newer (not checked here: a problem
carries no device). Workspace: 0 bytes forward.

backward_data and backward_filter run this forward kernel, on tensor cores in the
problem's math, on a rearranged problem (algorithms/by_forward.py), the rearranged
operands in the workspace.

Configurations "BMxBN": block tile of BM output channels by BN output pixels, K-step 16, a
fixed warp layout per configuration; the pipeline depth is the most stages (at most 4) whose
tiles fit in 48 KiB of static shared memory for the dtype.

Resources (ptxas, CUDA 13, every shipped instance at sm_80 and sm_90): no spills, no stack
frame; 96-255 registers per thread for the element-wise instances (128x64 reaches the 255
cap, and is not shipped for 3xTF32); fewer for the vector ones of the same tile (no
per-element index math; float16 128x128: 118 with both tiles in vectors, 127 with vector
A, 170 element-wise); 20-44 KiB static shared memory.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from algorithms.base import SUPPORTED, Support, unsupported
from algorithms.cuda._base import CudaAlgorithm, fitting_tiles, gemm_grid
from algorithms.cuda._by_forward import CudaByForward
from algorithms.cuda._loader import (
    CTYPES,
    DEFAULT_SMEM_LIMIT,
    fastdiv_args,
    get_kernel,
    shape_args,
    tensors_fit_int32,
)
from algorithms.problem import DTYPES as DTYPE_BYTES
from algorithms.problem import MATHS, ConvProblem

KERNEL_FILE = "implicit_gemm_tc.cu"
BK = 16
MAX_STAGES = 4


@dataclass(frozen=True)
class TcTile:
    """One block tile of implicit_gemm_tc_conv and its warp layout."""

    bm: int
    bn: int
    wm: int  # warps along the output channels
    wn: int  # warps along the output pixels

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.wm * self.wn * 32


#: Shipped configurations; tests/test_kernels_compile.py checks each compiles spill-free.
#: "32x128" is for layers with few output channels (GoogLeNet's k=16/32 reductions). A
#: 16x128 tile was tried and dropped: its 3xTF32 instance spilled 8 bytes at sm_90.
CONFIGS: dict[str, TcTile] = {
    "128x128": TcTile(128, 128, 2, 4),
    "128x64": TcTile(128, 64, 2, 2),
    "64x128": TcTile(64, 128, 2, 2),
    "64x64": TcTile(64, 64, 2, 2),
    "32x128": TcTile(32, 128, 1, 4),
}

#: Storage dtype -> C++ type (bfloat16 is kernels/common.cuh's bf16_t).
TC_CTYPES: dict[str, str] = {**{d: CTYPES[d] for d in ("float32", "float16")},
                             "bfloat16": "bf16_t"}
DTYPES = tuple(TC_CTYPES)


def passes(dtype: str, math: str) -> int:
    """TF32 products per multiply: 3 (3xTF32) for float32 at math "fp32", else 1."""
    return 3 if dtype == "float32" and math == "fp32" else 1


def tiles(dtype: str, math: str) -> dict[str, TcTile]:
    """The configurations shipped for a dtype and math mode.

    3xTF32 leaves out 128x64: with each k8 step's partial sums (kernels/implicit_gemm_tc.cu)
    its 4x4 mma tiles per warp spilled 28 bytes at sm_90, over the 255-register cap.
    """
    if passes(dtype, math) == 3:
        return {name: t for name, t in CONFIGS.items() if name != "128x64"}
    return CONFIGS


def _stage_bytes(dtype: str, config: str) -> int:
    """One stage's A and B tiles with the kernel's row padding (APAD, BPAD)."""
    t = CONFIGS[config]
    item = 4 if dtype == "float32" else 2
    a_pad = 4 if item == 4 else 8
    return (t.bm * (BK + a_pad) + BK * (t.bn + 8)) * item


def stages(dtype: str, config: str) -> int:
    """Pipeline depth: the most stages (2..4) whose tiles fit the static shared memory."""
    return max(2, min(MAX_STAGES, DEFAULT_SMEM_LIMIT // _stage_bytes(dtype, config)))


def smem_bytes(dtype: str, config: str) -> int:
    """Static shared memory of one block."""
    return stages(dtype, config) * _stage_bytes(dtype, config)


def vector_elements(dtype: str) -> int:
    """Elements of the dtype in one 16-byte copy."""
    return 16 // DTYPE_BYTES[dtype]


@functools.lru_cache(maxsize=4096)  # asked on every run
def name_expression(dtype: str, config: str, math: str = "fp32",
                    widths: tuple[int, int] = (1, 1)) -> str:
    """The kernel template instance for a dtype, configuration, math mode and the copy
    widths of A and B (elements per copy)."""
    t = CONFIGS[config]
    return (
        f"implicit_gemm_tc_conv<{TC_CTYPES[dtype]}, {t.bm}, {t.bn}, {t.wm}, {t.wn}, "
        f"{stages(dtype, config)}, {passes(dtype, math)}, {widths[0]}, {widths[1]}>"
    )


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for (float32 in both math modes; element
    copies, vector A, vector A and B)."""
    names = []
    for d in DTYPES:
        v = vector_elements(d)
        names += [name_expression(d, c, m, widths) for m in MATHS for c in tiles(d, m)
                  for widths in ((1, 1), (v, 1), (v, v))]
    return tuple(dict.fromkeys(names))


@functools.lru_cache(maxsize=4096)  # asked on every run
def vector_widths(problem: ConvProblem) -> tuple[int, int]:
    """Elements per tile copy of A and of B the problem allows (16-byte vectors, or 1).

    A: when a filter row (C/groups*R*S) is a whole number of vectors. B as well: when the
    filter is 1x1 at stride 1 without padding (B's rows are then runs of pixels) and P*Q is
    a whole number of vectors, so that no vector spans two rows or two images. The
    operands' 16-byte alignment is checked per call (`_run`).
    """
    vec = vector_elements(problem.dtype)
    if (problem.c // problem.groups * problem.r * problem.s) % vec:
        return (1, 1)
    out_h, out_w = problem.out_hw
    pointwise = (problem.r, problem.s, problem.stride, problem.pad) == (1, 1, (1, 1), (0, 0))
    return (vec, vec if pointwise and (out_h * out_w) % vec == 0 else 1)


def launch_grid(problem: ConvProblem, config: str) -> tuple[int, int, int]:
    """(pixel tiles over the whole batch, groups x channel tiles, 1)."""
    return gemm_grid(problem, CONFIGS[config].bm, CONFIGS[config].bn)


class _ImplicitGemmTcCudaForward(CudaAlgorithm):
    """Implicit-GEMM convolution on tensor cores (mma.sync), 3xTF32 for FP32 accuracy."""

    name: ClassVar[str] = "implicit_gemm_tc"
    dtypes: ClassVar[tuple[str, ...]] = DTYPES

    def _limits(self, problem: ConvProblem) -> Support:
        """Any geometry within the indexing and grid limits (every math mode)."""
        if not tensors_fit_int32(problem):
            return unsupported("a tensor has 2**31 elements or more (32-bit indexing)")
        if not self.configs(problem):
            return unsupported("too many groups x channel tiles for the grid")
        return SUPPORTED

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """The tile configurations whose grid fits this problem."""
        return fitting_tiles(problem, tiles(problem.dtype, problem.math))

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue the kernel on the current stream; no workspace, no synchronisation."""
        out_h, out_w = problem.out_hw
        widths = vector_widths(problem)
        # A caller's sliced buffer may be misaligned: its operand is copied element-wise.
        if widths[0] > 1 and w.data.ptr % 16:
            widths = (1, 1)
        elif widths[1] > 1 and x.data.ptr % 16:
            widths = (widths[0], 1)
        name = name_expression(problem.dtype, config, problem.math, widths)
        kernel = get_kernel(KERNEL_FILE, name)
        kernel(
            launch_grid(problem, config), (CONFIGS[config].threads,),
            (x, w, y, *shape_args(problem),
             *fastdiv_args(problem.r * problem.s, problem.s, out_h * out_w, out_w)),
        )


class ImplicitGemmTcCuda(CudaByForward, _ImplicitGemmTcCudaForward):
    """The forward algorithm above, and both backward directions through it."""
