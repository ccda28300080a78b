"""GPU implicit GEMM on Hopper's warpgroup tensor cores (kernels/implicit_gemm_wgmma.cu):
wgmma.mma_async, sm_90a only, float16 and bfloat16, and float32 as TF32, 3xTF32 or 3xFP16,
all with FP32 accumulation.

The same GEMM as implicit_gemm_tc's NHWC configurations (x copied to NHWC, only the pixels a
strided 1x1 filter reads, and the filter to (K, R, S, C/groups) in the workspace,
_rearrange.nhwc_copies and `gathered`), but each warpgroup of 128 threads
multiplies a 64 x 128 tile with one wgmma per 32 bytes of K (m64n128k16 for 16-bit types,
m64n128k8 for TF32), straight from shared memory: no fragment loads through registers
(ldmatrix), which is what bounds the mma.sync kernel's rate (implicit_gemm_tc's docstring:
192-256 bytes of shared memory moved per mma). Why a name of its own rather than more
implicit_gemm_tc configurations: it runs on one architecture only, is built by another path
(_loader.FEATURE_ARCH: NVRTC for sm_90a) and has its own limits, and the store keeps its
measurements apart.

Precision (`problem.math`), as implicit_gemm_tc's:
- float16 / bfloat16: 16-bit products, FP32 sums.
- float32, math "tf32": 1xTF32. The tensor core reads a TF32 operand's top 19 bits
  (truncation), so the NHWC copies round to TF32 first (cvt.rna, as the mma.sync kernel
  does), which halves the worst representation error.
- float32, math "fp32": 3xTF32, meant for the FP32 tolerance. wgmma reads both operands from
  shared memory, so the split into big = tf32(v) and small = tf32(v - big) cannot happen in
  registers as in the mma.sync kernel: the NHWC copies write both parts, and each K-step
  loads both tiles of both operands (twice the copy traffic and shared memory of 1xTF32) and
  runs small.big + big.small + big.big, summed per K-step from zero and then added to the
  accumulators in FP32 (the tensor core's sums round toward zero, which over long K cost the
  mma.sync kernel its FP32 accuracy on an H100).
- float32, math "fp32", "-3xfp16" configurations: the same three products of two float16
  parts of v * s, big = h(v s) and small = h(v s - big), s the power of two that takes the
  tensor's largest |v| to [2^14, 2^15) (FP16 ends at 65504), one per operand and call
  (`nhwc_parts` 3: a launch of partial maxima before the copies, _rearrange.NhwcCopies.scale),
  undone exactly in the epilogue. FP16 wgmma runs K = 16 where TF32 runs 8 and a part takes
  2 bytes: half 3xTF32's tensor work and bytes per element, for as many bits (11 + 11), as
  accurate as 3xTF32 on every kind of input benchmarks/split_accuracy.py tries (outliers,
  32 binades, data past FP16's range either way). Offered where C/groups is a whole number
  of 8-element vectors (no padded first layers). Not yet measured on a GPU. Two bfloat16
  parts need no scale but carry 16 bits: shipped as "-3xbf16" at 2914fa9 and withdrawn the
  same day, when an emulated case with outliers came to 1.2e-5 (BENCHMARKS.md).

Configurations "BMx128xBK-sS[-f1]": BM output channels (64, 128 or 256: one, two or four
warpgroups) by 128 output pixels per block, K-steps of BK = 128 bytes (64 16-bit values or
32 floats), S cp.async stages in 96-192 KiB of opted-in dynamic shared memory (Hopper gives
a block up to 227 KiB). "-f1" leaves each K-step's wgmma running through the next step's
barrier and copy issue, one stage further from the copies (at 3xTF32 through four K-steps
at a time, between additions of its partial sums; `TILES`).

Warp-specialized configurations "BMx128xBK-sS-ws" (kernel implicit_gemm_wgmma_ws): the same
tiles, but producers alone copy (a warpgroup; two warps at 3xTF32: `PRODUCERS`) and the
BM / 64 warpgroups alone multiply, handing
stages to each other through mbarriers (full and empty, one of each per stage) instead of a
block barrier per K-step; the consumers keep one K-step's wgmma in flight. Why: Nsight Compute
had the one-role kernel's warps waiting mostly at that barrier and on their own copies (VGG-16
conv4_2 float16, H200, 2026-11-25), the tensor cores idle in between. No split K; not yet
measured on a GPU.

NCHW configurations "BMxBNx32-sS[-f1]-nchw" (_wgmma_nchw), on float32 layers with one group:
a kernel of its own that reads x as it is (x^T as wgmma's A from registers, W's rows as its
B): on a 1x1 layer (any stride and padding) one launch and no copies; with taps, after one
transpose of w (its large tiles only).

Split K ("TILE-kS", not for "-ws" tiles; offered where a tile's grid is below one wave:
implicit_gemm_tc.k_splits with K-steps of 128 bytes): S slices of the K loop run as grid.z,
each writing FP32 partial
sums to the workspace; the last slice of a tile to finish adds them in a fixed order into y
(kernels/common.cuh sum_split_tile, as implicit_gemm_tc's kernel does).

Limits: C/groups a whole number of 16-byte vectors (8 16-bit values, 4 floats), which with
one group the NHWC copies make so by padding the channels with zeros (a network's first
layer, C = 3: _rearrange.nhwc_channels; the GEMM then runs over the padded K); tensors
below 2**31 elements; a compute-capability-9.0 GPU (the loader refuses any other with a
RuntimeError, which the tuner records as a failed candidate, before compiling anything).
Workspace: the NHWC copies of x and w (both parts of each at 3xTF32), or for an NCHW
configuration an aligned copy of w, and S x the output in float32 for split K.

Resources (ptxas, CUDA 13, sm_90a): see BENCHMARKS.md's table; no spills, no stack; one
block per SM (`__launch_bounds__(threads, 1)`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from math import prod
from typing import Any, ClassVar

from algorithms.base import Support, Work, WorkspaceLayout, unsupported
from algorithms.cuda import _rearrange, _wgmma_nchw
from algorithms.cuda._base import (
    CudaAlgorithm,
    fitting_tiles,
    gemm_fill,
    gemm_grid,
    gemm_limits,
)
from algorithms.cuda._by_forward import CudaByForward
from algorithms.cuda._gemm_launch import GemmLaunch, gemm_launch
from algorithms.cuda._loader import get_kernel, tensors_fit_int32
from algorithms.cuda._wgmma_nchw import NchwTile
from algorithms.cuda.implicit_gemm_tc import k_splits, passes, split_steps
from algorithms.problem import DTYPES as DTYPE_BYTES
from algorithms.problem import ConvProblem

KERNEL_FILE = "implicit_gemm_wgmma.cu"
#: The block's pixel tile (the wgmma N), fixed by the kernel.
BN = 128
#: Bytes of K per K-step and per 16-byte copy: BK is 128 // itemsize elements (64 16-bit
#: values, 32 floats), and C/groups must be a whole number of copies (one stays in one tap).
ROW_BYTES, VECTOR_BYTES = 128, 16


@dataclass(frozen=True)
class WgmmaTile:
    """One configuration: BM output channels (64 per warpgroup), its pipeline depth, the
    K-steps of wgmma it leaves running across the next step's barrier (0 or 1), the
    producer threads of a warp-specialized tile (0: every thread copies and multiplies), and
    the 16-bit dtype whose two parts float32 runs as ("float16": 3xFP16; "": none)."""

    bm: int
    stages: int
    in_flight: int = 0
    producers: int = 0
    parts: str = ""

    @property
    def bn(self) -> int:
        """Output pixels per block: the kernel's one N."""
        return BN

    @property
    def threads(self) -> int:
        """Threads per block: a warpgroup per 64 rows, and the producers."""
        return self.bm // 64 * 128 + self.producers

    def smem_bytes(self, copies: int) -> int:
        """Dynamic shared memory: the stages' A (BM x BK) and B (BN x BK) tiles, per copy,
        and a warp-specialized tile's two 8-byte mbarriers per stage after them."""
        barriers = 2 * 8 * self.stages if self.producers else 0
        return copies * self.stages * (self.bm + self.bn) * ROW_BYTES + barriers

    @property
    def suffix(self) -> str:
        """What the configuration name says after "-sS": "-ws" (warp-specialized, one
        K-step's wgmma in flight), "-f1" or nothing; then "-3xfp16" for float16 parts."""
        pipeline = "-ws" if self.producers else "-f1" if self.in_flight else ""
        return pipeline + ("-3xfp16" if self.parts else "")

    def operands(self, dtype: str) -> str:
        """The dtype of the NHWC copies the kernel reads for a problem of `dtype`."""
        return self.parts or dtype



