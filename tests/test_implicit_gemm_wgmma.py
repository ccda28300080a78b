"""implicit_gemm_wgmma's host side without a GPU: configurations per dtype and math, their
names, shared memory, workspace, split K and the NHWC copies' TF32 parts.

The kernel itself is compiled spill-free for sm_90a by tests/test_kernels_compile.py and run
under the emulator by tests/test_cuda_emulated.py.
"""

from __future__ import annotations

from math import prod
from pathlib import Path
from typing import Any

import pytest

from algorithms.cuda import _rearrange, _wgmma_nchw
from algorithms.cuda import _wgmma_configs as wc
from algorithms.cuda import implicit_gemm_wgmma as wg
from algorithms.cuda._base import gemm_grid
from algorithms.cuda.implicit_gemm_tc import SPLIT_TARGET_BLOCKS, k_steps
from tests.precision import make_problem

ALG = wg.ImplicitGemmWgmmaCuda()
#: (dtype, math) -> operand copies: 16-bit, TF32, 3xTF32.
MODES = {("float16", "fp32"): 1, ("bfloat16", "fp32"): 1, ("float32", "tf32"): 1,
         ("float32", "fp32"): 2}
#: Hopper's opt-in limit of dynamic shared memory per block.
HOPPER_SMEM = 227 * 1024
#: ResNet-50's res5 3x3 at batch 32 (13 pixel tiles: a grid below one wave) and res2 3x3
#: (784 pixel tiles).
RES5: dict[str, Any] = dict(n=32, c=512, h=7, w=7, k=512, r=3, s=3, pad=1)
RES2: dict[str, Any] = dict(n=32, c=64, h=56, w=56, k=64, r=3, s=3, pad=1)


@pytest.mark.parametrize(("dtype", "math"), list(MODES))
def test_every_offered_config_parses_and_fits_hopper(dtype: str, math: str) -> None:
    problem = make_problem(**RES5, dtype=dtype, math=math)
    configs = ALG.configs(problem)
    assert configs and len(set(configs)) == len(configs)
    for config in configs:
        cfg = wc.parse_config(dtype, math, config)
        assert cfg.tile.smem_bytes(MODES[dtype, math]) <= HOPPER_SMEM
        if isinstance(cfg.tile, _wgmma_nchw.NchwTile):  # with taps: x element by element
            assert _wgmma_nchw.name_expression(cfg.tile, math, 1, True) in (
                _wgmma_nchw.shipped_kernels())
        else:
            assert wc.name_expression(dtype, config, math) in wc.shipped_kernels()


def test_each_mode_has_its_own_k_step_and_tiles() -> None:
    assert wc.k_step("float16") == 64 and wc.k_step("float32") == 32
    assert set(wc.tiles("float16", "fp32")) == {
        "64x128x64-s4", "128x128x64-s4", "256x128x64-s3",
        "64x128x64-s6-f1", "128x128x64-s5-f1", "256x128x64-s4-f1",
        "64x128x64-s6-ws", "128x128x64-s4-ws", "128x128x64-s5-ws"}
    assert {t.replace("x32", "x64") for t in wc.tiles("float32", "tf32")} == set(
        wc.tiles("float16", "fp32"))
    # 3xTF32: two copies per stage, in flight at the same stages, no 256-row tile; 3xFP16 the
    # same tiles in 16-bit K-steps.
    three_tf32 = {"64x128x32-s4", "128x128x32-s3", "64x128x32-s4-f1", "128x128x32-s3-f1",
                  "64x128x32-s4-ws", "128x128x32-s3-ws"}
    assert set(wc.tiles("float32", "fp32")) == three_tf32 | {
        t.replace("x32", "x64") + "-3xfp16" for t in three_tf32}


