"""implicit_gemm_wgmma's configurations (algorithms/cuda/implicit_gemm_wgmma.py says what
the kernels do and why these): the NHWC tiles shipped per element size and operand copies,
float32's 3xFP16 part tiles, configuration names and their parsing (the NCHW tiles'
are _wgmma_nchw's), and the kernel template instance of each.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from algorithms.cuda import _wgmma_nchw
from algorithms.cuda._wgmma_nchw import NchwTile
from algorithms.cuda.implicit_gemm_tc import passes
from algorithms.problem import DTYPES as DTYPE_BYTES

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
def shipped_tiles(dtype: str, math: str) -> dict[str, WgmmaTile | NchwTile]:
    """Every tile shipped for a dtype and math: the NHWC ones, and for float32 the NCHW ones
    (_wgmma_nchw, which says where each is offered)."""
    nchw = _wgmma_nchw.tiles(math) if dtype == "float32" else {}
    return {**tiles(dtype, math), **nchw}


@functools.lru_cache(maxsize=256)  # asked on every run
def parse_config(dtype: str, math: str, config: str) -> WgmmaConfig:
    """The tile and splits of a configuration name; ValueError for a name not shipped for the
    dtype and math."""
    shipped = shipped_tiles(dtype, math)
    tile, _, splits = config.partition("-k")
    split = splits.isdigit() and int(splits) >= 2 and not warp_specialized(shipped.get(tile))
    if tile not in shipped or not (splits == "" or split):
        raise ValueError(f"implicit_gemm_wgmma: unknown config {config!r} for {dtype} at "
                         f"math {math!r}")
    return WgmmaConfig(shipped[tile], int(splits or 1))


def warp_specialized(tile: WgmmaTile | NchwTile | None) -> bool:
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


def tile_k_step(dtype: str, tile: WgmmaTile | NchwTile) -> int:
    """Elements of K per K-step of a tile's operands (an NCHW tile's are the problem's)."""
    return k_step(tile.operands(dtype) if isinstance(tile, WgmmaTile) else dtype)
