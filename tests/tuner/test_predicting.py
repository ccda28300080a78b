"""Fast mode's choice of what to measure from a ranking (tuner.predicting), and the
configuration fields the cost model reads (tuner.features): pure functions, no store."""

from __future__ import annotations

import numpy as np

from tuner.features import CONFIG_COLUMNS, config_numbers
from tuner.predicting import band_picks, contenders, family, fast_picks, round_two


def test_fast_picks_hedge_across_the_first_k_algorithms() -> None:
    ranked = [("a", "1"), ("a", "2"), ("a", "3"), ("b", "1"), ("c", "1"), ("b", "2"),
              ("d", "1")]
    assert fast_picks(ranked, 2) == [("a", "1"), ("a", "2"), ("b", "1")]
    assert fast_picks(ranked, 3) == [("a", "1"), ("a", "2"), ("a", "3"), ("b", "1"),
                                     ("c", "1")]
    assert fast_picks(ranked, 9) == ranked
    assert fast_picks([], 4) == []


def test_fast_picks_hedge_across_layouts_of_one_algorithm() -> None:
    # Regression (H100 data of 2026-11-25): on ResNet-50's float16 1x1 layers the model
    # ranked implicit_gemm_tc's NHWC tiles first, so the hedge's "first of the algorithm"
    # was NHWC too and the NCHW tile that won by up to 1.77x was never measured.
    ranked = [("tc", "128x128x32-nhwc"), ("tc", "64x128x32-nhwc"), ("im2col", "chunk=all"),
              ("tc", "128x64"), ("direct", "8x8k16")]
    # Families in rank order: tc NHWC, im2col, tc NCHW, direct.
    assert fast_picks(ranked, 3) == ranked[:4]
    assert fast_picks(ranked, 4) == ranked


def test_fast_picks_measure_every_layout_of_the_algorithms_they_chose() -> None:
    # Regression (H200 data of 2026-11-26, seventeenth session): on ResNet-50's c2048 7x7
    # 1x1 layers the model ranked im2col_gemm's merged family fifth, so fast mode measured
    # only the unmerged chunk=all of im2col_gemm and missed the merged one by up to 67%.
    ranked = [("tc", "64x64"), ("tc", "128x64"), ("im2col_gemm", "chunk=all"),
              ("wgmma", "128x128"), ("tc", "64x64-nhwc"), ("direct", "8x8k16"),
              ("im2col_gemm", "chunk=all-merged"), ("winograd", "f4x4"),
              ("im2col_gemm", "chunk=4-merged")]
    assert fast_picks(ranked, 3) == [*ranked[:4], ("tc", "64x64-nhwc"),
                                     ("im2col_gemm", "chunk=all-merged")]
    # Winograd's tiles are families, so its other tile comes along too once it is chosen.
    assert fast_picks([("winograd", "f4x4"), ("tc", "64x64"), ("winograd", "f2x2")], 1) == [
        ("winograd", "f4x4"), ("winograd", "f2x2")]


def test_band_picks_keep_the_winners_family_close_to_its_best() -> None:
    predicted = {("tc", "64x64"): 1.0, ("tc", "128x128"): 1.25, ("tc", "128x64"): 1.4,
                 ("tc", "64x64-nhwc"): 0.9, ("im2col", "chunk=all"): 1.1}
    # The family is the algorithm in one layout: NHWC tiles and other algorithms stay out.
    assert band_picks(predicted, ("tc", "128x128")) == [("tc", "64x64"), ("tc", "128x128")]
    assert band_picks(predicted, ("tc", "64x64"), band=1.5) == [
        ("tc", "64x64"), ("tc", "128x128"), ("tc", "128x64")]
    assert band_picks(predicted, ("tc", "64x64-nhwc")) == [("tc", "64x64-nhwc")]
    assert band_picks(predicted, ("direct", "8x8k16")) == []


def test_merged_configurations_are_a_family_of_their_own() -> None:
    # Regression: with "chunk=all-merged" in im2col_gemm's NCHW family, fast mode measured
    # the unmerged "chunk=all" as that family's best and never the merged one, 1.3-3.7x
    # faster on ResNet-50's late 1x1 layers (H200, 2026-11-26).
    assert family(("im2col_gemm", "chunk=all-merged")) != family(("im2col_gemm", "chunk=all"))
    assert family(("im2col_gemm", "chunk=4")) == family(("im2col_gemm", "chunk=all"))
    ranked = [("tc", "64x64"), ("im2col_gemm", "chunk=all"), ("tc", "128x64"),
              ("im2col_gemm", "chunk=all-merged"), ("direct", "8x8k16")]
    assert ("im2col_gemm", "chunk=all-merged") in fast_picks(ranked, 3)
    predicted = {("im2col_gemm", "chunk=all"): 1.0, ("im2col_gemm", "chunk=all-merged"): 1.05}
    assert band_picks(predicted, ("im2col_gemm", "chunk=all")) == [("im2col_gemm", "chunk=all")]