#: Storage dtype -> C++ type (kernels/common.cuh; float32 runs as TF32).
CTYPES: dict[str, str] = {"float16": "half_t", "bfloat16": "bf16_t", "float32": "float"}


def copies(dtype: str, math: str) -> int:
    """Operand copies in shared memory: 2 (TF32 big and small) for 3xTF32, else 1."""
    return 2 if passes(dtype, math) == 3 else 1


def _tiles(bk: int, tiles: tuple[WgmmaTile, ...]) -> dict[str, WgmmaTile]:
    return {f"{t.bm}x{BN}x{bk}-s{t.stages}{t.suffix}": t for t in tiles}


#: The producers of a warp-specialized tile (the kernel's PRODUCERS): a warpgroup, whose
#: copy issue per K-step (about 10 instructions a 16-byte copy, BENCHMARKS.md) stays below a
#: 128 x 128 tile's tensor time at one copy; two warps at 3xTF32, with three times the tensor
#: time per copy, so that the consumers keep the registers their partial sums need (a block
#: of 384 threads leaves 168 each). A multiple of 64 either way: a producer's rows stay
#: congruent mod 8, and one swizzle XOR serves them.
PRODUCERS = {1: 128, 2: 64}
#: Warp-specialized tiles ("-ws", kernels/implicit_gemm_wgmma.cu implicit_gemm_wgmma_ws):
#: producers copy, BM / 64 warpgroups multiply, through mbarriers. Not yet measured on a GPU:
#: they ship beside the one-role tiles for the tuner to choose.
_WS_ONE_COPY = (WgmmaTile(64, 6, 1, PRODUCERS[1]), WgmmaTile(128, 4, 1, PRODUCERS[1]),
                WgmmaTile(128, 5, 1, PRODUCERS[1]))

