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
each writing FP32 partial sums to the workspace; the last slice of a tile to finish adds
them in a fixed order into y (kernels/common.cuh sum_split_tile, as implicit_gemm_tc's
kernel does).

Limits: C/groups a whole number of 16-byte vectors (8 16-bit values, 4 floats), which with
one group the NHWC copies make so by padding the channels with zeros (a network's first
layer, C = 3: _rearrange.nhwc_channels; the GEMM then runs over the padded K); tensors
below 2**31 elements; a compute-capability-9.0 GPU (the loader refuses any other with a
RuntimeError, which the tuner records as a failed candidate, before compiling anything).
Workspace: the NHWC copies of x and w (both parts of each at 3xTF32), or for an NCHW
configuration an aligned copy of w, and S x the output in float32 for split K.

Resources (ptxas, CUDA 13, sm_90a): see BENCHMARKS.md's table; no spills, no stack; one
block per SM (`__launch_bounds__(threads, 1)`).

The configurations (tiles, names, their parsing and template instances) are
_wgmma_configs'; this module offers them per problem, lays out their workspaces and
enqueues their runs.
"""

from __future__ import annotations

import functools
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
from algorithms.cuda._wgmma_configs import (
    CTYPES,
    VECTOR_BYTES,
    WgmmaTile,
    copies,
    name_expression,
    parse_config,
    shipped_tiles,
    tile_k_step,
    warp_specialized,
)

# This module's part of KERNEL_MODULES' interface (with KERNEL_FILE and get_kernel).
from algorithms.cuda._wgmma_configs import shipped_kernels as shipped_kernels
from algorithms.cuda._wgmma_nchw import NchwTile
from algorithms.cuda.implicit_gemm_tc import k_splits, split_steps
from algorithms.problem import ConvProblem

KERNEL_FILE = "implicit_gemm_wgmma.cu"
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
        try:
            padded = _rearrange.nhwc_problem(problem)
        except ValueError:  # padded past the problem model's own limits: far past int32
            padded = None
        if padded is None or not tensors_fit_int32(
                problem, *(prod(shape) for shape in padded.operand_shapes)):
            return unsupported("a padded NHWC copy has 2**31 elements or more "
                               "(32-bit indexing)")
        return gemm_limits(problem, self.configs(problem))

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """The tiles whose grid fits this problem (with the NCHW ones _wgmma_nchw.offered
        for it), then those split along K where their grid is below one wave
        (implicit_gemm_tc.k_splits)."""
        nchw = _wgmma_nchw.offered(problem)
        shipped = {name: tile for name, tile in shipped_tiles(problem.dtype, problem.math).items()
                   if (name in nchw or not isinstance(tile, NchwTile))
                   and _parts_fit(problem, tile)}
        whole = fitting_tiles(problem, shipped)
        return whole + tuple(
            f"{t}-k{s}" for t in whole if not warp_specialized(shipped[t])
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
