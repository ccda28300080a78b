"""GPU implicit GEMM on tensor cores (kernels/implicit_gemm_tc.cu): mma.sync, sm_80 or newer.

Per group, Y (kg x N*P*Q) = W (kg x cg*R*S) @ X, X gathered from the input while
shared-memory tiles are filled. Two layouts of the gathered operands:
- NCHW, the caller's (configurations "BMxBN"): one 4-byte cp.async per float element and
  register-staged element-wise 16-bit loads (measured on an H100: about 70 TFLOP/s in
  float16). The filter's rows are contiguous, though: when C/groups*R*S is a whole number
  of 16-byte vectors and w is 16-byte aligned, A tiles are filled with 16-byte cp.async.
  Pointwise layers (1x1, stride 1, no padding) go further: B's rows are contiguous runs of
  pixels, so when P*Q is a whole number of vectors and x is aligned, B tiles are too
  (`vector_widths`; chosen per call, so a misaligned caller buffer is copied element-wise).
- NHWC ("BMxBN-nhwc", offered when C/groups is a whole number of vectors and B is not
  already vector-filled): x is copied to NHWC and the filter to (K, R, S, C/groups) in the
  workspace (kernels/rearrange.cu `transpose`, one read and one write of each), which makes
  every K-step's B rows 16-byte runs of channels at one pixel on any geometry, as in
  cuDNN's and CUTLASS's tensor-core kernels. The copies cost a pass over x per call; the
  tuner weighs that against the faster fills. A 1x1 filter at a stride without padding
  copies only the pixels it reads and runs as the stride-1 layer over them
  (`_rearrange.gathered`: a quarter of x at stride 2).

Split K ("...-kS", either layout, offered when a tile's grid is smaller than one wave of an
H100's 132 SMs and K is long enough): S slices of the K loop run as grid.z, each writing
FP32 partial sums to the workspace; the last slice of each tile to finish adds them in a
fixed order into y (deterministic; common.cuh `sum_split_tile`). GoogLeNet's few-channel
reductions and the 7x7 and 14x14 layers of every network have grids of 13-75 blocks
without it.

Precision (`problem.math`):
- float32, math "fp32": 3xTF32 (big/small split of both operands, FP32 accumulation), meant
  to meet the FP32 tolerance;
- float32, math "tf32": 1xTF32 (PyTorch's allow_tf32 accuracy, about 1e-3);
- float16 / bfloat16: m16n8k16 with FP32 accumulation (bfloat16 data is uint16 bits).

Limits: tensors below 2**31 elements, at most 65535 groups x channel tiles; any stride,
padding, dilation and groups; compute capability 8.0 or newer (not checked here: a problem
carries no device). Workspace, forward: none for NCHW; x (gathered pixels only, above)
and w in NHWC order for NHWC; S x the output in float32 for split K.

backward_data and backward_filter run this forward kernel, on tensor cores in the
problem's math, on a rearranged problem (algorithms/by_forward.py), the rearranged
operands in the workspace.

Configurations "BMxBN[-nhwc][-kS]": block tile of BM output channels by BN output pixels,
K-step 16, a fixed warp layout per tile; the pipeline depth is the most stages (at most 4)
whose tiles fit in 48 KiB of shared memory for the dtype and layout. For float16 and
bfloat16, "BMxBNx32-nhwc[-kS]" (BM x BN in BK32_TILES) takes K-steps of 32: half the
barriers and pipeline waits per product, in 2-3 stages. "BMxBNx32-nhwc-sS[-kS]" (16-bit)
and "BMxBN-nhwc-sS[-kS]" (float32 at math "tf32"; `deep_configs`) are CUTLASS's sm80
layout: 64x64 warp tiles and S stages in 80-90 KiB of dynamic shared memory, which a block
gets only by opting in (`_loader.allow_shared_memory`). Why, in float16: per K-step of 32
(256 mma m16n8k16), a 128x128 block of eight 64x32 warp tiles reads 48 KiB of fragments by
ldmatrix and writes 16 KiB of tiles, 256 bytes of shared memory per mma; an SM's shared
memory moves 128 bytes a clock, so that is at most one mma every two clocks, half an H100's
dense FP16 rate. Four 64x64 warp tiles read 32 KiB for the same products (192 bytes per
mma). TF32 fragments are read by 4-byte loads, 192 bytes per mma m16n8k8 with 64x32 warp
tiles and 128 with 64x64, at half the FP16 FLOPs per mma: the same limit. The extra stages
hide the global loads' latency at the two blocks (or one) per SM that these tiles leave
room for. "BMxBN-sS" (no "-nhwc") are the same tiles gathering from NCHW, offered where B
tiles are vector-filled (1x1, stride 1, P*Q whole vectors: ResNet-50's 1x1 layers of 14x14
and more in float32, 28x28 and more in 16 bits), where NHWC is not. There the H100
measured the 1xTF32 64x64 tile bound by shared memory (L1 86% of peak) at 0.52 of cuDNN's
speed, cuDNN running 64x64-warp tiles. They ship with vector A and B only: a misaligned
call runs 128x128 (`run_config`).

Resources (ptxas, CUDA 13, every shipped instance at sm_80 and sm_90): no spills, no stack
frame; 96-255 registers per thread for the element-wise instances (128x64 reaches the 255
cap, and is not shipped for 3xTF32); fewer for the vector ones of the same tile (no
per-element index math; float16 128x128: 118 with both tiles in vectors, 127 with vector
A, 170 element-wise; NHWC 115); 20-48 KiB of shared memory (NHWC stores B n-major, which
takes more), and 210-243 registers with 80-90 KiB for the "-sS" tiles (NCHW: 198-202 in
1xTF32 with 74-86 KiB, 191-194 in 16 bits with 41-49 KiB). The stages are the
kernel's dynamic shared memory (`smem_bytes`, passed at launch; ptxas reports none static).
"""