#: One wgmma group waited for per K-step, and one left running (-f1) with the stages to keep
#: the same copies in flight or more. Both ship until a GPU has measured which wins.
_ONE_COPY = (WgmmaTile(64, 4), WgmmaTile(128, 4), WgmmaTile(256, 3),
             WgmmaTile(64, 6, 1), WgmmaTile(128, 5, 1), WgmmaTile(256, 4, 1), *_WS_ONE_COPY)

#: Shipped configurations "BMx128xBK-sS[-f1]" per (element bytes, copies), in at most 192 KiB
#: of shared memory (Hopper gives a block up to 227 KiB); tests/test_kernels_compile.py
#: builds each for sm_90a. 3xTF32's two copies take a stage less on the 128-row tile; its
#: 256-row tile is not shipped: with the K-step's partial sums (64 more registers) it spilled
#: 228 bytes at the 128 registers that 512 threads leave. 3xTF32's -f1 tiles keep the stages
#: of their wait-0 twins (one K-step of copies less ahead) and add their partial sums every
#: four K-steps, when all groups are done (the kernel's FLUSH_STEPS), instead of every one.
TILES: dict[tuple[int, int], dict[str, WgmmaTile]] = {
    (2, 1): _tiles(64, _ONE_COPY),
    (4, 1): _tiles(32, _ONE_COPY),
    (4, 2): _tiles(32, (WgmmaTile(64, 4), WgmmaTile(128, 3), WgmmaTile(64, 4, 1),
                        WgmmaTile(128, 3, 1), WgmmaTile(64, 4, 1, PRODUCERS[2]),
                        WgmmaTile(128, 3, 1, PRODUCERS[2]))),
}
#: float32 at math "fp32" as two 16-bit parts (3xFP16): 3xTF32's tiles and stages,
#: warp-specialized ones included (16-bit parts fill the same 128-byte rows, and the
#: consumers keep the same two sets of accumulators), in 16-bit K-steps.
PART_TILES: dict[str, WgmmaTile] = _tiles(64, tuple(
    WgmmaTile(bm, stages, flight, producers, "float16")
    for flight, producers in ((0, 0), (1, 0), (1, PRODUCERS[2]))
    for bm, stages in ((64, 4), (128, 3))))


