"""benchmarks/bench_cpu_winograd.py: which layers it times, the old module beside the new,
and what one layer's measurement holds."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

pytest.importorskip("torch", reason="the benchmark compares with F.conv2d")

from algorithms.problem import ConvProblem
from algorithms.reference import reference_conv, relative_error
from algorithms.registry import get_algorithm
from benchmarks import bench_cpu_winograd as bench


def test_it_times_the_3x3_stride_1_ungrouped_layers_only() -> None:
    found = bench.layers("resnet50:2,mobilenet_v2:1")
    names = [name for name, _ in found]
    # ResNet-50's four 3x3 stride-1 layers; MobileNet-v2's 3x3 layers are depthwise or strided.
    assert names == ["resnet50.res2.3x3", "resnet50.res3.3x3", "resnet50.res4.3x3",
                     "resnet50.res5.3x3"]
    assert all(p.n == 2 and (p.r, p.s, p.stride, p.groups) == (3, 3, (1, 1), 1)
               for _, p in found)


def test_the_module_of_another_commit_runs_beside_this_one() -> None:
    try:
        old = bench.winograd_at("HEAD")
    except (OSError, subprocess.CalledProcessError) as exc:  # no git, or not a checkout
        pytest.skip(f"git cannot show HEAD here: {exc}")
    assert old is not get_algorithm("cpu", "winograd")
    problem = ConvProblem(n=2, c=5, h=9, w=7, k=3, r=3, s=3, pad=1)
    rng = np.random.default_rng()
    x = rng.standard_normal(problem.input_shape).astype(np.float32)
    w = rng.standard_normal(problem.filter_shape).astype(np.float32)
    y = np.full(problem.output_shape, np.nan, np.float32)
    old.run(x, w, y, np.zeros(old.workspace_bytes(problem, "f4x4"), np.uint8), problem, "f4x4")
    assert relative_error(y, reference_conv(x, w, problem)) <= 1e-5


class _Child:
    """Stands in for the F.conv2d child: records requests, answers a fixed time."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def ask(self, line: str) -> str:
        self.asked.append(line)
        return "1.5"


def test_a_layer_gives_every_variants_time_and_the_winograd_errors(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "PAUSE_S", 0.0)
    problem = ConvProblem(n=1, c=3, h=6, w=6, k=2, r=3, s=3, pad=1)
    variants = {"winograd f4x4": (get_algorithm("cpu", "winograd"), "f4x4"),
                "im2col_gemm": (get_algorithm("cpu", "im2col_gemm"), "default")}
    child = _Child()
    result = bench.measure(problem, variants, child, rounds=2, reps=1)  # type: ignore[arg-type]
    assert set(result["ms"]) == {"winograd f4x4", "im2col_gemm", "F.conv2d"}
    assert result["ms"]["F.conv2d"] == 1.5 and len(child.asked) == 2
    assert all(v > 0 for v in result["ms"].values())
    assert set(result["rel_error"]) == {"winograd f4x4"}
    assert result["rel_error"]["winograd f4x4"] <= 1e-5
