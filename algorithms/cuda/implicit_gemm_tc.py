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
  tuner weighs that against the faster fills.

Split K ("...-kS", either layout, offered when a tile's grid is smaller than one wave of an
H100's 132 SMs and K is long enough): S slices of the K loop run as grid.z, each writing
FP32 partial sums to the workspace, then one kernel adds them in a fixed order into y
(deterministic). GoogLeNet's few-channel reductions and the 7x7 and 14x14 layers of every
network have grids of 13-75 blocks without it.

Precision (`problem.math`):
- float32, math "fp32": 3xTF32 (big/small split of both operands, FP32 accumulation), meant
  to meet the FP32 tolerance;
- float32, math "tf32": 1xTF32 (PyTorch's allow_tf32 accuracy, about 1e-3);
- float16 / bfloat16: m16n8k16 with FP32 accumulation (bfloat16 data is uint16 bits).

Limits: tensors below 2**31 elements, at most 65535 groups x channel tiles; any stride,
padding, dilation and groups; compute capability 8.0 or newer (not checked here: a problem
carries no device). Workspace, forward: none for NCHW; x and w in NHWC order for NHWC;
S x the output in float32 for split K.

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
import re
from dataclasses import dataclass
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
    CTYPES,
    DEFAULT_SMEM_LIMIT,
    ceil_div,
    get_kernel,
    tensors_fit_int32,
)
from algorithms.problem import DTYPES as DTYPE_BYTES
from algorithms.problem import MATHS, ConvProblem

KERNEL_FILE = "implicit_gemm_tc.cu"
BK = 16
MAX_STAGES = 4
#: The suffix of a configuration that gathers from NHWC copies of the operands.
NHWC = "-nhwc"
#: A 16-bit NHWC configuration "BMxBNx32-nhwc" has a K-step of 32 (BK32_STEP), not BK:
#: twice the products per barrier and pipeline wait, at half the stages in the same shared
#: memory (CUTLASS's sm80 half-precision tiles take 32; the name is CUTLASS's BMxBNxBK).
#: Offered for the tiles in BK32_TILES.
BK32 = "x32"
BK32_STEP = 32
BK32_TILES = ("128x128", "128x64", "64x128")
#: Opt-in shared memory a "-sS" configuration may take: within the 99 KiB a block can have on
#: sm_86 and sm_89, so that they run on every GPU of compute capability 8.0 or newer.
DEEP_SMEM_LIMIT = 96 * 1024
#: Split K: a grid below this many blocks (one wave on an H100's 132 SMs) is offered a
#: split into at most MAX_SPLITS slices of at least MIN_SPLIT_STEPS K-steps each.
SPLIT_TARGET_BLOCKS = 132
MAX_SPLITS = 8
MIN_SPLIT_STEPS = 4
_CONFIG = re.compile(r"(\d+x\d+)(x32)?(-nhwc)?(?:-s(\d+))?(?:-k(\d+))?")


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

#: "-sS" tiles: 64x64 warp tiles, S stages in dynamic shared memory. NHWC ("BMxBN[x32]-nhwc-sS":
#: K-step 32 in 16 bits, 16 in float32; the most stages within DEEP_SMEM_LIMIT, 80-90 KiB in
#: either width), and NCHW ("BMxBN-sS", K-step 16: 74-86 KiB in float32, 41-49 in 16 bits)
#: for the layers whose B tiles are vector-filled (1x1 at stride 1), where NHWC is not offered.
DEEP_TILES: dict[str, tuple[TcTile, int]] = {
    "128x128": (TcTile(128, 128, 2, 2), 4),
    "256x128": (TcTile(256, 128, 4, 2), 3),
    "128x256": (TcTile(128, 256, 2, 4), 3),
}
#: The float32 "-sS" tiles per TF32 passes: those ptxas (sm_90) fits in 255 registers
#: without spilling. 1xTF32 (math "tf32"): all three (217, 209 and 213 registers). 3xTF32
#: none: with its big and small fragments 128x128, 256x128 and 128x256 spilled 164, 8 and
#: 100 bytes.
_FLOAT_DEEP: dict[int, tuple[str, ...]] = {1: tuple(DEEP_TILES), 3: ()}
#: The same for the NCHW "-sS" tiles, which ptxas (sm_90) fits with vector A and B only:
#: 1xTF32 in 198-202 registers, 3xTF32 none (each spilled 8 bytes).
_FLOAT_DEEP_NCHW: dict[int, tuple[str, ...]] = {1: tuple(DEEP_TILES), 3: ()}


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


def deep_configs(dtype: str, math: str, nhwc: bool = True) -> tuple[str, ...]:
    """The "-sS" configuration names (without a split) shipped for a dtype and math mode,
    NHWC or (nhwc False) NCHW."""
    if not nhwc:
        names = _FLOAT_DEEP_NCHW[passes(dtype, math)] if dtype == "float32" else DEEP_TILES
        return tuple(f"{t}-s{DEEP_TILES[t][1]}" for t in names)
    if dtype == "float32":
        return tuple(f"{t}{NHWC}-s{DEEP_TILES[t][1]}" for t in _FLOAT_DEEP[passes(dtype, math)])
    return tuple(f"{t}{BK32}{NHWC}-s{depth}" for t, (_, depth) in DEEP_TILES.items())


#: Every "-sS" name of any dtype, math mode and layout.
DEEP_CONFIGS: tuple[str, ...] = tuple(dict.fromkeys(
    c for d in DTYPES for m in MATHS for nhwc in (True, False)
    for c in deep_configs(d, m, nhwc)))


@dataclass(frozen=True)
class TcConfig:
    """A parsed configuration name: tile, operand layout, K splits (1: none), K-step, and
    the stages of a "-sS" configuration (0: as many as fit 48 KiB)."""

    tile: TcTile
    nhwc: bool
    splits: int
    bk: int = BK
    depth: int = 0


@functools.lru_cache(maxsize=256)
def parse_config(config: str) -> TcConfig:
    """The parts of "BMxBN[-nhwc][-kS]", "BMxBNx32-nhwc[-kS]" or "BMxBN[x32]-nhwc-sS[-kS]";
    ValueError for any other name."""
    found = _CONFIG.fullmatch(config)
    if found is None:
        raise ValueError(f"implicit_gemm_tc: unknown config {config!r}")
    tile, x32, nhwc, depth, splits = found.groups()
    whole = tile + (x32 or "") + (nhwc or "") + (f"-s{depth}" if depth else "")
    if depth is not None and whole in DEEP_CONFIGS:
        return TcConfig(DEEP_TILES[tile][0], nhwc is not None, int(splits or 1),
                        BK32_STEP if x32 else BK, int(depth))
    if depth is not None or tile not in CONFIGS or (
            x32 and (not nhwc or tile not in BK32_TILES)):
        raise ValueError(f"implicit_gemm_tc: unknown config {config!r}")
    return TcConfig(CONFIGS[tile], nhwc is not None, int(splits or 1),
                    BK32_STEP if x32 else BK)


def _stage_bytes(dtype: str, config: str) -> int:
    """One stage's A and B tiles with the kernel's row padding (APAD, BPAD); NHWC stores
    B n-major, rows padded like A's."""
    cfg = parse_config(config)
    t, nhwc, bk = cfg.tile, cfg.nhwc, cfg.bk
    item = 4 if dtype == "float32" else 2
    a_pad = 4 if item == 4 else 8
    b_elements = t.bn * (bk + a_pad) if nhwc else bk * (t.bn + 8)
    return (t.bm * (bk + a_pad) + b_elements) * item


def stages(dtype: str, config: str) -> int:
    """Pipeline depth: a "-sS" configuration's S, else the most stages (2..4) whose tiles
    fit in 48 KiB."""
    depth = parse_config(config).depth
    return depth or max(2, min(MAX_STAGES, DEFAULT_SMEM_LIMIT // _stage_bytes(dtype, config)))


@functools.lru_cache(maxsize=4096)  # asked on every run
def smem_bytes(dtype: str, config: str) -> int:
    """Dynamic shared memory of one block: its stages' tiles."""
    return stages(dtype, config) * _stage_bytes(dtype, config)


def vector_elements(dtype: str) -> int:
    """Elements of the dtype in one 16-byte copy."""
    return 16 // DTYPE_BYTES[dtype]


@functools.lru_cache(maxsize=4096)  # asked on every run
def name_expression(dtype: str, config: str, math: str = "fp32",
                    widths: tuple[int, int] = (1, 1)) -> str:
    """The kernel template instance for a dtype, configuration, math mode and the copy
    widths of A and B (elements per copy; an NHWC configuration always copies vectors)."""
    cfg = parse_config(config)
    t, nhwc = cfg.tile, cfg.nhwc
    if nhwc:
        widths = (vector_elements(dtype),) * 2
    return (
        f"implicit_gemm_tc_conv<{TC_CTYPES[dtype]}, {t.bm}, {t.bn}, {t.wm}, {t.wn}, "
        f"{stages(dtype, config)}, {passes(dtype, math)}, {widths[0]}, {widths[1]}, "
        f"{str(nhwc).lower()}, {cfg.bk}>"
    )


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for (float32 in both math modes; NCHW
    with element copies, vector A, vector A and B; NHWC; the NCHW "-sS" tiles with vector
    A and B only, see `run_config`)."""
    names = []
    for d in DTYPES:
        v = vector_elements(d)
        names += [name_expression(d, c, m, widths) for m in MATHS for c in tiles(d, m)
                  for widths in ((1, 1), (v, 1), (v, v))]
        names += [name_expression(d, c + NHWC, m) for m in MATHS for c in tiles(d, m)]
        if d != "float32":
            names += [name_expression(d, c + BK32 + NHWC) for c in BK32_TILES]
        names += [name_expression(d, c, m) for m in MATHS for c in deep_configs(d, m)]
        names += [name_expression(d, c, m, (v, v)) for m in MATHS
                  for c in deep_configs(d, m, nhwc=False)]
        names.append(sum_name_expression(d))
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
    return (vec, vec if problem.pointwise and (out_h * out_w) % vec == 0 else 1)


def nhwc_allowed(problem: ConvProblem) -> bool:
    """Whether NHWC configurations are offered: C/groups a whole number of vectors (so a
    vector of channels never spans two filter taps), and B not vector-filled already."""
    return (problem.c // problem.groups % vector_elements(problem.dtype) == 0
            and vector_widths(problem)[1] == 1)


def sum_name_expression(dtype: str) -> str:
    """The split-K summing kernel's instance for a storage dtype."""
    return f"implicit_gemm_tc_sum_splits<{TC_CTYPES[dtype]}>"


def sum_kernel(dtype: str) -> tuple[str, str]:
    """(file, instance) of the split-K sum, which wgmma's splits use too."""
    return KERNEL_FILE, sum_name_expression(dtype)


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
        """The GEMM kernel's tiles times its K splits; NHWC adds two copies, splits a sum."""
        cfg = parse_config(config)
        grid = launch_grid(problem, config)
        launches = 1 + 2 * cfg.nhwc + (grid[2] > 1)
        return Work(prod(grid), gemm_fill(problem, cfg.tile.bm, cfg.tile.bn), launches)

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue the NHWC copies, the GEMM kernel and the split-K sum, as the config
        asks, on the current stream; no synchronisation."""
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
        k_divisor = problem.c // problem.groups
        name = name_expression(problem.dtype, config, problem.math)
    else:
        k_divisor = problem.r * problem.s
        name = name_expression(problem.dtype, config, problem.math, widths)
    return gemm_launch(problem, workspace_layout(problem, config), KERNEL_FILE, name,
                       smem_bytes(problem.dtype, config), cfg.tile.threads,
                       launch_grid(problem, config),
                       split_steps(problem, cfg.splits, cfg.bk)[0], k_divisor,
                       sum_kernel(problem.dtype))


class ImplicitGemmTcCuda(CudaByForward, _ImplicitGemmTcCudaForward):
    """The forward algorithm above, and both backward directions through it."""