def tiles(dtype: str, math: str) -> dict[str, WgmmaTile]:
    """The configurations shipped for a dtype and math mode (float32 at math "fp32": 3xTF32's
    and 3xFP16's)."""
    copied = copies(dtype, math)
    found = TILES[DTYPE_BYTES[dtype], copied]
    return {**found, **PART_TILES} if copied == 2 else found


@dataclass(frozen=True)
class WgmmaConfig:
    """A parsed configuration name "TILE[-kS]": its tile and K splits (1: none); an NCHW
    tile (_wgmma_nchw) runs the pointwise kernel on x and w as they are."""

    tile: WgmmaTile | NchwTile
    splits: int

    @property
    def nchw(self) -> bool:
        """Whether this is one of _wgmma_nchw's configurations."""
        return isinstance(self.tile, NchwTile)


@functools.lru_cache(maxsize=16)
def _shipped(dtype: str, math: str) -> dict[str, WgmmaTile | NchwTile]:
    """Every tile shipped for a dtype and math: the NHWC ones, and for float32 the NCHW ones
    (_wgmma_nchw, which says where each is offered)."""
    nchw = _wgmma_nchw.tiles(math) if dtype == "float32" else {}
    return {**tiles(dtype, math), **nchw}


@functools.lru_cache(maxsize=256)  # asked on every run
def parse_config(dtype: str, math: str, config: str) -> WgmmaConfig:
    """The tile and splits of a configuration name; ValueError for a name not shipped for the
    dtype and math."""
    shipped = _shipped(dtype, math)
    tile, _, splits = config.partition("-k")
    split = splits.isdigit() and int(splits) >= 2 and not _warp_specialized(shipped.get(tile))
    if tile not in shipped or not (splits == "" or split):
        raise ValueError(f"implicit_gemm_wgmma: unknown config {config!r} for {dtype} at "
                         f"math {math!r}")
    return WgmmaConfig(shipped[tile], int(splits or 1))


def _warp_specialized(tile: WgmmaTile | NchwTile | None) -> bool:
    """Whether `tile` is a "-ws" one (whose kernel does not split K)."""
    return isinstance(tile, WgmmaTile) and tile.producers > 0


def k_step(dtype: str) -> int:
    """Elements of K per K-step: 128 bytes of them."""
    return ROW_BYTES // DTYPE_BYTES[dtype]