def test_second_round_covers_every_family_close_to_the_winner() -> None:
    measured = {("tc", "64x64"): 1.0, ("tc", "128x64"): 1.3, ("wgmma", "128x128"): 1.08,
                ("im2col_gemm", "chunk=all"): 1.5, ("tc", "64x64-nhwc"): 1.12}
    assert contenders(measured, 1.0) == [("tc", "64x64")]
    assert contenders(measured, 1.1) == [("tc", "64x64"), ("wgmma", "128x128")]
    assert contenders(measured, 1.2) == [("tc", "64x64"), ("wgmma", "128x128"),
                                         ("tc", "64x64-nhwc")]
    assert contenders({}, 1.2) == []
    predicted = {("tc", "64x64"): 1.0, ("tc", "32x128"): 1.1, ("tc", "128x64"): 1.2,
                 ("wgmma", "128x128"): 1.0, ("wgmma", "64x128"): 1.2,
                 ("wgmma", "256x128"): 2.0, ("im2col_gemm", "chunk=4"): 1.0}
    # Each contender's family within FAMILY_BAND of its predicted best, unmeasured, once.
    assert round_two(predicted, measured, runner_up=1.0) == [("tc", "32x128")]
    assert round_two(predicted, measured, runner_up=1.1) == [("tc", "32x128"),
                                                             ("wgmma", "64x128")]


def test_config_numbers_are_read_by_field() -> None:
    no = -1.0
    columns = dict(zip(CONFIG_COLUMNS, config_numbers("256x128x32-nhwc-s3-k2"), strict=True))
    assert columns == {"tile0": 256.0, "tile1": 128.0, "tile2": 32.0, "stages": 3.0,
                       "split": 2.0, "in_flight": no, "nhwc": 1.0, "ws": 0.0, "number0": no,
                       "number1": no}
    # Regression: read positionally, "128x128-nhwc-s4" (TF32) had its stage count where
    # "128x128x32-nhwc" (16-bit) has its K-step, and NHWC tiles read like NCHW ones.
    assert config_numbers("128x128-nhwc-s4")[2:4] == (no, 4.0)
    assert config_numbers("128x128")[6] == 0.0
    assert config_numbers("64x128x64-s6-f1-k2")[3:6] == (6.0, 2.0, 1.0)
    assert config_numbers("16x16k8")[:3] + config_numbers("16x16k8")[8:] == (16.0, 16.0, no,
                                                                             8.0, no)
    assert config_numbers("chunk=all")[8] > config_numbers("chunk=16")[8]
    assert config_numbers("default") == (no,) * 6 + (0.0, 0.0, no, no)
    # A warp-specialized tile reads apart from its one-role twin of as many stages.
    assert config_numbers("128x128x32-s3-ws")[7] == 1.0
    assert config_numbers("128x128x32-s3-ws")[:7] == config_numbers("128x128x32-s3")[:7]


def test_winograd_tiles_are_families_of_their_own() -> None:
    # Regression: with F(2x2) and F(4x4) in one family, fast mode measured the F(4x4) the
    # model put first and never F(2x2), 15-77% faster on VGG-16's TF32 3x3 layers (H100
    # 2026-11-27, H200 2026-11-26).
    assert family(("winograd", "f2x2")) != family(("winograd", "f4x4"))
    ranked = [("wgmma", "128x128"), ("wgmma", "256x128"), ("winograd", "f4x4"),
              ("winograd", "f2x2"), ("tc", "64x64"), ("im2col_gemm", "chunk=all")]
    assert ("winograd", "f2x2") in fast_picks(ranked, 3)  # one family each, not one for both
    predicted = {("winograd", "f4x4"): 1.0, ("winograd", "f2x2"): 1.05}
    assert band_picks(predicted, ("winograd", "f4x4")) == [("winograd", "f4x4")]