@pytest.mark.parametrize(("dtype", "math"), list(MODES))
def test_warp_specialized_tiles_add_producers_and_their_mbarriers(dtype: str, math: str) -> None:
    # "-ws": producers besides the BM / 64 warpgroups (a warpgroup, two warps at 3xTF32), two
    # 8-byte mbarriers per stage after the stages, at least three stages (the producers keep
    # STAGES - 2 K-steps of copies in flight after the one they issue), and their own kernel.
    copies = MODES[dtype, math]
    for name, tile in wc.tiles(dtype, math).items():
        if "-ws" not in name:
            assert tile.producers == 0 and tile.threads == tile.bm // 64 * 128
            continue
        assert tile.producers == {1: 128, 2: 64}[copies] and tile.in_flight == 1
        assert tile.threads == tile.bm // 64 * 128 + tile.producers and tile.stages >= 3
        stages = copies * tile.stages * (tile.bm + 128) * 128
        assert tile.smem_bytes(copies) == stages + 16 * tile.stages <= HOPPER_SMEM
        assert wc.name_expression(dtype, name, math) == (
            f"implicit_gemm_wgmma_ws<{wc.CTYPES[tile.operands(dtype)]}, {tile.bm}, "
            f"{tile.stages}, {copies}, {tile.producers}>")


@pytest.mark.parametrize(("dtype", "math", "config"), [
    ("float32", "fp32", "64x128x64-s4"),       # a 16-bit K-step for float32
    ("float16", "fp32", "64x128x32-s4"),       # a float32 K-step for float16
    ("float32", "fp32", "128x128x32-s5-f1"),   # more stages than 3xTF32's fit
    ("float16", "fp32", "64x128x64-s4-k1"),    # a split of one
    ("float16", "fp32", "64x128x64-s4-kx"),
    ("float16", "fp32", "64x128x64"),
    ("float16", "fp32", "128x128x64-s4-ws-k2"),  # the warp-specialized kernel splits no K
    ("float32", "tf32", "64x128x64-s4-3xfp16"),  # float16 parts only for math "fp32"
    ("float16", "fp32", "64x128x64-s4-3xfp16"),
    ("float32", "fp32", "64x128x64-s4-3xbf16"),  # withdrawn before any GPU ran it
])
def test_unknown_configs_are_refused(dtype: str, math: str, config: str) -> None:
    with pytest.raises(ValueError, match="implicit_gemm_wgmma: unknown config"):
        wc.parse_config(dtype, math, config)


@pytest.mark.parametrize(("dtype", "math"), list(MODES))
def test_k_is_split_only_where_the_grid_is_below_one_wave(dtype: str, math: str) -> None:
    small, large = (make_problem(**kw, dtype=dtype, math=math) for kw in (RES5, RES2))
    assert not [c for c in ALG.configs(large) if "-k" in c]
    split = [c for c in ALG.configs(small) if "-k" in c]
    nchw = {t for t in _wgmma_nchw.TAP_TILES[_wgmma_nchw.copies(math)]
            if not t.startswith("96x")} if dtype == "float32" else set()  # K = 512
    assert {c.partition("-k")[0] for c in split} == {
        t for t in wc.tiles(dtype, math) if "-ws" not in t} | nchw
    for config in split:
        cfg = wc.parse_config(dtype, math, config)
        grid, kper = wg.launch(small, config)
        blocks = prod(gemm_grid(small, cfg.tile.bm, cfg.tile.bn))
        assert blocks < SPLIT_TARGET_BLOCKS and grid[:2] == gemm_grid(small, cfg.tile.bm,
                                                                       cfg.tile.bn)[:2]
        steps = k_steps(small, wc.tile_k_step(dtype, cfg.tile))
        # Every K-step in exactly one launched split, none empty.
        assert grid[2] == cfg.splits and (grid[2] - 1) * kper < steps <= grid[2] * kper
        # The split K summed in the kernel; 3xFP16 works out the operands' maxima first, an
        # NCHW tile transposes w alone.
        assert ALG.work(small, config).launches == (
            4 if "3xfp16" in config else 2 if cfg.nchw else 3)


