"""implicit_gemm_tc's configurations: the block tiles, the names that pick them, and the
kernel instance, pipeline depth and shared memory each needs (algorithms/cuda/
implicit_gemm_tc.py runs them; its docstring says what each configuration is for).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from algorithms.cuda._loader import CTYPES, DEFAULT_SMEM_LIMIT
from algorithms.problem import DTYPES as DTYPE_BYTES
from algorithms.problem import MATHS

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
    return tuple(dict.fromkeys(names))