# Mutation gap: only NHWC, merged and Winograd's tiles were shown to be families apart;
# implicit_gemm_wgmma's "nchw" tiles and fft's two configurations (LAYOUTS and
# EACH_CONFIG_APART say so) could have joined their algorithm's family unseen.
def test_nchw_tiles_and_fft_configurations_are_families_of_their_own() -> None:
    wgmma = "implicit_gemm_wgmma"
    assert family((wgmma, "128x64x32-nchw")) != family((wgmma, "128x64x32"))
    assert family((wgmma, "128x64x32-nchw")) != family((wgmma, "128x64x32-nhwc"))
    assert family(("fft", "default")) != family(("fft", "fused"))
    ranked = [(wgmma, "128x64x32"), ("fft", "fused"), (wgmma, "64x64x32"),
              ("fft", "default"), (wgmma, "128x64x32-nchw")]
    assert fast_picks(ranked, 1) == [(wgmma, "128x64x32"), (wgmma, "128x64x32-nchw")]
    assert fast_picks(ranked, 2) == [(wgmma, "128x64x32"), ("fft", "fused"),
                                     ("fft", "default"), (wgmma, "128x64x32-nchw")]


# Mutation gap: the band and the runner-up rule were checked off their edges and with the
# runner-up factor given: "within 1.3x" losing its edge, or RUNNER_UP (1.3) moved, unseen.
def test_within_the_band_and_the_runner_up_factor_includes_their_edges() -> None:
    predicted = {("tc", "64x64"): 2.0, ("tc", "128x64"): 2.6, ("tc", "128x128"): 2.61}
    assert band_picks(predicted, ("tc", "128x64")) == [("tc", "64x64"), ("tc", "128x64")]
    measured = {("tc", "64x64"): 2.0, ("wgmma", "128x128"): 2.5, ("im2col", "chunk=all"): 2.6,
                ("direct", "8x8k16"): 2.7}
    assert contenders(measured) == [("tc", "64x64"), ("wgmma", "128x128"),
                                    ("im2col", "chunk=all")]


# Mutation gap: every configuration with a layout word in tests ended with it ("-nhwc",
# "-merged"); real tiles carry more after it ("128x128x32-nhwc-s3", "64x64-nhwc-k2"), and a
# family read from the name's end only put them with their algorithm's NCHW tiles unseen.
def test_a_layout_word_inside_a_config_name_makes_its_family() -> None:
    tc = "implicit_gemm_tc"
    assert family((tc, "128x128x32-nhwc-s3")) == family((tc, "64x64-nhwc")) == (tc, "nhwc")
    assert family((tc, "128x128x32-nhwc-s3")) != family((tc, "128x128x32-s3"))
    assert family(("implicit_gemm_wgmma", "128x64x32-nchw-s4-f1")) == (
        "implicit_gemm_wgmma", "nchw")
    assert family(("im2col_gemm", "chunk=4-merged-x2")) == ("im2col_gemm", "merged")


# Mutation gap: the second round's contenders were shown to be chosen from usable rows only
# through fast finds whose failures carried no time: a measured row with a time but a wrong
# result (or a failure that kept its time) could win the first round unseen, and its family
# be measured again.
def test_a_wrong_result_with_a_time_is_no_contender() -> None:
    from tests.tuner.fakes import Fake
    from tuner import results as R
    from tuner.candidates import Candidate
    from tuner.predicting import second_round
    from tuner.results import AlgorithmResult

    rng = np.random.default_rng()
    fastest = float(rng.uniform(0.5, 2.0))
    keys = [("a", "1"), ("a", "2"), ("b", "1"), ("b", "2")]
    allowed = [Candidate(Fake(a), c, 0, Fake.impl_hash) for a, c in keys]  # type: ignore[arg-type]

    def result(key: tuple[str, str], status: str, time_ms: float) -> AlgorithmResult:
        return AlgorithmResult(key[0], key[1], status, time_ms, 0, source=R.FRESH)

    # "a 1" ran fastest but gave a wrong result; "b 1", the usable winner, and "b 2",
    # predicted close to it, make the round; "a 2" (the wrong one's family) does not.
    measured = {("a", "1"): result(("a", "1"), R.WRONG_RESULT, fastest / 2),
                ("b", "1"): result(("b", "1"), R.OK, fastest)}
    predicted = [result(key, R.OK, fastest * factor) for key, factor in
                 zip(keys, (0.5, 0.55, 1.0, 1.1), strict=True)]
    got = second_round(predicted, measured, allowed)
    assert [c.key for c in got] == [("b", "1"), ("b", "2")]
