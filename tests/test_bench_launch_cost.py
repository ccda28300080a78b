"""The launch-cost benchmark's parts that need no GPU: its timing loop and its exit."""

from __future__ import annotations

import pytest

from algorithms.cuda.runtime import cuda_available
from benchmarks import bench_launch_cost as B


def test_per_call_us_times_every_call_of_five_loops() -> None:
    calls: list[int] = []
    got = B.per_call_us(lambda: calls.append(1), 7)
    assert len(calls) == 35 and got > 0


def test_kernel_sources_take_the_counted_arguments() -> None:
    assert B._source(0) == 'extern "C" __global__ void empty_0(int* p) {}\n'
    assert B._source(3).count(", int a") == 3


@pytest.mark.skipif(cuda_available()[0], reason="a GPU is present: the benchmark would run")
def test_without_a_gpu_it_says_why_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert B.main([]) == 2
    assert "no usable GPU" in capsys.readouterr().err