from __future__ import annotations

import functools
from math import prod
from typing import Any, ClassVar

from algorithms.base import Support, Work, WorkspaceLayout
from algorithms.cuda import _rearrange
from algorithms.cuda._base import (
    BlockTile,
    CudaAlgorithm,
    fitting_tiles,
    gemm_fill,
    gemm_grid,
    gemm_limits,
)
from algorithms.cuda._by_forward import CudaByForward
from algorithms.cuda._gemm_launch import GemmLaunch, gemm_launch
from algorithms.cuda._loader import (
    ceil_div,
    get_kernel,
    tensors_fit_int32,
)
from algorithms.cuda._tc_configs import (
    BK,
    BK32,
    BK32_STEP,
    BK32_TILES,
    CONFIGS,
    DEEP_CONFIGS,
    DEEP_SMEM_LIMIT,
    DEEP_TILES,
    DTYPES,
    KERNEL_FILE,
    MAX_STAGES,
    NHWC,
    TC_CTYPES,
    TcConfig,
    TcTile,
    deep_configs,
    name_expression,
    parse_config,
    passes,
    shipped_kernels,
    smem_bytes,
    stages,
    tiles,
    vector_elements,
)
from algorithms.problem import MATHS, ConvProblem

# Named here too: tests, wgmma and the loader's list of shipped kernels read them from the
# algorithm's module.
__all__ = [
    "BK", "BK32", "BK32_STEP", "BK32_TILES", "CONFIGS", "DEEP_CONFIGS", "DEEP_SMEM_LIMIT",
    "DEEP_TILES", "DTYPES", "KERNEL_FILE", "MATHS", "MAX_SPLITS", "MAX_STAGES",
    "MIN_SPLIT_STEPS", "NHWC", "SPLIT_TARGET_BLOCKS", "TC_CTYPES", "ImplicitGemmTcCuda",
    "TcConfig", "TcTile", "deep_configs", "k_splits", "k_steps", "launch_grid",
    "name_expression", "nhwc_allowed", "parse_config", "passes", "run_config",
    "shipped_kernels", "smem_bytes", "split_steps", "stages", "tiles", "vector_elements",
    "vector_widths", "workspace_layout",
]