@pytest.mark.parametrize(("dtype", "math"), list(MODES))
def test_workspace_is_the_nhwc_copies_and_the_partial_sums(dtype: str, math: str) -> None:
    problem = make_problem(**RES5, dtype=dtype, math=math)
    copies = MODES[dtype, math]
    elements = prod(problem.input_shape) + prod(problem.filter_shape)
    for config in ALG.configs(problem):
        cfg = wc.parse_config(dtype, math, config)
        if cfg.nchw:  # w's copy alone (test_nchw_configs_run_filters_with_taps_...)
            continue
        # 16-bit parts take 2 bytes each; 3xFP16's copies each end in a scale tail.
        parts = getattr(cfg.tile, "parts", "")
        operands = elements * (2 if parts else problem.itemsize)
        tails = 2 * 2 * _rearrange.SCALE_TAIL if parts == "float16" else 0
        partials = cfg.splits * prod(problem.output_shape) * 4 if cfg.splits > 1 else 0
        # Each buffer is padded to an alignment boundary: at most 256 bytes each.
        assert 0 <= (ALG.workspace_bytes(problem, config) - copies * operands - tails
                     - partials) < 3 * 256


def test_nhwc_copies_round_to_tf32_for_float32_only() -> None:
    one_role = wc.WgmmaTile(64, 4)
    parts = {mode: wg.nhwc_parts(make_problem(**RES2, dtype=mode[0], math=mode[1]), one_role)
             for mode in MODES}
    assert parts == {("float16", "fp32"): 0, ("bfloat16", "fp32"): 0, ("float32", "tf32"): 1,
                     ("float32", "fp32"): 2}
    assert _rearrange.name_expression("transpose", 4, 2) == "transpose<float, 2>"
    assert _rearrange.name_expression("transpose", 4) == "transpose<unsigned int, 0>"


def test_3xfp16_runs_float32_on_the_16_bit_kernels() -> None:
    tag, ctype, parts = "3xfp16", "half_t", 3
    problem = make_problem(**RES2, dtype="float32", math="fp32")
    found = [c for c in ALG.configs(problem) if tag in c]
    assert {c.partition("-k")[0] for c in found} == {
        f"64x128x64-s4-{tag}", f"128x128x64-s3-{tag}", f"64x128x64-s4-f1-{tag}",
        f"128x128x64-s3-f1-{tag}", f"64x128x64-s4-ws-{tag}", f"128x128x64-s3-ws-{tag}"}
    for config in found:
        tile = wc.parse_config("float32", "fp32", config).tile
        assert isinstance(tile, wc.WgmmaTile) and wg.nhwc_parts(problem, tile) == parts
        assert wc.tile_k_step("float32", tile) == 64  # 16-bit K-steps
        kernel = "implicit_gemm_wgmma_ws" if tile.producers else "implicit_gemm_wgmma_conv"
        assert wc.name_expression("float32", config).startswith(
            f"{kernel}<{ctype}, {tile.bm}, {tile.stages}, 2, ")
        assert tile.smem_bytes(2) <= HOPPER_SMEM
    # The copies split float32 into 16-bit parts (the gathered one of a strided 1x1 layer
    # too); 3xFP16 works out the operands' maxima first, into the tails after their copies.
    copies = _rearrange.nhwc_copies(problem, parts)
    assert (copies.x_launch.name, copies.w_launch.name) == (f"transpose<float, {parts}>",) * 2
    strided = make_problem(**{**RES5_PW, "h": 14, "w": 14, "stride": 2}, dtype="float32")
    assert _rearrange.nhwc_copies(strided, parts).x_launch.name == (
        f"transpose<float, {parts}, true>")
    assert copies.scale is not None and copies.scale.name == "absmax_parts"
    x_items = 2 * prod(problem.input_shape)  # the two float16 copies of x, then its tail
    assert copies.tails == (copies.x_bytes.start + 2 * x_items,
                            copies.w_bytes.start + 2 * 2 * prod(problem.filter_shape))
    assert copies.x_bytes.stop == copies.tails[0] + 2 * _rearrange.SCALE_TAIL
    assert _rearrange.nhwc_copies(problem, 2).scale is None  # 3xTF32: nothing to scale