@functools.lru_cache(maxsize=256)  # asked on every run
def name_expression(dtype: str, config: str, math: str = "fp32") -> str:
    """The kernel template instance of a dtype, NHWC configuration and math mode
    (_wgmma_nchw.name_expression names the NCHW configurations')."""
    tile = parse_config(dtype, math, config).tile
    assert isinstance(tile, WgmmaTile), config
    operands = CTYPES[tile.operands(dtype)]
    if tile.producers:
        return (f"implicit_gemm_wgmma_ws<{operands}, {tile.bm}, {tile.stages}, "
                f"{copies(dtype, math)}, {tile.producers}>")
    return (f"implicit_gemm_wgmma_conv<{operands}, {tile.bm}, {tile.stages}, "
            f"{copies(dtype, math)}, {tile.in_flight}>")


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for (float32 in both math modes)."""
    pairs = [(d, "fp32") for d in CTYPES] + [("float32", "tf32")]
    return tuple(name_expression(d, c, m) for d, m in pairs for c in tiles(d, m))


@functools.lru_cache(maxsize=4096)  # asked on every run
def workspace_layout(problem: ConvProblem, config: str) -> WorkspaceLayout:
    """The NHWC copies of x and w (two of each for 3xTF32 and 3xFP16: big, then small), or
    an NCHW configuration's aligned copy of w (_wgmma_nchw.add_workspace); and split K's FP32
    partial outputs (S, N, K, P, Q)."""
    cfg = parse_config(problem.dtype, problem.math, config)
    if isinstance(cfg.tile, NchwTile):
        layout = _wgmma_nchw.add_workspace(WorkspaceLayout(), problem)
    else:
        layout = _rearrange.add_nhwc_operands(WorkspaceLayout(), problem,
                                              nhwc_parts(problem, cfg.tile))
    if cfg.splits > 1:
        layout.add("part", (cfg.splits, *problem.output_shape), "float32")
    return layout


@functools.lru_cache(maxsize=4096)  # asked on every run
def launch(problem: ConvProblem, config: str) -> tuple[tuple[int, int, int], int]:
    """(grid: pixel tiles, groups x channel tiles, splits launched; K-steps per split)."""
    cfg = parse_config(problem.dtype, problem.math, config)
    gx, gy, _ = gemm_grid(problem, cfg.tile.bm, cfg.tile.bn)
    kper, launched = split_steps(k_problem(problem, cfg.tile), cfg.splits,
                                 tile_k_step(problem.dtype, cfg.tile))
    return (gx, gy, launched), kper


def k_problem(problem: ConvProblem, tile: WgmmaTile | NchwTile) -> ConvProblem:
    """The problem whose K-steps a tile's GEMM runs: a first layer's padded channels count
    (_rearrange.nhwc_problem), and an NCHW tile's whole K-steps per tap
    (_wgmma_nchw.k_problem)."""
    if isinstance(tile, NchwTile):
        return _wgmma_nchw.k_problem(problem)
    return _rearrange.nhwc_problem(problem)


def tile_k_step(dtype: str, tile: WgmmaTile | NchwTile) -> int:
    """Elements of K per K-step of a tile's operands (an NCHW tile's are the problem's)."""
    return k_step(tile.operands(dtype) if isinstance(tile, WgmmaTile) else dtype)


def nhwc_parts(problem: ConvProblem, tile: WgmmaTile) -> int:
    """What the NHWC transposes write for a tile (_rearrange.PARTS): 16-bit bits (0),
    float32 rounded to TF32 (1), also the TF32 remainder (2, 3xTF32), or two scaled float16
    parts (3, 3xFP16)."""
    if problem.dtype != "float32":
        return 0
    return 3 if tile.parts else copies(problem.dtype, problem.math)


def _split16(tile: WgmmaTile | NchwTile) -> bool:
    """Whether a tile runs float32 as 16-bit parts (3xFP16)."""
    return isinstance(tile, WgmmaTile) and bool(tile.parts)


def _parts_fit(problem: ConvProblem, tile: WgmmaTile | NchwTile) -> bool:
    """Whether a tile is offered as far as 16-bit parts go: one of float16 parts needs copies
    that take the problem as it is (C/groups whole 16-byte vectors of 2-byte parts, 8
    channels, which no padding provides: _rearrange.padded pads to the float32 vector)."""
    if not _split16(tile):
        return True
    return (problem.c // problem.groups) % (VECTOR_BYTES // 2) == 0 and not _rearrange.padded(
        problem)