#: Split K: a grid below this many blocks (one wave on an H100's 132 SMs) is offered a
#: split into at most MAX_SPLITS slices of at least MIN_SPLIT_STEPS K-steps each.
SPLIT_TARGET_BLOCKS = 132
MAX_SPLITS = 8
MIN_SPLIT_STEPS = 4


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
    return (vec, vec if problem.pointwise and (out_h * out_w) % vec == 0 else 1)


def nhwc_allowed(problem: ConvProblem) -> bool:
    """Whether NHWC configurations are offered: C/groups a whole number of vectors (so a
    vector of channels never spans two filter taps), and B not vector-filled already."""
    return (problem.c // problem.groups % vector_elements(problem.dtype) == 0
            and vector_widths(problem)[1] == 1)


def k_steps(problem: ConvProblem, bk: int = BK) -> int:
    """K-steps of the GEMM: C/groups*R*S in slices of `bk`."""
    return ceil_div(problem.c // problem.groups * problem.r * problem.s, bk)


def k_splits(problem: ConvProblem, tile: BlockTile, bk: int = BK) -> int:
    """The K split offered for a tile: enough slices to fill one wave (SPLIT_TARGET_BLOCKS),
    at most MAX_SPLITS of at least MIN_SPLIT_STEPS K-steps; 1 where none is offered (the
    grid is large enough, K is short, or the partial sums would pass 2**31 elements)."""
    gx, gy, _ = gemm_grid(problem, tile.bm, tile.bn)
    splits = min(MAX_SPLITS, ceil_div(SPLIT_TARGET_BLOCKS, gx * gy),
                 k_steps(problem, bk) // MIN_SPLIT_STEPS)
    out_elements = prod(problem.output_shape)
    return splits if splits >= 2 and tensors_fit_int32(problem, splits * out_elements) else 1


def split_steps(problem: ConvProblem, splits: int, bk: int = BK) -> tuple[int, int]:
    """(K-steps of `bk` per split, splits launched): the last split may be short, none
    empty."""
    per = ceil_div(k_steps(problem, bk), splits)
    return per, ceil_div(k_steps(problem, bk), per)


@functools.lru_cache(maxsize=4096)  # asked on every run
def workspace_layout(problem: ConvProblem, config: str) -> WorkspaceLayout:
    """A configuration's workspace: NHWC copies of x (N, H, W, C) and w (K, R*S, C/groups),
    and split K's FP32 partial outputs (S, N, K, P, Q); empty for neither."""
    cfg = parse_config(config)
    layout = WorkspaceLayout()
    if cfg.nhwc:
        _rearrange.add_nhwc_operands(layout, problem)
    if cfg.splits > 1:
        layout.add("part", (cfg.splits, *problem.output_shape), "float32")
    return layout


@functools.lru_cache(maxsize=4096)  # asked on every run
def launch_grid(problem: ConvProblem, config: str) -> tuple[int, int, int]:
    """(pixel tiles over the whole batch, groups x channel tiles, K splits)."""
    cfg = parse_config(config)
    gx, gy, _ = gemm_grid(problem, cfg.tile.bm, cfg.tile.bn)
    return gx, gy, split_steps(problem, cfg.splits, cfg.bk)[1]


class _ImplicitGemmTcCudaForward(CudaAlgorithm):
    """Implicit-GEMM convolution on tensor cores (mma.sync), 3xTF32 for FP32 accuracy."""

    name: ClassVar[str] = "implicit_gemm_tc"
    dtypes: ClassVar[tuple[str, ...]] = DTYPES

    def _limits(self, problem: ConvProblem) -> Support:
        """Any geometry within the indexing and grid limits (every math mode)."""
        return gemm_limits(problem, self.configs(problem))

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """The tiles whose grid fits this problem, NCHW, NHWC, then with NHWC the 16-bit
        K-step-32 tiles and the NHWC "-sS" ones, or with vector-filled B tiles the NCHW
        "-sS" ones; then their K splits."""
        fitting = fitting_tiles(problem, tiles(problem.dtype, problem.math))
        nhwc = nhwc_allowed(problem)
        layouts = ("", NHWC) if nhwc else ("",)
        whole = [t + layout for layout in layouts for t in fitting]
        deep: list[str] = []
        if nhwc and problem.dtype != "float32":
            deep = [t + BK32 + NHWC for t in fitting if t in BK32_TILES]
        if nhwc or vector_widths(problem)[1] > 1:
            deep += fitting_tiles(problem, {
                c: parse_config(c).tile
                for c in deep_configs(problem.dtype, problem.math, nhwc)})
        split = [f"{t}{layout}-k{s}" for layout in layouts for t in fitting
                 if (s := k_splits(problem, CONFIGS[t])) > 1]
        split += [f"{c}-k{s}" for c in deep
                  if (s := k_splits(problem, (cfg := parse_config(c)).tile, cfg.bk)) > 1]
        return tuple(whole + deep + split)

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """See workspace_layout."""
        return workspace_layout(problem, config).nbytes

    def work(self, problem: ConvProblem, config: str) -> Work:
        """The GEMM kernel's tiles times its K splits (which it sums itself); NHWC adds two
        copies."""
        cfg = parse_config(config)
        grid = launch_grid(problem, config)
        launches = 1 + 2 * cfg.nhwc
        return Work(prod(grid), gemm_fill(problem, cfg.tile.bm, cfg.tile.bn), launches)

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue the NHWC copies, as the config asks, and the GEMM kernel (which sums a
        split K itself) on the current stream; no synchronisation."""
        widths = None
        cfg = parse_config(config)
        if cfg.nhwc:
            x, w = _rearrange.nhwc_copies(problem).enqueue(x, w, workspace)
        else:
            widths = vector_widths(problem)
            # A caller's sliced buffer may be misaligned: its operand is copied element-wise.
            if widths[0] > 1 and w.data.ptr % 16:
                widths = (1, 1)
            elif widths[1] > 1 and x.data.ptr % 16:
                widths = (widths[0], 1)
            if cfg.depth:
                config = run_config(problem, config, widths)
        _launch(problem, config, widths).enqueue(get_kernel, x, w, y, workspace)


@functools.lru_cache(maxsize=4096)
def run_config(problem: ConvProblem, config: str, widths: tuple[int, int]) -> str:
    """The configuration an NCHW run takes with these copy widths: `config` itself, but for
    an NCHW "-sS" tile with a misaligned operand, 128x128 with the same K split.

    Those tiles ship with vector A and B only (element-wise B fills with 64x64 warp tiles
    are untried for registers, and a misaligned caller buffer is rare); the fallback needs
    the same workspace (the split's partial sums) and gives the same result.
    """
    cfg = parse_config(config)
    if not cfg.depth or widths[1] > 1:
        return config
    return "128x128" + (f"-k{cfg.splits}" if cfg.splits > 1 else "")


@functools.lru_cache(maxsize=4096)
def _launch(problem: ConvProblem, config: str, widths: tuple[int, int] | None) -> GemmLaunch:
    """The launch of `config` on `problem`; `widths` None for NHWC (its K index runs
    (r, s, c), first divisor C/groups) else the vector widths (K runs (c, r, s))."""
    cfg = parse_config(config)
    if widths is None:
        # The GEMM over the NHWC copies: a strided 1x1 layer's copy of x holds only the
        # pixels it reads, a stride-1 layer's input (`_rearrange.gathered`).
        problem = _rearrange.gathered(problem)
        k_divisor = problem.c // problem.groups
        name = name_expression(problem.dtype, config, problem.math)
    else:
        k_divisor = problem.r * problem.s
        name = name_expression(problem.dtype, config, problem.math, widths)
    return gemm_launch(problem, workspace_layout(problem, config), KERNEL_FILE, name,
                       smem_bytes(problem.dtype, config), cfg.tile.threads,
                       launch_grid(problem, config),
                       split_steps(problem, cfg.splits, cfg.bk)[0], k_divisor)


class ImplicitGemmTcCuda(CudaByForward, _ImplicitGemmTcCudaForward):
    """The forward algorithm above, and both backward directions through it."""

    replayable: ClassVar[bool] = True  # every GPU call through _launch or _cublas