@pytest.mark.parametrize(("why", "shape", "dtype", "math"), [
    ("C/groups whole 8-channel vectors", dict(n=8, c=24, h=16, w=16, k=64, r=3, s=3, pad=1,
                                              groups=2), "float32", "fp32"),
    ("no padded channels", dict(n=8, c=3, h=32, w=32, k=64, r=3, s=3, pad=1), "float32",
     "fp32"),
    ("math fp32", RES2, "float32", "tf32"),
    ("float32", RES2, "float16", "fp32"),
])
def test_16_bit_parts_are_offered_only_where_they_fit(why: str, shape: dict[str, Any],
                                                      dtype: str, math: str) -> None:
    problem = make_problem(**shape, dtype=dtype, math=math)
    assert ALG.supports(problem), why
    assert not [c for c in ALG.configs(problem) if "-3x" in c], why



def test_channels_must_be_whole_16_byte_vectors_per_group() -> None:
    # float32 vectors hold 4 channels, 16-bit ones 8: C/groups = 12 suits only float32.
    shape: dict[str, Any] = dict(n=1, c=24, h=6, w=6, k=8, r=3, s=3, pad=1, groups=2)
    assert ALG.supports(make_problem(**shape, dtype="float32"))
    refused = ALG.supports(make_problem(**shape, dtype="float16"))
    assert not refused and "multiple of 8 for float16" in str(refused.reason)


