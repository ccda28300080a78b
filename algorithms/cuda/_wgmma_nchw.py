"""implicit_gemm_wgmma's NCHW configurations (kernels/implicit_gemm_wgmma_nchw.cu): one
group, float32 at math "tf32" (1xTF32) or "fp32" (3xTF32); a 1x1 filter at any stride and
padding with every tile, a filter with taps (any stride, padding and dilation) with the
large tiles of TAP_TILES.

The kernel computes the transposed GEMM (pixels by output channels, K over the input
channels), with x's tile of NCHW rows loaded into registers as wgmma's A operand and W's rows
as its K-major B: no NHWC copy of x or w, where the NHWC configurations write both before
their GEMM (on ResNet-50's late 1x1 layers in TF32 those copies are about a third of the run).
x is read in 16-byte vectors at stride 1 without padding where P*Q is a multiple of 4 and x
is 16-byte aligned, else element by element (the kernel's VEC, chosen per call: a caller's
sliced buffer may be misaligned); a strided layer reads only the pixels its filter does, as
the NHWC configurations' gathered copy of x does. W is read in 16-byte vectors only: a
misaligned w is first copied to the workspace's "w" region (one plain copy launch; it is
reserved for every run so that the workspace does not depend on an address).

With taps, K runs tap by tap, ceil(C / 32) K-steps each, and W is first transposed to
(K, R*S, C) in that region on every run (one launch; a filter is small next to x: VGG-16's
conv3_2 reads 2.4 MB of W against 51 MB of x), so that a tap's channels are contiguous in
a W row as a 1x1 filter's are; the transpose also rounds W to TF32, or at 3xTF32 writes its
big part and then its small one (_rearrange.PARTS 1 and 2, as the NHWC copies do), which
the kernel then need not do in shared memory. x is read element by element (a tap's pixels
are shifted off the 16-byte grid). Why: on 3x3 layers the NHWC configurations write a copy
of x (two at 3xTF32) before their GEMM: on VGG-16's early layers half the bytes moved at
TF32, two thirds at 3xTF32 (benchmarks/pointwise_bytes.py --taps).

Configuration names "BMxBNx32-sS[-f1]-nchw": BM output channels (the wgmma N, 64 or 128, or
96 where K is better covered by it: `fits_96`) by BN output pixels (64 per warpgroup),
K-steps of 32 channels, S cp.async stages; "-f1" leaves each K-step's wgmma running through
the next step's barrier (as in the NHWC configurations; at 3xTF32 between additions of its
partial sums, every four K-steps); "-kS" after them splits K as theirs do.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from algorithms.base import WorkspaceLayout
from algorithms.cuda import _rearrange
from algorithms.cuda._gemm_launch import GemmLaunch, gemm_launch
from algorithms.cuda._launch import Address, KernelLaunch
from algorithms.cuda._loader import get_kernel
from algorithms.cuda.implicit_gemm_tc import passes
from algorithms.problem import ConvProblem

KERNEL_FILE = "implicit_gemm_wgmma_nchw.cu"
#: The suffix that marks these configurations among implicit_gemm_wgmma's.
SUFFIX = "-nchw"
#: Channels per K-step: 128 bytes of a W row.
BK = 32
#: Floats of padding per channel row of x's shared tile (the kernel's LDX = BN + 8: its
#: fragment loads are free of bank conflicts).
X_PAD = 8
#: Floats per copy of x: 16-byte vectors, or single elements.
VECTORS = (4, 1)


@dataclass(frozen=True)
class NchwTile:
    """One NCHW configuration's tile: BM output channels by BN output pixels, its pipeline
    depth, and the K-steps of wgmma it leaves running across the next step's barrier."""

    bm: int
    bn: int
    stages: int
    in_flight: int = 0

    @property
    def threads(self) -> int:
        """Threads per block: a warpgroup per 64 pixels."""
        return self.bn // 64 * 128

    def smem_bytes(self, copies: int) -> int:
        """Dynamic shared memory: per stage, the W tile(s) (BM x 128 bytes) and x's (BK
        channel rows of BN + X_PAD floats)."""
        return self.stages * (copies * self.bm * 128 + BK * (self.bn + X_PAD) * 4)


