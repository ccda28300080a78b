"""The GPU benchmark's report (geometric means, counts, table) on synthetic rows, no GPU."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from algorithms.problem import ConvProblem
from algorithms.reference import reference, relative_error
from benchmarks.bench_gpu import markdown, summarize, torch_conv


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