class _ImplicitGemmWgmmaCudaForward(CudaAlgorithm):
    """Implicit-GEMM convolution on Hopper's wgmma (16-bit, TF32, 3xTF32), NHWC copies."""

    name: ClassVar[str] = "implicit_gemm_wgmma"
    dtypes: ClassVar[tuple[str, ...]] = tuple(CTYPES)

    def _limits(self, problem: ConvProblem) -> Support:
        """Channels in whole 16-byte vectors per group (with one group, the NHWC copies pad
        them: _rearrange.nhwc_channels), 32-bit indexing (of the padded copies too), a grid
        that fits."""
        cg = problem.c // problem.groups
        vector = VECTOR_BYTES // problem.itemsize
        if _rearrange.nhwc_channels(problem) % vector:
            return unsupported(f"implicit_gemm_wgmma needs C/groups a multiple of {vector} "
                               f"for {problem.dtype} with groups (16-byte copies within one "
                               f"filter tap), got {cg}")
        if not tensors_fit_int32(problem, *(prod(shape) for shape in _rearrange.nhwc_problem(
                problem).operand_shapes)):
            return unsupported("a padded NHWC copy has 2**31 elements or more "
                               "(32-bit indexing)")
        return gemm_limits(problem, self.configs(problem))

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """The tiles whose grid fits this problem (with the NCHW ones _wgmma_nchw.offered
        for it), then those split along K where their grid is below one wave
        (implicit_gemm_tc.k_splits)."""
        nchw = _wgmma_nchw.offered(problem)
        shipped = {name: tile for name, tile in _shipped(problem.dtype, problem.math).items()
                   if (name in nchw or not isinstance(tile, NchwTile))
                   and _parts_fit(problem, tile)}
        whole = fitting_tiles(problem, shipped)
        return whole + tuple(
            f"{t}-k{s}" for t in whole if not _warp_specialized(shipped[t])
            and (s := k_splits(k_problem(problem, shipped[t]), shipped[t],
                               tile_k_step(problem.dtype, shipped[t]))) > 1)

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """The NHWC copies of x and w, and split K's partial sums."""
        return workspace_layout(problem, config).nbytes

    def work(self, problem: ConvProblem, config: str) -> Work:
        """The GEMM kernel's tiles times its K splits (which it sums itself), after the two
        NHWC copies (an NCHW configuration: none, or with taps w's) and, for 3xFP16, the
        operands' maxima."""
        cfg = parse_config(problem.dtype, problem.math, config)
        grid, _ = launch(problem, config)
        # Launches before the GEMM.
        before = (int(_wgmma_nchw.taps(problem)) if cfg.nchw
                  else 3 if _split16(cfg.tile) else 2)
        return Work(prod(grid), gemm_fill(problem, cfg.tile.bm, cfg.tile.bn), 1 + before)

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue the NHWC copies and the GEMM kernel (which sums a split K itself), or an
        NCHW configuration's kernel alone, on the current stream; no sync."""
        if parse_config(problem.dtype, problem.math, config).nchw:
            _nchw_run(problem, config, _wgmma_nchw.x_vector(problem, x.data.ptr)).enqueue(
                x, w, y, workspace)
            return
        nhwc, gemm = _run_plan(problem, config)
        x, w = nhwc.enqueue(x, w, workspace)
        gemm.enqueue(get_kernel, x, w, y, workspace)


@functools.lru_cache(maxsize=4096)
def _nchw_run(problem: ConvProblem, config: str, vec: int) -> _wgmma_nchw.NchwRun:
    """What `_run` enqueues for an NCHW configuration with x's copy width `vec`, worked out
    once."""
    cfg = parse_config(problem.dtype, problem.math, config)
    assert isinstance(cfg.tile, NchwTile), config
    grid, kper = launch(problem, config)
    return _wgmma_nchw.nchw_run(problem, cfg.tile, workspace_layout(problem, config), grid,
                                kper, vec)


@functools.lru_cache(maxsize=4096)
def _run_plan(problem: ConvProblem, config: str
              ) -> tuple[_rearrange.NhwcCopies, GemmLaunch]:
    """What `_run` enqueues for one (problem, config), worked out once: the NHWC copies,
    then the GEMM kernel over them (a strided 1x1 layer as the stride-1 one over the pixels
    the copy of x gathered: `_rearrange.gathered`; a first layer's channels padded:
    `_rearrange.nhwc_problem`). K runs (r, s, c): first divisor C/groups."""
    tile = parse_config(problem.dtype, problem.math, config).tile
    assert isinstance(tile, WgmmaTile), config
    grid, kper = launch(problem, config)
    return (_rearrange.nhwc_copies(problem, nhwc_parts(problem, tile)),
            gemm_launch(
                _rearrange.nhwc_problem(problem), workspace_layout(problem, config), KERNEL_FILE,
                name_expression(problem.dtype, config, problem.math),
                tile.smem_bytes(copies(problem.dtype, problem.math)), tile.threads, grid, kper,
                _rearrange.nhwc_channels(problem)))


class ImplicitGemmWgmmaCuda(CudaByForward, _ImplicitGemmWgmmaCudaForward):
    """The forward algorithm above, and both backward directions through it."""

    replayable: ClassVar[bool] = True  # every GPU call through _launch or _cublas
