"""benchmarks/issue10_targets.py: each target's verdict from bench_gpu rows."""

from __future__ import annotations

import math
from typing import Any

import pytest

from benchmarks import issue10_targets as T


def _row(network: str, layer: str, ratio: float, math_: str = "fp32",
         error: float = 1e-7) -> dict[str, Any]:
    return {"network": network, "layer": layer, "speed_vs_cudnn": ratio,
            "problem": {"dtype": "float32", "math": math_, "r": 3, "s": 3, "stride_h": 1,
                        "stride_w": 1, "groups": 1, "c": 8},
            "tuned": {"rel_error": error}}


def _run(rows: list[dict[str, Any]], math_: str = "fp32") -> dict[str, Any]:
    return {"device": {"name": "stand-in"}, "rows": rows, "summary": {},
            "settings": {"dtype": "float32", "math": math_, "networks": "resnet50:32,vgg16:16"}}


def test_a_target_needs_its_geomean_its_slowest_layer_and_fp32_errors() -> None:
    rows = T.layers([_run([_row("resnet50", "a", 2.0), _row("vgg16", "b", 1.0)])])
    fp32 = T.verdict(T.TARGETS[0], rows)  # >= 1.3, no layer below 0.9
    assert fp32["geomean"] == pytest.approx(math.sqrt(2.0)) and fp32["met"]
    assert fp32["slowest_layer"] == "b" and fp32["picks_over_1e-5"] == 0
    slow = T.layers([_run([_row("resnet50", "a", 4.0), _row("vgg16", "b", 0.85)])])
    assert not T.verdict(T.TARGETS[0], slow)["met"]  # geomean 1.84, but a layer at 0.85
    inexact = T.layers([_run([_row("resnet50", "a", 2.0), _row("vgg16", "b", 2.0, error=2e-5)])])
    found = T.verdict(T.TARGETS[0], inexact)
    assert not found["met"] and found["picks_over_1e-5"] == 1


def test_a_target_without_its_layers_says_so_and_a_later_file_wins() -> None:
    first = _run([_row("resnet50", "a", 0.5, "tf32"), _row("vgg16", "b", 1.0, "tf32")], "tf32")
    again = _run([_row("resnet50", "a", 1.5, "tf32")], "tf32")
    rows = T.layers([first, again])
    tf32 = T.verdict(T.TARGETS[1], rows)
    assert tf32["geomean"] == pytest.approx(math.sqrt(1.5)) and tf32["met"]
    assert T.verdict(T.TARGETS[0], rows) == {"target": T.TARGETS[0].name,
                                              "missing": ["resnet50", "vgg16"]}
    # The GEMM rates come from the strict-FP32 run's rows: tc at 0.9x cupy.matmul, wgmma 1.5x.
    gemm = {"gemm": {"matmul_tflops": 10.0},
            "algorithms": {"implicit_gemm_tc": {"tflops": 9.0},
                           "implicit_gemm_wgmma": {"tflops": 15.0}}}
    strict = _run([{**_row("resnet50", "c", 1.0), **gemm}])
    table = T.markdown([T.verdict(t, rows) for t in T.TARGETS], T.matmul_ratios([strict]))
    assert "| math=tf32, ResNet-50 + VGG-16 | 2 | 1.225 |" in table
    assert "no data for resnet50, vgg16" in table and "0.900 (wgmma 1.500)" in table


def test_layers_without_a_ratio_and_gpu_time_are_shown() -> None:
    # Bug: a target whose layers all lacked a ratio (cuDNN or every candidate of ours failed
    # there) divided by zero and killed the whole table; layers without one were dropped
    # from the geomean without a word. GPU time alone is shown beside the wall ratio.
    none = T.layers([_run([{**_row("resnet50", "a", 1.0), "speed_vs_cudnn": None},
                           {**_row("vgg16", "b", 1.0), "speed_vs_cudnn": None}])])
    assert T.verdict(T.TARGETS[0], none)["missing"] == ["resnet50", "vgg16"]
    partial = T.layers([_run([
        {**_row("resnet50", "a", 2.0), "device": {"tuned_vs_cudnn": 1.5}},
        {**_row("vgg16", "b", 2.0), "device": {"tuned_vs_cudnn": 1.5}},
        {**_row("vgg16", "c", 1.0), "speed_vs_cudnn": None}])])
    found = T.verdict(T.TARGETS[0], partial)
    assert found["without_ratio"] == 1 and found["device_geomean"] == pytest.approx(1.5)
    table = T.markdown([found], {})
    assert "| 2 | 2.000 | 1.500 |" in table and "1 layers without a ratio" in table