@pytest.mark.parametrize(("dtype", "math"), list(MODES))
def test_one_groups_channels_are_padded_to_whole_vectors(dtype: str, math: str) -> None:
    # A first layer (C = 3): the NHWC copies hold 4 (float32) or 8 (16-bit) channels, the
    # extra ones zeros, and the GEMM runs over them: K-steps, splits and workspace follow.
    problem = make_problem(n=2, c=3, h=224, w=224, k=64, r=7, s=7, pad=3, stride=2,
                           dtype=dtype, math=math)
    assert ALG.supports(problem) and _rearrange.padded(problem)
    channels = 16 // problem.itemsize
    gemm = _rearrange.nhwc_problem(problem)
    assert (gemm.c, gemm.k, gemm.out_hw) == (channels, 64, problem.out_hw)
    copies = MODES[dtype, math]
    operands = (prod(gemm.input_shape) + prod(gemm.filter_shape)) * problem.itemsize
    for config in ALG.configs(problem):
        cfg = wc.parse_config(dtype, math, config)
        grid, kper = wg.launch(problem, config)
        steps = k_steps(gemm, wc.k_step(dtype))  # 49 taps of the padded channels
        assert steps == -(-49 * channels // wc.k_step(dtype))
        assert (grid[2] - 1) * kper < steps <= grid[2] * kper
        partials = cfg.splits * prod(problem.output_shape) * 4 if cfg.splits > 1 else 0
        assert 0 <= ALG.workspace_bytes(problem, config) - copies * operands - partials < 768


#: ResNet-50's res4.1x1a.rest at batch 32 (a pointwise layer, P*Q = 196) and res5.1x1b
#: (P*Q = 49: element-wise copies of x).
RES4_PW: dict[str, Any] = dict(n=32, c=1024, h=14, w=14, k=256, r=1, s=1)
RES5_PW: dict[str, Any] = dict(n=32, c=512, h=7, w=7, k=2048, r=1, s=1)


@pytest.mark.parametrize("math", ["fp32", "tf32"])
def test_nchw_configs_run_pointwise_float32_layers_from_x_and_w_as_they_are(math: str) -> None:
    problem = make_problem(**RES4_PW, dtype="float32", math=math)
    nchw = [c for c in ALG.configs(problem) if _wgmma_nchw.SUFFIX in c]
    # Every tile but the 96-row one (K = 256: _wgmma_nchw.fits_96).
    assert {c for c in nchw if "-k" not in c} == {
        t for t in _wgmma_nchw.tiles(math) if not t.startswith("96x")}
    copies = _wgmma_nchw.copies(math)
    for config in nchw:
        cfg = wc.parse_config("float32", math, config)
        assert isinstance(cfg.tile, _wgmma_nchw.NchwTile) and cfg.nchw
        assert cfg.tile.smem_bytes(copies) <= HOPPER_SMEM
        # One launch, and the workspace is the aligned copy of w (K x C) and any partial sums.
        assert ALG.work(problem, config).launches == 1
        splits = cfg.splits
        partials = splits * prod(problem.output_shape) * 4 if splits > 1 else 0
        w_copy = prod(problem.filter_shape) * 4
        assert 0 <= ALG.workspace_bytes(problem, config) - w_copy - partials < 2 * 256
        for vec in _wgmma_nchw.VECTORS:
            assert _wgmma_nchw.name_expression(cfg.tile, math, vec) in (
                _wgmma_nchw.shipped_kernels())
    # 1xTF32 leaves a group in flight; 3xTF32 ships each tile both ways (its partial sums
    # added every K-step, or every FLUSH_STEPS with a group in flight).
    assert {t.in_flight for t in _wgmma_nchw.tiles(math).values()} == (
        {1} if math == "tf32" else {0, 1})


@pytest.mark.parametrize("math", ["fp32", "tf32"])
def test_96_row_nchw_tiles_where_they_cover_k_with_fewest_rows(math: str) -> None:
    """A 96-row tile where it covers K with fewer rows than 128- and 64-row ones (K = 96:
    GoogLeNet's inception3b.5x5, with taps, and 1x1; K = 288), nowhere else (K = 64, 128,
    160: as many rows in 64-row tiles; 256)."""
    assert [k for k in range(1, 600) if _wgmma_nchw.fits_96(k)] == [
        *range(65, 97), *range(257, 289), *range(449, 481)]
    ninety_six = {t for t in _wgmma_nchw.tiles(math) if t.startswith("96x")}
    assert len(ninety_six) == 1 and ninety_six <= set(_wgmma_nchw.TAP_TILES[
        _wgmma_nchw.copies(math)])
    for shape, offered in ((dict(n=32, c=32, h=28, w=28, k=96, r=5, s=5, pad=2), True),
                           (dict(RES4_PW, k=96), True), (dict(RES4_PW, k=288), True),
                           (dict(RES4_PW, k=160), False), (dict(RES4_PW, k=64), False),
                           (dict(RES4_PW, k=128), False)):
        problem = make_problem(**shape, dtype="float32", math=math)
        configs = {c.partition("-k")[0] for c in ALG.configs(problem)}
        assert (ninety_six <= configs) == offered, shape
        for config in ALG.configs(problem):
            cfg = wc.parse_config("float32", math, config)
            if cfg.tile.bm == 96:  # one row of tiles per 96 channels
                assert wg.launch(problem, config)[0][1] == -(-problem.k // 96)
                assert cfg.tile.smem_bytes(_wgmma_nchw.copies(math)) <= HOPPER_SMEM


#: VGG-16's conv3_2 at batch 16: a 3x3 layer.
VGG_3X3: dict[str, Any] = dict(n=16, c=256, h=56, w=56, k=256, r=3, s=3, pad=1)


@pytest.mark.parametrize("math", ["fp32", "tf32"])
def test_nchw_configs_run_filters_with_taps_after_one_transpose_of_w(math: str) -> None:
    for shape in (VGG_3X3, dict(VGG_3X3, c=36, r=5, s=5, pad=2),
                  dict(VGG_3X3, stride=2, dilation=(2, 1), pad=(0, 3))):
        problem = make_problem(**shape, dtype="float32", math=math)
        nchw = [c for c in ALG.configs(problem) if _wgmma_nchw.SUFFIX in c]
        # The large tiles only (not the 96-row one at K = 256), each with the kernel's TAPS
        # instance.
        assert {c for c in nchw if "-k" not in c} == {
            t for t in _wgmma_nchw.TAP_TILES[_wgmma_nchw.copies(math)] if not t.startswith("96x")}
        for config in nchw:
            cfg = wc.parse_config("float32", math, config)
            assert isinstance(cfg.tile, _wgmma_nchw.NchwTile)
            assert _wgmma_nchw.name_expression(cfg.tile, math, 1, True) in (
                _wgmma_nchw.shipped_kernels())
            # w's transpose, then the GEMM; the workspace is w's copy (K, R*S, C: its big and
            # small parts at 3xTF32) and any partial sums.
            assert ALG.work(problem, config).launches == 2
            partials = cfg.splits * prod(problem.output_shape) * 4 if cfg.splits > 1 else 0
            w_copy = prod(problem.filter_shape) * 4 * _wgmma_nchw.copies(math)
            assert 0 <= ALG.workspace_bytes(problem, config) - w_copy - partials < 2 * 256
    # K-steps of whole taps: C = 36 takes two a tap (the second holds 4 channels).
    five = make_problem(**dict(VGG_3X3, c=36, r=5, s=5, pad=2), dtype="float32", math=math)
    name = _wgmma_nchw.TAP_TILES[_wgmma_nchw.copies(math)][0]
    assert wg.launch(five, name)[1] == 25 * 2


@pytest.mark.parametrize("shape", [
    dict(RES4_PW, groups=2),                       # grouped
    dict(VGG_3X3, groups=2),                       # grouped, with taps
    dict(RES4_PW, c=1022, k=254),                  # C not whole 16-byte W vectors
    dict(VGG_3X3, c=254),                          # the same with taps
])
def test_nchw_configs_are_offered_on_float32_layers_with_one_group(
        shape: dict[str, Any]) -> None:
    for pointwise in (RES4_PW, dict(RES4_PW, stride=2), dict(RES4_PW, pad=1, stride=(2, 1))):
        problem = make_problem(**pointwise, dtype="float32")
        assert _wgmma_nchw.offered(problem) == {  # K = 256: not the 96-row tile
            t for t in _wgmma_nchw.tiles("fp32") if not t.startswith("96x")}
    for dtype in ("float32", "float16"):
        problem = make_problem(**shape, dtype=dtype)
        assert not [c for c in ALG.configs(problem) if _wgmma_nchw.SUFFIX in c]
    assert not [c for c in ALG.configs(make_problem(**RES4_PW, dtype="float16"))
                if _wgmma_nchw.SUFFIX in c]
    with pytest.raises(ValueError, match="unknown config"):
        wc.parse_config("float16", "fp32", "128x128x32-s3-nchw")


def test_nchw_x_copies_are_vectors_where_pixels_and_the_address_allow() -> None:
    res4, res5 = (make_problem(**kw, dtype="float32") for kw in (RES4_PW, RES5_PW))
    assert _wgmma_nchw.x_vector(res4, 4096) == 4
    assert _wgmma_nchw.x_vector(res4, 4096 + 4) == 1   # a caller's sliced buffer
    assert _wgmma_nchw.x_vector(res5, 4096) == 1       # P*Q = 49: a vector would cross images
    for strided in (dict(RES4_PW, stride=2), dict(RES4_PW, pad=1)):  # input pixels apart
        assert _wgmma_nchw.x_vector(make_problem(**strided, dtype="float32"), 4096) == 1


def test_the_scale_tail_is_sized_as_the_kernels_fill_it() -> None:
    # absmax_parts writes SCALE_BLOCKS maxima per operand after its scale: the host's count
    # (the tail it reserves, the blocks it launches) is the kernel file's.
    source = (Path(__file__).resolve().parents[1] / "kernels" / "rearrange.cu").read_text()
    assert f"constexpr int SCALE_BLOCKS = {_rearrange.SCALE_BLOCKS};" in source
    assert _rearrange.SCALE_TAIL == 2 * (1 + _rearrange.SCALE_BLOCKS)  # floats as float16s
    problem = make_problem(**RES2, dtype="float32", math="fp32")
    scale = _rearrange.nhwc_copies(problem, 3).scale
    assert scale is not None and scale.grid == (2 * _rearrange.SCALE_BLOCKS,)
