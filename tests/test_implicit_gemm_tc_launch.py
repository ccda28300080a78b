"""implicit_gemm_tc's launch on the host, against independent oracles: each configuration's
shared memory as kernels/implicit_gemm_tc.cu declares its tiles, the pipeline depth the
docstring promises, the copy widths a caller's misaligned buffer is given, and the K index's
first divisor. A wrong answer in any is a shared-memory overrun, a misaligned 16-byte copy
or a wrong index on a GPU; no CPU run of the host code shows it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from algorithms.cuda import implicit_gemm_tc as tc
from algorithms.cuda._base import fitting_tiles
from algorithms.cuda._loader import DEFAULT_SMEM_LIMIT, KERNELS_DIR, fastdiv
from algorithms.problem import ConvProblem
from tests.cuda_kernel_standins import Sized

ALG = tc.ImplicitGemmTcCuda()
SOURCE = (KERNELS_DIR / tc.KERNEL_FILE).read_text(encoding="utf-8")


def _pad(name: str, f32: bool) -> int:
    """APAD or BPAD as the kernel defines it (`constexpr int APAD = F32 ? 4 : 8;`)."""
    found = re.search(rf"constexpr int {name} = (?:F32 \? (\d+) : (\d+)|(\d+));", SOURCE)
    assert found is not None, name
    wide, narrow, fixed = found.groups()
    return int(fixed) if fixed else int(wide if f32 else narrow)


def _kernel_smem(dtype: str, config: str) -> int:
    """The kernel's tiles' bytes: STAGES x ([BM][BK + APAD] + B's [BK][BN + BPAD], or NHWC
    [BN][BK + APAD]) elements."""
    cfg = tc.parse_config(config)
    f32 = dtype == "float32"
    item = 4 if f32 else 2
    apad, bpad = _pad("APAD", f32), _pad("BPAD", f32)
    t, bk = cfg.tile, cfg.bk
    b = t.bn * (bk + apad) if cfg.nhwc else bk * (t.bn + bpad)
    return tc.stages(dtype, config) * (t.bm * (bk + apad) + b) * item


CONFIGS = [*tc.CONFIGS, *(c + tc.NHWC for c in tc.CONFIGS),
           *(c + tc.BK32 + tc.NHWC for c in tc.BK32_TILES), *tc.DEEP_CONFIGS]


@pytest.mark.parametrize(("dtype", "config"), [
    (dtype, config) for config in CONFIGS for dtype in ("float32", "float16", "bfloat16")
    if tc.BK32 not in config or dtype != "float32"])  # K-steps of 32 are 16-bit only
def test_shared_memory_is_what_the_kernel_declares(dtype: str, config: str) -> None:
    # Mutation gap: the NCHW B tiles' row padding (BPAD) in smem_bytes was unpinned: four
    # floats less per row passed, and the kernel's tiles would overrun the block's memory.
    assert tc.smem_bytes(dtype, config) == _kernel_smem(dtype, config)


def test_the_pipeline_takes_at_most_four_stages_the_most_that_fit_48_kib() -> None:
    # Mutation gap: MAX_STAGES was unpinned: 5 stages passed where the docstring promises at
    # most 4 (and shipped_kernels, compiled spill-free, lists 4).
    # float16 64x64, NCHW: (64 x (16 + 8) + 16 x (64 + 8)) x 2 = 5376 bytes a stage; 9 fit.
    assert tc.stages("float16", "64x64") == 4
    # float32 128x128, NHWC: (128 x 20 + 128 x 20) x 4 = 20480 bytes a stage; 2 fit.
    assert tc.stages("float32", "128x128-nhwc") == 2
    # float32 128x64, NCHW: (128 x 20 + 16 x 72) x 4 = 14848 bytes a stage; 3 fit.
    assert tc.stages("float32", "128x64") == 3
    assert tc.smem_bytes("float32", "128x64") == 3 * 14848 <= DEFAULT_SMEM_LIMIT


def _widths_run(monkeypatch: pytest.MonkeyPatch, problem: ConvProblem, config: str,
                x_ptr: int, w_ptr: int) -> tuple[int, int] | None:
    taken: list[tuple[int, int] | None] = []

    class _Launch:
        def enqueue(self, *args: Any) -> None:
            pass

    def launch(problem: ConvProblem, config: str, widths: tuple[int, int] | None) -> _Launch:
        taken.append(widths)
        return _Launch()

    monkeypatch.setattr(tc, "_launch", launch)
    ws = ALG.workspace_bytes(problem, config)
    ALG._run(Sized(1, x_ptr), Sized(1, w_ptr), Sized(1), Sized(ws) if ws else None, problem,
             config)
    (widths,) = taken
    return widths


def test_a_misaligned_operand_is_copied_element_by_element(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Mutation gap: the 16-byte alignment test of a caller's x and w was unpinned: at 8 bytes
    # off (a sliced buffer) 16-byte copies passed, a misaligned-address fault on a GPU.
    pointwise = ConvProblem(n=2, c=8, h=4, w=4, k=8, r=1, s=1)  # float32: (4, 4)
    assert tc.vector_widths(pointwise) == (4, 4)
    cases = {(0x2000, 0x1000): (4, 4), (0x2008, 0x1000): (4, 1), (0x2004, 0x1000): (4, 1),
             (0x2000, 0x1008): (1, 1), (0x2008, 0x1008): (1, 1), (0x2000, 0x1004): (1, 1)}
    for (x_ptr, w_ptr), want in cases.items():
        assert _widths_run(monkeypatch, pointwise, "64x64", x_ptr, w_ptr) == want, (
            hex(x_ptr), hex(w_ptr))


def test_a_filter_row_of_whole_vectors_is_copied_in_vectors() -> None:
    # Mutation gap: A's vector test on C/groups alone (not the whole row C/groups*R*S) was
    # unpinned: a 2-channel 2x2 float32 filter (rows of 8 floats) lost its vector copies.
    assert tc.vector_widths(ConvProblem(n=1, c=2, h=5, w=5, k=4, r=2, s=2)) == (4, 1)
    assert tc.vector_widths(ConvProblem(n=1, c=3, h=5, w=5, k=4, r=1, s=3)) == (1, 1)


def test_the_nhwc_gemm_divides_k_by_the_channels_of_one_group() -> None:
    # Mutation gap: the NHWC K index's first divisor (C/groups: K runs (r, s, c) per group)
    # was unpinned: C passed on every tested layer.
    problem = ConvProblem(n=1, c=16, h=6, w=6, k=8, r=3, s=3, pad=1, groups=2)
    args = tc._launch(problem, "64x64-nhwc", None).gemm.args
    p, q = problem.out_hw
    want: list[int] = []
    for d in (16 // 2, problem.s, p * q, q):
        want += fastdiv(d)
    assert [int(a) for a in args[4:12]] == want


def test_a_tile_is_offered_up_to_65535_groups_x_channel_tiles_and_no_further() -> None:
    # Mutation gap: fitting_tiles' bound (CUDA's gridDim.y limit, 65535) was unpinned: one
    # tile row more passed, a launch a GPU refuses.
    tile = tc.TcTile(64, 64, 2, 2)
    at_limit = ConvProblem(n=1, c=1, h=1, w=1, k=65535 * 64, r=1, s=1)
    past = ConvProblem(n=1, c=1, h=1, w=1, k=65535 * 64 + 1, r=1, s=1)
    assert fitting_tiles(at_limit, {"t": tile}) == ("t",)
    assert fitting_tiles(past, {"t": tile}) == ()
    grouped = ConvProblem(n=1, c=65536, h=1, w=1, k=65536, r=1, s=1, groups=65536)
    assert fitting_tiles(grouped, {"t": tile}) == ()  # one tile row per group
