"""benchmarks/tuner_ratios.py on synthetic bench_tuner rows."""

from __future__ import annotations

from benchmarks.tuner_ratios import family, ratios, table, ties


def test_families_name_what_adds_launches() -> None:
    assert family("implicit_gemm_tc/64x128-k2") == "implicit_gemm_tc, split K"
    assert family("implicit_gemm_tc/128x128-nhwc-s4-k3") == "implicit_gemm_tc, split K, NHWC"
    assert family("im2col_gemm/chunk=all-merged") == "im2col_gemm, merged"
    assert family("winograd/f4x4") == "winograd"


def test_ratios_group_by_family_and_size() -> None:
    rows = [{"tuned_all_ms": {"a/x-k2": 0.02, "a/x": 0.2, "b/y": None},
             "isolated_ms": {"a/x-k2": 0.04, "a/x": 0.1, "b/y": 1.0}}]
    got = ratios([{"rows": rows}])
    assert got == {("a, split K", "small"): [0.5], ("a", "large"): [2.0]}
    assert "| a, split K | small | 5 | 0.500 |" in table({k: v * 5 for k, v in got.items()})
    assert "split K" not in table(got)  # fewer than five: left out


def test_ties_list_the_workspace_tie_breaks_with_their_gap_and_regret() -> None:
    rows = [{"layer": "l1", "pick": "a/x", "regret": 0.186,
             "note": "within noise of b/y (0.171 vs 0.1677 ms): chosen for less workspace"},
            {"layer": "l2", "pick": "b/y", "regret": 0.0, "note": None}]
    text = ties([("run", {"rows": rows})])
    assert "| run | l1 | a/x | 1.97% | 18.6% |" in text
    assert "l2" not in text
