"""implicit_gemm_tc's host side without a GPU: supports, configs, name expressions, limits.

The kernel itself is compiled spill-free for sm_80 and sm_90 by tests/test_kernels_compile.py
(every name in shipped_kernels()) and run under the emulator by tests/test_cuda_emulated.py.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from algorithms.cuda import implicit_gemm_tc as tc
from algorithms.cuda import shipped_kernels
from algorithms.cuda._loader import DEFAULT_SMEM_LIMIT, KERNELS_DIR
from algorithms.problem import DIRECTIONS, ConvProblem
from algorithms.registry import ALGORITHM_NAMES, get_algorithm
from tests.precision import make_problem

ALG = tc.ImplicitGemmTcCuda()
BASIC: dict[str, Any] = dict(n=2, c=16, h=9, w=9, k=24, r=3, s=3, pad=1)
#: Every configuration name: each tile gathering from NCHW, and from NHWC copies.
ALL_CONFIGS = [*tc.CONFIGS, *(c + tc.NHWC for c in tc.CONFIGS),
               *(c + tc.BK32 + tc.NHWC for c in tc.BK32_TILES), *tc.DEEP_CONFIGS]


def test_name_is_registered_after_the_first_four() -> None:
    assert ALGORITHM_NAMES[:5] == ("direct", "im2col_gemm", "implicit_gemm", "fft",
                                   "implicit_gemm_tc")
    assert get_algorithm("cuda", "implicit_gemm_tc").name == "implicit_gemm_tc"


def test_cpu_entry_is_gpu_only_with_a_reason() -> None:
    support = get_algorithm("cpu", "implicit_gemm_tc").supports(ConvProblem(**BASIC))
    assert not support and "GPU-only" in str(support.reason)


@pytest.mark.parametrize(("dtype", "math"), [
    ("float32", "fp32"), ("float32", "tf32"), ("float16", "fp32"), ("bfloat16", "fp32"),
])  # TF32 is a float32 choice: ConvProblem refuses it with 16-bit storage
def test_supports_every_dtype_and_math(dtype: str, math: str) -> None:
    problem = make_problem(**BASIC, dtype=dtype, math=math)
    assert ALG.supports(problem)
    # C = 16 is whole vectors: NHWC variants too; a grid of 1-2 blocks over 9 K-steps: split
    # in 2 (at least 4 K-steps per split).
    tiles = tuple(tc.tiles(dtype, math))
    whole = tiles + tuple(t + tc.NHWC for t in tiles)
    # 16-bit: K-steps of 32 too; and the "-sS" tiles (5 K-steps of 32 here: too few to split;
    # the float32 ones have 9 of 16, and split like the others).
    deep = tuple(t + tc.BK32 + tc.NHWC for t in tc.BK32_TILES) if dtype != "float32" else ()
    deep += tc.deep_configs(dtype, math)
    if dtype == "float32":
        whole += deep
        deep = ()
    assert ALG.configs(problem) == whole + deep + tuple(f"{c}-k2" for c in whole)
    assert all(ALG.workspace_bytes(problem, t) == 0 for t in tiles)
    # NHWC: x (2*9*9*16 elements) and w (24*9*16); split: 2 float32 outputs (2*24*9*9);
    # each rounded up to 256 bytes.
    item = problem.itemsize

    def aligned(nbytes: int) -> int:
        return -(-nbytes // 256) * 256

    nhwc = aligned(2 * 81 * 16 * item) + aligned(24 * 9 * 16 * item)
    split = aligned(2 * 2 * 24 * 81 * 4)
    for t in tiles:
        assert ALG.workspace_bytes(problem, t + tc.NHWC) == nhwc
        assert ALG.workspace_bytes(problem, t + "-k2") == split
        assert ALG.workspace_bytes(problem, t + tc.NHWC + "-k2") == nhwc + split
    # 3xTF32 leaves out the one tile that spills with its per-step partial sums.
    assert ("128x64" in ALG.configs(problem)) == (tc.passes(dtype, math) == 1)


def test_refuses_float64_in_every_direction_and_serves_both_backward_ones() -> None:
    for direction in DIRECTIONS:
        support = ALG.supports(ConvProblem(**BASIC, dtype="float64", direction=direction))
        assert not support and "float64" in str(support.reason)
    for direction in ("backward_data", "backward_filter"):
        assert ALG.supports(ConvProblem(**BASIC, direction=direction))


def test_refuses_a_grid_too_tall() -> None:
    # groups * channel tiles beyond grid.y's 65535: 70000 groups of one channel each.
    problem = ConvProblem(n=1, c=70000, h=1, w=1, k=70000, r=1, s=1, groups=70000)
    support = ALG.supports(problem)
    assert not support and "grid" in str(support.reason)


def test_refuses_int32_overflow() -> None:
    problem = ConvProblem(n=64, c=1024, h=256, w=256, k=8, r=1, s=1)
    assert not ALG.supports(problem)


def test_math_picks_the_number_of_tf32_passes() -> None:
    assert tc.passes("float32", "fp32") == 3
    assert tc.passes("float32", "tf32") == 1
    assert tc.passes("float16", "fp32") == tc.passes("bfloat16", "tf32") == 1
    assert tc.name_expression("float32", "64x64", "fp32").endswith(", 3, 1, 1, false, 16>")
    assert tc.name_expression("float32", "64x64", "tf32").endswith(", 1, 1, 1, false, 16>")
    assert tc.name_expression("bfloat16", "64x64").startswith("implicit_gemm_tc_conv<bf16_t,")


def test_shipped_instances_are_every_dtype_config_math_and_copy_width() -> None:
    names = shipped_kernels()[tc.KERNEL_FILE]
    # (f32 x 2 maths, f16, bf16; 3xTF32 without 128x64) x (NCHW element, vector A, vector A
    # and B; NHWC), the 16-bit NHWC tiles with K-steps of 32, the "-sS" ones in each layout
    # (three in 1xTF32, none in 3xTF32, three per 16-bit dtype); split K needs no kernel more
    assert len(names) == len(set(names)) == (
        (len(tc.CONFIGS) * 4 - 1) * 4 + 2 * len(tc.BK32_TILES) + 2 * (3 + 2 * 3))
    assert tc.deep_configs("float32", "fp32") == tc.deep_configs("float32", "fp32", False) == ()
    for dtype in tc.DTYPES:
        vec = tc.vector_elements(dtype)
        for math in tc.MATHS:
            for config in tc.tiles(dtype, math):
                for widths in ((1, 1), (vec, 1), (vec, vec)):
                    name = tc.name_expression(dtype, config, math, widths)
                    assert name in names and name.endswith(f"{widths[1]}, false, 16>")
                nhwc = tc.name_expression(dtype, config + tc.NHWC, math)
                assert nhwc in names and nhwc.endswith(f"{vec}, {vec}, true, 16>")
                # A split runs the same GEMM instance.
                assert tc.name_expression(dtype, config + tc.NHWC + "-k4", math) == nhwc
        for config in tc.BK32_TILES:
            deep = tc.name_expression(dtype, config + tc.BK32 + tc.NHWC)
            assert (deep in names) == (dtype != "float32")
            assert deep.endswith(f"{vec}, {vec}, true, 32>")
        for math in tc.MATHS:  # 64x64 warp tiles, the stages the name gives
            for config in tc.deep_configs(dtype, math):
                found = re.match(r"\d+x\d+", config)
                assert found is not None
                tile, depth = tc.DEEP_TILES[found[0]]
                bk = 32 if tc.BK32 + tc.NHWC in config else 16
                expected = (f"{tile.bm}, {tile.bn}, {tile.bm // 64}, {tile.bn // 64}, {depth}, "
                            f"{tc.passes(dtype, math)}, {vec}, {vec}, true, {bk}>")
                deep = tc.name_expression(dtype, config, math)
                assert deep in names and deep.endswith(expected)
            # NCHW: K-step 16, with vector A and B only (run_config falls back without them).
            for config in tc.deep_configs(dtype, math, nhwc=False):
                tile, depth = tc.DEEP_TILES[config.split("-")[0]]
                expected = (f"{tile.bm}, {tile.bn}, {tile.bm // 64}, {tile.bn // 64}, {depth}, "
                            f"{tc.passes(dtype, math)}, {vec}, {vec}, false, 16>")
                deep = tc.name_expression(dtype, config, math, (vec, vec))
                assert deep in names and deep.endswith(expected)
                assert tc.name_expression(dtype, config, math, (vec, 1)) not in names


def test_config_names_parse_and_unknown_ones_are_refused() -> None:
    assert tc.parse_config("64x128") == tc.TcConfig(tc.CONFIGS["64x128"], False, 1)
    assert tc.parse_config("64x128-nhwc-k3") == tc.TcConfig(tc.CONFIGS["64x128"], True, 3)
    assert tc.parse_config("32x128-k8") == tc.TcConfig(tc.CONFIGS["32x128"], False, 8)
    assert tc.parse_config("128x64x32-nhwc-k2") == tc.TcConfig(tc.CONFIGS["128x64"], True, 2,
                                                               32)
    assert tc.parse_config("256x128x32-nhwc-s3-k2") == tc.TcConfig(
        tc.TcTile(256, 128, 4, 2), True, 2, 32, 3)
    assert tc.parse_config("128x128x32-nhwc-s4") == tc.TcConfig(
        tc.TcTile(128, 128, 2, 2), True, 1, 32, 4)
    assert tc.parse_config("128x256-nhwc-s3-k4") == tc.TcConfig(  # float32, math "tf32"
        tc.TcTile(128, 256, 2, 4), True, 4, 16, 3)
    assert tc.parse_config("128x128-s4-k2") == tc.TcConfig(  # NCHW
        tc.TcTile(128, 128, 2, 2), False, 2, 16, 4)
    for bad in ("16x16", "64x128-k", "64x128-k2-nhwc", "64x128-nchw", "default",
                "128x128x32", "64x64x32-nhwc", "128x128x16-nhwc", "128x128-nhwcx32",
                # "-sS" only with the stage count DEEP_TILES gives, K-step 32 and NHWC
                "128x128x32-nhwc-s3", "256x128x32-nhwc-s4", "128x128-nhwc-s3",
                "128x128x32-s4", "256x128x32-nhwc", "256x128", "128x128x32-nhwc-k2-s4",
                "128x128-s3", "256x128-s4", "64x64-s4", "128x128x32-s4-k2",
                "64x64-nhwc-s4"):
        with pytest.raises(ValueError, match="unknown config"):
            tc.parse_config(bad)
    problem = ConvProblem(**BASIC)
    with pytest.raises(ValueError, match="unknown config"):
        ALG.workspace_bytes(problem, "64x64-k3")  # parses, but is not offered here


def test_k_splits_fill_one_wave_with_long_enough_slices() -> None:
    # ResNet-50 res5 1x1 b32 (N*P*Q = 1568, K = 512, C = 2048: 128 K-steps): 128x128 has
    # 13 x 4 = 52 blocks -> 3 splits; 64x64 has 25 x 8 = 200, no split.
    res5 = ConvProblem(n=32, c=2048, h=7, w=7, k=512, r=1, s=1)
    assert tc.k_splits(res5, tc.CONFIGS["128x128"]) == 3
    assert tc.k_splits(res5, tc.CONFIGS["64x64"]) == 1
    assert "128x128-k3" in ALG.configs(res5) and "64x64-k2" not in ALG.configs(res5)
    # GoogLeNet-like k = 16 reduction, 1 block: capped at MAX_SPLITS.
    narrow = ConvProblem(n=1, c=832, h=7, w=7, k=16, r=1, s=1)
    assert tc.k_splits(narrow, tc.CONFIGS["32x128"]) == tc.MAX_SPLITS
    # Short K: 8 K-steps allow 2 slices of 4; 7 allow none.
    assert tc.k_splits(ConvProblem(n=1, c=128, h=4, w=4, k=8, r=1, s=1),
                       tc.CONFIGS["64x64"]) == 2
    assert tc.k_splits(ConvProblem(n=1, c=112, h=4, w=4, k=8, r=1, s=1),
                       tc.CONFIGS["64x64"]) == 1


@pytest.mark.parametrize("steps", range(4, 40))
@pytest.mark.parametrize("splits", range(2, tc.MAX_SPLITS + 1))
def test_split_steps_cover_k_without_an_empty_split(steps: int, splits: int) -> None:
    problem = ConvProblem(n=1, c=steps * tc.BK, h=2, w=2, k=4, r=1, s=1)
    per, launched = tc.split_steps(problem, splits)
    assert launched <= splits and (launched - 1) * per < steps <= launched * per


def test_nhwc_is_offered_where_channel_vectors_fit_and_b_is_not_vector_filled() -> None:
    # NHWC needs C/groups % (16 bytes / itemsize) == 0 (a vector never spans two taps), and
    # is not offered where the NCHW kernel already fills B in vectors (pointwise layers).
    cases: list[tuple[dict[str, Any], str, bool]] = [
        (dict(n=1, c=8, h=6, w=6, k=8, r=3, s=3, pad=1), "float16", True),
        (dict(n=1, c=12, h=6, w=6, k=8, r=3, s=3, pad=1), "float16", False),  # 12 % 8
        (dict(n=1, c=12, h=6, w=6, k=8, r=3, s=3, pad=1), "float32", True),
        (dict(n=1, c=16, h=6, w=6, k=8, r=3, s=3, groups=4), "float32", True),  # cg = 4
        (dict(n=1, c=16, h=6, w=6, k=8, r=3, s=3, groups=8), "float32", False),  # cg = 2
        (dict(n=1, c=8, h=4, w=4, k=8, r=1, s=1), "float32", False),  # B vectors already
        (dict(n=1, c=8, h=3, w=3, k=8, r=1, s=1), "float32", True),  # P*Q = 9: B element-wise
        (dict(n=1, c=8, h=8, w=8, k=8, r=1, s=1, stride=2), "bfloat16", True),
    ]
    for kw, dtype, offered in cases:
        problem = make_problem(**kw, dtype=dtype)
        assert tc.nhwc_allowed(problem) == offered, (kw, dtype)
        assert any(c.endswith(tc.NHWC) for c in ALG.configs(problem)) == offered, (kw, dtype)


def test_workspace_holds_the_transposed_operands_and_the_partial_sums() -> None:
    problem = ConvProblem(n=3, c=8, h=5, w=7, k=6, r=3, s=2, groups=2, dtype="float16")
    layout = tc.workspace_layout(problem, "64x64-nhwc-k2")
    views = layout.views(np.zeros(layout.nbytes, np.uint8))
    assert views["x"].shape == (3, 5, 7, 8) and views["w"].shape == (6, 6, 4)
    assert views["x"].dtype == views["w"].dtype == np.float16
    assert views["part"].shape == (2, 3, 6, 3, 6) and views["part"].dtype == np.float32


def test_vector_widths_follow_the_filter_row_and_the_pointwise_geometry() -> None:
    # A vectors need C/groups*R*S % (16 bytes / itemsize) == 0; B vectors also a 1x1,
    # stride-1, unpadded filter and P*Q a whole number of vectors.
    cases: list[tuple[dict[str, Any], str, tuple[int, int]]] = [
        (dict(n=1, c=8, h=4, w=4, k=8, r=1, s=1), "float32", (4, 4)),
        (dict(n=1, c=8, h=4, w=4, k=8, r=1, s=1), "float16", (8, 8)),
        (dict(n=1, c=8, h=3, w=3, k=8, r=1, s=1), "float32", (4, 1)),  # P*Q = 9
        (dict(n=1, c=8, h=4, w=4, k=8, r=1, s=1, pad=1), "float32", (4, 1)),
        (dict(n=1, c=8, h=8, w=8, k=8, r=1, s=1, stride=2), "float32", (4, 1)),
        (dict(n=1, c=4, h=4, w=4, k=8, r=3, s=3, pad=1), "float32", (4, 1)),  # CRS = 36
        (dict(n=1, c=4, h=4, w=4, k=8, r=3, s=3, pad=1), "float16", (1, 1)),  # 36 % 8
        (dict(n=1, c=12, h=4, w=4, k=6, r=1, s=1, groups=3), "float32", (4, 4)),
        (dict(n=1, c=12, h=4, w=4, k=6, r=1, s=1, groups=6), "float32", (1, 1)),  # cg = 2
        (dict(n=1, c=3, h=8, w=8, k=8, r=7, s=7, pad=3), "bfloat16", (1, 1)),  # CRS = 147
    ]
    for kw, dtype, widths in cases:
        assert tc.vector_widths(make_problem(**kw, dtype=dtype)) == widths, (kw, dtype)


@pytest.mark.parametrize("config", ALL_CONFIGS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_stages_fit_48_kib_unless_the_config_opts_in(config: str, dtype: str) -> None:
    if tc.BK32 in config and dtype == "float32":
        pytest.skip("K-steps of 32 are 16-bit only")
    if config in tc.DEEP_CONFIGS and config not in (
            c for m in tc.MATHS for nhwc in (True, False) for c in tc.deep_configs(dtype, m, nhwc)):
        pytest.skip("a '-sS' configuration of the other width")
    assert 2 <= tc.stages(dtype, config) <= tc.MAX_STAGES
    if config in tc.DEEP_CONFIGS and tc.NHWC not in config:
        # NCHW: the NHWC tile's stages, which fit (16-bit ones within 48 KiB).
        assert tc.stages(dtype, config) == tc.DEEP_TILES[config.split("-")[0]][1]
        assert tc.smem_bytes(dtype, config) <= tc.DEEP_SMEM_LIMIT
    elif config in tc.DEEP_CONFIGS:  # and one more stage would pass the opt-in cap
        stage = tc.smem_bytes(dtype, config) // tc.stages(dtype, config)
        assert DEFAULT_SMEM_LIMIT < tc.smem_bytes(dtype, config) <= tc.DEEP_SMEM_LIMIT
        assert tc.smem_bytes(dtype, config) + stage > tc.DEEP_SMEM_LIMIT
    else:
        assert tc.smem_bytes(dtype, config) <= DEFAULT_SMEM_LIMIT


@pytest.mark.parametrize("config", list(tc.CONFIGS))
def test_tiles_split_into_warps_and_mma_tiles(config: str) -> None:
    t = tc.CONFIGS[config]
    assert t.bm % (16 * t.wm) == 0 and t.bn % (8 * t.wn) == 0
    for bk in (tc.BK, tc.BK32_STEP) if config in tc.BK32_TILES else (tc.BK,):
        assert t.threads % t.bn == 0 and bk % (t.threads // t.bn) == 0  # kernel static_asserts
        assert t.bm * bk % t.threads == 0


@pytest.mark.parametrize("config", tc.DEEP_CONFIGS)
def test_deep_tiles_are_64x64_warp_tiles_whose_vectors_split_evenly(config: str) -> None:
    t = tc.parse_config(config).tile
    assert (t.bm // t.wm, t.bn // t.wn) == (64, 64)
    cfg = tc.parse_config(config)
    vec = tc.vector_elements("float16" if cfg.bk == tc.BK32_STEP else "float32")
    for rows in (t.bm, t.bn):  # A and B tiles: whole 16-byte vectors per thread
        assert rows * cfg.bk % (vec * t.threads) == 0


def test_launch_grid_covers_pixels_groups_and_channel_tiles() -> None:
    problem = ConvProblem(n=3, c=8, h=10, w=10, k=200, r=3, s=3, pad=1, groups=2)
    assert tc.launch_grid(problem, "64x128") == (3, 2 * 2, 1)  # 300 pixels, kg=100 -> 2 tiles
    assert tc.launch_grid(problem, "64x128" + tc.NHWC) == (3, 2 * 2, 1)
    assert tc.launch_grid(problem, "64x128-k2") == (3, 2 * 2, 2)  # K = 4*9: 3 K-steps, 2+1


def test_kernel_source_uses_the_documented_instructions() -> None:
    text = (KERNELS_DIR / tc.KERNEL_FILE).read_text() + (KERNELS_DIR / "common.cuh").read_text()
    for instruction in ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
                        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                        "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                        "cp.async.ca.shared.global", "cvt.rna.tf32.f32"):
        assert instruction in text
    assert re.search(r"NCHW", tc.__doc__ or "")


@pytest.mark.parametrize(("dtype", "math"), [
    ("float32", "tf32"), ("float32", "fp32"), ("float16", "fp32"), ("bfloat16", "fp32"),
])
def test_nchw_deep_tiles_are_offered_where_b_is_vector_filled(dtype: str, math: str) -> None:
    # A 1x1 stride-1 layer with P*Q a whole number of vectors in every dtype (16 x 16):
    # vector B, so no NHWC; the NCHW "-sS" tiles instead (not at 3xTF32: they spill).
    vec = tc.vector_elements(dtype)
    problem = make_problem(n=32, c=256, h=16, w=16, k=256, r=1, s=1, dtype=dtype, math=math)
    assert tc.vector_widths(problem) == (vec, vec) and not tc.nhwc_allowed(problem)
    configs = ALG.configs(problem)
    deep = tc.deep_configs(dtype, math, nhwc=False)
    assert len(deep) == (0 if tc.passes(dtype, math) == 3 else 3)
    assert set(deep) <= set(configs) and not any(tc.NHWC in c for c in configs)
    for config in deep:
        assert tc.smem_bytes(dtype, config) <= tc.DEEP_SMEM_LIMIT
        assert ALG.workspace_bytes(problem, config) == 0
    # Strided, or 3x3: B is gathered element-wise and these tiles are not offered.
    for other in (dict(r=1, s=1, stride=2), dict(r=3, s=3, pad=1)):
        configs = ALG.configs(make_problem(n=32, c=256, h=16, w=16, k=256, dtype=dtype,
                                           math=math, **other))
        assert not any(re.fullmatch(r"\d+x\d+-s\d(-k\d)?", c) for c in configs)


def test_nchw_deep_tiles_fall_back_to_128x128_for_a_misaligned_operand() -> None:
    # Shipped with vector A and B only: a caller's misaligned x (B element-wise) or w (both)
    # runs 128x128 with the same split, whose workspace is the same.
    problem = make_problem(n=8, c=256, h=8, w=8, k=256, r=1, s=1, math="tf32")
    assert tc.run_config(problem, "256x128-s3", (4, 4)) == "256x128-s3"
    assert tc.run_config(problem, "256x128-s3", (4, 1)) == "128x128"
    assert tc.run_config(problem, "128x256-s3-k4", (1, 1)) == "128x128-k4"
    assert (ALG.workspace_bytes(problem, "128x256-s3-k4")
            == tc.workspace_layout(problem, "128x128-k4").nbytes > 0)
    assert tc.run_config(problem, "64x64", (1, 1)) == "64x64"