def _named(tiles: tuple[NchwTile, ...]) -> dict[str, NchwTile]:
    return {f"{t.bm}x{t.bn}x{BK}-s{t.stages}{'-f1' if t.in_flight else ''}{SUFFIX}": t
            for t in tiles}


#: Shipped tiles per W copies in shared memory (1: 1xTF32, 2: 3xTF32's big and small), in at
#: most 168 KiB; tests/test_kernels_compile.py builds each for sm_90a. 1xTF32 keeps one group
#: in flight with five stages (three K-steps of copies ahead); 3xTF32 both waits for each
#: K-step and keeps one in flight (adding its partial sums every four K-steps, as
#: implicit_gemm_wgmma's NHWC 3xTF32 -f1 tiles do), with the most stages that fit (its
#: 128x128 tile takes 147 KiB in three).
#: The 96-row tiles (one each, in flight as the large tiles: 3xTF32's four stages take 164 KiB)
#: are offered only where `fits_96`.
TILES: dict[int, dict[str, NchwTile]] = {
    1: _named((NchwTile(128, 128, 5, 1), NchwTile(128, 64, 5, 1), NchwTile(64, 128, 5, 1),
               NchwTile(64, 64, 5, 1), NchwTile(96, 128, 5, 1))),
    2: _named((NchwTile(128, 128, 3), NchwTile(128, 64, 4), NchwTile(64, 128, 4),
               NchwTile(64, 64, 4), NchwTile(128, 128, 3, 1), NchwTile(128, 64, 4, 1),
               NchwTile(64, 128, 4, 1), NchwTile(64, 64, 4, 1), NchwTile(96, 128, 4, 1))),
}


#: The tiles offered on filters with taps, per W copies: the largest of each, as on 3x3
#: layers the NHWC configurations' winners are their large tiles (TF32 and 3xTF32, H200,
#: 2026-11-27), and each tile offered costs every such layer a measurement; and the 96-row
#: one where `fits_96`.
TAP_TILES: dict[int, tuple[str, ...]] = {
    1: ("128x128x32-s5-f1-nchw", "64x128x32-s5-f1-nchw", "96x128x32-s5-f1-nchw"),
    2: ("128x128x32-s3-f1-nchw", "64x128x32-s4-f1-nchw", "96x128x32-s4-f1-nchw")}


