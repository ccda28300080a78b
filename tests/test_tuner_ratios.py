"""benchmarks/tuner_ratios.py on synthetic bench_tuner rows."""

from __future__ import annotations

from typing import Any

from benchmarks.tuner_ratios import (
    against_bench,
    bench_regrets,
    bench_table,
    bench_times,
    family,
    ratios,
    several_calls,
    table,
    three_points,
    ties,
)


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


def _bench_report(times: dict[str, float | None]) -> dict[str, Any]:
    configs: dict[str, dict[str, dict[str, object]]] = {}
    for name, ms in times.items():
        algorithm, _, config = name.partition("/")
        configs.setdefault(algorithm, {})[config] = {"status": "ok", "ms": ms}
    return {"rows": [{"problem": {"n": 1, "k": 2},
                      "algorithms": {a: {"configs": c} for a, c in configs.items()}}]}


def test_bench_gpu_is_a_third_measurement_of_the_same_configurations() -> None:
    bench = bench_times([_bench_report({"a/x": 0.020, "b/y": 0.021, "b/z": None})])
    assert bench == {(("k", 2), ("n", 1)): {"a/x": 0.020, "b/y": 0.021}}
    row = {"key": {"k": 2, "n": 1}, "layer": "l1", "pick": "a/x", "best": "b/y",
           "regret": 0.3, "tuned_all_ms": {"a/x": 0.019, "b/y": 0.020},
           "isolated_ms": {"a/x": 0.026, "b/y": 0.020}}
    groups = against_bench([{"rows": [row]}], bench)
    assert groups[("a", "small")] == ([0.019 / 0.020], [0.026 / 0.020])
    assert "| a | small | 5 |" in bench_table({k: (v[0] * 5, v[1] * 5) for k, v in groups.items()})
    text = bench_regrets([("run", {"rows": [row]})], bench)
    # Against bench_gpu the pick is the fastest; against the child it lost 30%.
    assert "| run | 1 | 0.0% | 0.0% | 30.0% | 30.0% |" in text
    assert ("| run | l1 | a/x | 0.0% | 30.0% | a/x: 19.0, 26.0, 20.0 / b/y: 20.0, 20.0, 21.0 |"
            in text)


def test_three_points_sort_configurations_by_size_and_launches() -> None:
    assert several_calls("implicit_gemm_tc/64x128-k2") and several_calls("im2col_gemm/chunk=all")
    assert not several_calls("implicit_gemm_tc/64x64")
    bench = bench_times([_bench_report({"a/x": 0.020, "a/x-k2": 0.040, "im2col_gemm/c": 0.1})])
    row = {"key": {"k": 2, "n": 1},
           "tuned_all_ms": {"a/x": 0.019, "a/x-k2": 0.030, "im2col_gemm/c": 0.1},
           "isolated_ms": {"a/x": 0.020, "a/x-k2": 0.040, "im2col_gemm/c": 0.12}}
    assert three_points([{"rows": [row]}], bench) == {
        "small, one launch": [(0.019 / 0.020, 1.0)], "small, several": [(0.75, 1.0)],
        "large": [(1.0, 0.12 / 0.1)]}
