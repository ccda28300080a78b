"""The GPU benchmark's report (geometric means, counts, table) on synthetic rows, no GPU."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from algorithms.problem import ConvProblem
from algorithms.reference import reference, relative_error
from benchmarks.bench_gpu import torch_conv
from benchmarks.gpu_report import (
    alternating,
    bandwidth,
    device_summary,
    layer_kind,
    markdown,
    summarize,
)


def _row(network: str, layer: str, speed: float | None,
         gemm: float | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "network": network, "layer": layer, "describe": layer, "algorithms": {},
        "tuned": {"algorithm": "fft", "config": "default", "ms": 1.0},
        "cudnn": {"ms": speed} if speed else {"skipped": "no torch"},
    }
    if speed:
        row["speed_vs_cudnn"] = speed
    if gemm is not None:
        row["gemm"] = {"m": 64, "n": 128, "k": 576, "matmul_tflops": 40.0,
                       "implicit_gemm_tflops": 40.0 * gemm, "implicit_vs_matmul": gemm}
    return row


def test_geometric_means_and_counts() -> None:
    rows = [_row("resnet50", "a", 2.0, 0.5), _row("resnet50", "b", 0.5, 0.8),
            _row("vgg16", "c", 0.9), _row("vgg16", "d", None)]
    summary = summarize(rows)
    assert summary["ours/cuDNN speed, resnet50"] == pytest.approx(1.0)
    assert summary["ours/cuDNN speed, vgg16"] == pytest.approx(0.9)
    assert summary["ours/cuDNN speed, all"] == pytest.approx(0.9 ** (1 / 3))
    assert summary["layers counted, all"] == 3 and summary["layers, all"] == 4
    assert summary["layers counted, vgg16"] == 1 and summary["layers, vgg16"] == 2
    assert summary["implicit_gemm/cupy.matmul, 3x3"] == pytest.approx(math.sqrt(0.4))
    assert summary["slowest layer, ours/cuDNN, resnet50"] == 0.5
    assert summary["slowest layer, ours/cuDNN, all"] == 0.5


def test_means_by_kind_of_layer() -> None:
    # The sweep is one "network" of every kind: its means are read per kind of layer.
    pointwise = ConvProblem(n=2, c=8, h=8, w=8, k=16, r=1, s=1)
    strided = ConvProblem(n=2, c=8, h=8, w=8, k=16, r=3, s=3, pad=1, stride=2)
    depthwise = ConvProblem(n=2, c=8, h=8, w=8, k=8, r=3, s=3, pad=1, groups=8)
    rows = [_row("sweep", "a", 2.0), _row("sweep", "b", 0.5), _row("sweep", "c", 0.8),
            _row("sweep", "d", 1.5), _row("resnet50", "a", 0.6)]
    for row, problem in zip(rows, (pointwise, pointwise, strided, depthwise, pointwise),
                            strict=True):
        row["problem"] = problem.key()
    assert [layer_kind(p.key()) for p in (pointwise, strided, depthwise)] == [
        "1x1", "3x3 s2", "dw 3x3"]
    summary = summarize(rows)
    assert summary["ours/cuDNN speed, kind 1x1"] == pytest.approx((2.0 * 0.5 * 0.6) ** (1 / 3))
    assert summary["layers counted, kind 1x1"] == 3
    assert summary["slowest layer, ours/cuDNN, kind 1x1"] == 0.5
    assert summary["ours/cuDNN speed, kind 3x3 s2"] == pytest.approx(0.8)
    assert summary["ours/cuDNN speed, kind dw 3x3"] == pytest.approx(1.5)
    assert summary["ours/cuDNN speed, sweep"] == pytest.approx((2.0 * 0.5 * 0.8 * 1.5) ** 0.25)


def test_tensor_core_rates_over_matmul() -> None:
    rows = [_row("resnet50", "a", 1.0, 0.5), _row("resnet50", "b", 1.0, 0.5),
            _row("vgg16", "c", 1.0)]
    rows[0]["algorithms"] = {"implicit_gemm_tc": {"tflops": 80.0},
                             "implicit_gemm_wgmma": {"tflops": 20.0}}
    rows[1]["algorithms"] = {"implicit_gemm_tc": {"tflops": 20.0}}
    rows[2]["algorithms"] = {"implicit_gemm_tc": {"tflops": 999.0}}  # no GEMM row: left out
    summary = summarize(rows)
    assert summary["implicit_gemm_tc/cupy.matmul FP32, 3x3"] == pytest.approx(1.0)  # 2, 0.5
    assert summary["layers counted, 3x3 GEMM, implicit_gemm_tc"] == 2
    assert summary["implicit_gemm_wgmma/cupy.matmul FP32, 3x3"] == pytest.approx(0.5)
    assert summary["implicit_gemm_wgmma 3xFP16/cupy.matmul FP32, 3x3"] is None


def test_16_bit_part_tiles_are_rated_apart_from_3xtf32() -> None:
    row = _row("resnet50", "a", 1.0, 0.5)
    row["algorithms"] = {"implicit_gemm_wgmma": {"tflops": 90.0, "configs": {
        "128x128x32-s3": {"tflops": 30.0}, "64x128x32-s4": {"tflops": 20.0},
        "128x128x64-s3-3xfp16": {"tflops": 80.0}, "64x128x64-s4-3xfp16": {"status": "wrong"}}}}
    summary = summarize([row])
    assert summary["implicit_gemm_wgmma/cupy.matmul FP32, 3x3"] == pytest.approx(0.75)
    assert summary["implicit_gemm_wgmma 3xFP16/cupy.matmul FP32, 3x3"] == pytest.approx(2.0)


def test_markdown_lists_every_layer_and_the_summary() -> None:
    rows = [_row("resnet50", "res2.3x3", 0.75, 0.6), _row("vgg16", "conv1_1", None)]
    table = markdown({"rows": rows, "summary": summarize(rows)})
    assert "| resnet50 | res2.3x3 |" in table and "| vgg16 | conv1_1 |" in table
    assert "| ours/cuDNN speed, all | 0.750 |" in table
    assert "| layers counted, all | 1 |" in table
    assert "64 x 128 x 576" in table


@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_filter"])
def test_cudnn_side_computes_the_problems_direction(direction: str) -> None:
    # bench_gpu compares our gradients with PyTorch's: its call must be the same gradient.
    torch = pytest.importorskip("torch")
    problem = ConvProblem(n=2, c=4, h=9, w=8, k=6, r=3, s=2, pad=1, stride=2, dilation=(1, 2),
                          groups=2, dtype="float64", direction=direction)
    rng = np.random.default_rng()
    a_shape, b_shape, _ = problem.operand_shapes
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    ours = torch_conv(torch, problem, torch.from_numpy(a), torch.from_numpy(b)).numpy()
    assert relative_error(ours, reference(a, b, problem)) < 1e-12


def _depthwise_row(layer: str, depthwise_ms: float | None) -> dict[str, Any]:
    row = _row("mobilenet_v2", layer, 0.5)
    row["tuned"] = {"algorithm": "depthwise", "config": "32x32p4", "ms": 0.25}
    row["algorithms"] = {"depthwise": {"ms": depthwise_ms} if depthwise_ms else {}}
    row["bandwidth"] = bandwidth(row, 600_000_000, 3000.0)
    return row


def test_depthwise_bandwidth_against_the_hbm_copy_rate() -> None:
    # 600 MB in 0.25 ms is 2,400 GB/s: 0.8 of a 3,000 GB/s copy; cuDNN's 0.5 ms is 1,200.
    row = _depthwise_row("block2.1.dw3x3", 0.25)
    b = row["bandwidth"]
    assert b["tuned_gbps"] == pytest.approx(2400.0)
    assert b["depthwise_gbps"] == pytest.approx(2400.0)
    assert b["cudnn_gbps"] == pytest.approx(1200.0)
    assert b["depthwise_vs_hbm"] == pytest.approx(0.8)
    assert b["cudnn_vs_hbm"] == pytest.approx(0.4)
    untimed = _depthwise_row("block3.1.dw3x3", None)["bandwidth"]
    assert untimed["depthwise_gbps"] is None and untimed["depthwise_vs_hbm"] is None


def test_depthwise_table_and_mean_count_only_timed_layers() -> None:
    rows = [_depthwise_row("a", 0.25), _depthwise_row("b", 1.0), _depthwise_row("c", None),
            _row("resnet50", "res2.3x3", 0.75)]
    summary = summarize(rows)
    # 0.8 and 0.2 of the copy rate: geometric mean 0.4; the untimed layer is counted out.
    assert summary["depthwise GB/s / HBM copy, depthwise layers"] == pytest.approx(0.4)
    assert summary["layers counted, depthwise GB/s"] == 2
    table = markdown({"rows": rows, "summary": summary})
    assert "| mobilenet_v2/a | 600.0 | depthwise/32x32p4 | 2400 | 2400 | 1200 | 0.80 |" in table
    assert "| mobilenet_v2/c | 600.0 | depthwise/32x32p4 | 2400 | - | 1200 | - |" in table
    assert "res2.3x3 | 600" not in table  # dense layers stay out of the depthwise table


def test_device_times_say_how_much_of_a_pick_is_host() -> None:
    """The device-time table: the pick's device time at its best configuration, the
    fastest algorithm by device time, and the wall / device ratio of the pick."""
    row = _row("resnet50", "res3.1x1b", 0.5)
    row["tuned"].update(ms=0.040)
    row["algorithms"] = {
        "fft": {"best_config": "default", "ms": 0.040, "device_ms": 0.020},
        "direct": {"best_config": "8x8k16", "ms": 0.050, "device_ms": 0.010},
        "winograd": {"best_config": "f2x2"},  # no device time: left out
    }
    row["cudnn"] = {"ms": 0.020, "device_ms": 0.015}
    device = device_summary(row)
    assert device["tuned_ms"] == 0.020 and device["tuned_host_share"] == pytest.approx(2.0)
    assert device["best_algorithm"] == "direct" and device["best_ms"] == 0.010
    assert device["tuned_vs_cudnn"] == pytest.approx(0.75)
    assert device["best_vs_cudnn"] == pytest.approx(1.5)
    # A pick that is not its algorithm's best configuration has no device time of its own.
    row["tuned"]["config"] = "other"
    assert device_summary(row)["tuned_ms"] is None
    row["tuned"]["config"] = "default"
    row["device"] = device_summary(row)
    other = _row("vgg16", "conv1_1", 1.0)
    summary = summarize([row, other])
    assert summary["ours/cuDNN device time, tuned, all"] == pytest.approx(0.75)
    assert summary["layers counted, device fastest, all"] == 1
    table = markdown({"rows": [row, other], "summary": summary})
    assert "| resnet50/res3.1x1b | 0.020 | 2.00 | direct | 0.010 | 0.015 | 0.75 | 1.50 |" in table


def test_the_head_to_head_alternates_sides_on_a_drifting_clock() -> None:
    # Bug: our pick's ms was the least of some thirty candidates' medians and cuDNN's was
    # timed once, seconds later: a ratio biased by selection and by clocks that moved
    # between the two. Alternating rounds put both on the same clocks.
    rng = np.random.default_rng()
    ours_ms, cudnn_ms = (float(t) for t in rng.uniform(0.05, 2.0, size=2))
    drift = float(rng.uniform(0.02, 0.1))  # each round's clock slower than the last's
    calls: list[str] = []

    def time(call: Any) -> float:
        calls.append(call())
        return (ours_ms if calls[-1] == "A" else cudnn_ms) * (1 + drift * len(calls))

    found = alternating(time, lambda: "A", lambda: "B", 4)
    assert "".join(calls) == "ABBAABBA"
    assert found["rounds"] == 4 and len(found["ours_rounds_ms"]) == 4
    # Each side saw the same clocks on average: the ratio is the true one to within the
    # drift's odd round, where one side ran first then second (ABBA: 1+4+5+8 each).
    assert found["cudnn_ms"] / found["ours_ms"] == pytest.approx(cudnn_ms / ours_ms,
                                                                 rel=drift)
    sequential = [time(lambda: "A") for _ in range(4)] + [time(lambda: "B") for _ in range(4)]
    assert np.median(sequential[4:]) / np.median(sequential[:4]) > (cudnn_ms / ours_ms) * (
        1 + drift)
    with pytest.raises(ValueError, match="rounds"):
        alternating(time, lambda: "A", lambda: "B", 0)