def fits_96(k: int) -> bool:
    """Whether 96-row tiles cover `k` output channels with fewer rows than both 128- and
    64-row ones (K = 96, 288, 480, ...; and 65-96). Why: on such layers every other tile
    multiplies rows past K (GoogLeNet's inception3b.5x5, K = 96: a quarter of a 128-row
    tile's tensor work; on the H100 of 2026-11-27 its slowest layer, 0.59 of cuDNN FP32),
    and elsewhere a 96-row tile would only add a measurement."""
    rows = -(-k // 96) * 96
    return rows < -(-k // 128) * 128 and rows < -(-k // 64) * 64


def taps(problem: ConvProblem) -> bool:
    """Whether a problem's filter has more than one tap (the kernel's TAPS)."""
    return problem.r * problem.s > 1


def offered(problem: ConvProblem) -> frozenset[str]:
    """The NCHW configurations (tile names) that run `problem`: float32, one group, C a
    whole number of 16-byte W vectors; every tile on a 1x1 filter, TAP_TILES' with taps;
    the 96-row ones only where `fits_96`."""
    if not (problem.dtype == "float32" and problem.groups == 1 and problem.c % 4 == 0):
        return frozenset()
    shipped = tiles(problem.math)
    names = TAP_TILES[copies(problem.math)] if taps(problem) else shipped
    return frozenset(name for name in names if shipped[name].bm != 96 or fits_96(problem.k))


@functools.lru_cache(maxsize=4096)
def k_problem(problem: ConvProblem) -> ConvProblem:
    """The problem whose implicit_gemm_tc.k_steps counts the NCHW kernel's K-steps: C
    rounded up to whole K-steps, as each tap takes ceil(C / BK) of them."""
    channels = -(-problem.c // BK) * BK
    return problem if channels == problem.c else ConvProblem.from_key(
        {**problem.key(), "c": channels})


def copies(math: str) -> int:
    """W tiles per stage: 3xTF32's big and small, or 1xTF32's one (implicit_gemm_tc.passes
    says which a math mode runs)."""
    return 2 if passes("float32", math) == 3 else 1


def tiles(math: str) -> dict[str, NchwTile]:
    """The NCHW tiles shipped for a math mode."""
    return TILES[copies(math)]


def name_expression(tile: NchwTile, math: str, vec: int, with_taps: bool = False) -> str:
    """The kernel template instance of a tile, math mode, x copy width and filter kind."""
    return (f"implicit_gemm_wgmma_nchw<{tile.bm}, {tile.bn}, {tile.stages}, {copies(math)}, "
            f"{tile.in_flight}, {vec}{', true' if with_taps else ''}>")


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression implicit_gemm_wgmma can ask of this file."""
    return (*(name_expression(t, m, v) for m in ("tf32", "fp32") for t in tiles(m).values()
              for v in VECTORS),
            *(name_expression(tiles(m)[name], m, 1, True) for m in ("tf32", "fp32")
              for name in TAP_TILES[copies(m)]))


def add_workspace(layout: WorkspaceLayout, problem: ConvProblem) -> WorkspaceLayout:
    """Reserve w's copy (K, R*S, C): with taps the transposed filter every run reads (its
    big and small parts at 3xTF32), else the aligned copy that a misaligned caller's w is
    run from."""
    parts = copies(problem.math) if taps(problem) else 1
    return layout.add("w", (parts * problem.k, problem.r * problem.s, problem.c),
                      problem.dtype)


@functools.lru_cache(maxsize=4096)  # asked on every run
def _vector_pixels(problem: ConvProblem) -> bool:
    """Whether output pixels are input pixels (stride 1, no padding) and a 16-byte vector of
    them stays in one image."""
    out_h, out_w = problem.out_hw
    return problem.pointwise and (out_h * out_w) % 4 == 0


def x_vector(problem: ConvProblem, x_ptr: int) -> int:
    """The kernel's VEC for a call: 4 where `_vector_pixels` and x is 16-byte aligned, else
    1."""
    return 4 if _vector_pixels(problem) and x_ptr % 16 == 0 else 1


@dataclass(frozen=True)
class NchwRun:
    """What one run enqueues, worked out once per (problem, config, VEC): the GEMM kernel's
    launch, and where w is copied first: on every run with taps (transposed), else where it
    is misaligned."""

    gemm: GemmLaunch
    w_bytes: slice
    w_copy: KernelLaunch
    with_taps: bool = False

    def enqueue(self, x: Any, w: Any, y: Any, workspace: Any) -> None:
        """The GEMM kernel on the current stream, after w's copy where it needs one."""
        if self.with_taps or w.data.ptr % 16:
            aligned = Address(workspace.data.ptr + self.w_bytes.start)
            _rearrange.enqueue_copy(self.w_copy, w, aligned)
            w = aligned
        self.gemm.enqueue(get_kernel, x, w, y, workspace)


def nchw_run(problem: ConvProblem, tile: NchwTile, layout: WorkspaceLayout,
             grid: tuple[int, int, int], kper: int, vec: int) -> NchwRun:
    """The NchwRun of a tile on `problem` (`layout`: its workspace, with add_workspace's "w"
    and split K's "part"; `grid` and `kper` as implicit_gemm_wgmma's launch gives them)."""
    with_taps = taps(problem)
    return NchwRun(
        gemm_launch(problem, layout, KERNEL_FILE,
                    name_expression(tile, problem.math, vec, with_taps),
                    tile.smem_bytes(copies(problem.math)), tile.threads, grid, kper, problem.c),
        layout.byte_ranges()["w"],
        _rearrange.filter_transpose(problem, copies(problem.math)) if with_taps
        else _rearrange.plain_copy(problem.k, problem.c, problem.itemsize),
        with_taps)
