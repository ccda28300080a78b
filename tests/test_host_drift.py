"""benchmarks/host_drift.py on the CPU backend and on stand-in /proc files (no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from algorithms.cpu.runtime import CpuRuntime
from algorithms.problem import ConvProblem
from algorithms.runtime import TimingPolicy
from benchmarks import host_drift as D


def test_steal_and_clock_are_read_from_procfs(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 0 20 300 4 0 1 77 0 0\ncpu0 1 2 3\n")
    assert D.steal_jiffies(str(stat)) == 77
    stat.write_text("intr 1 2 3\n")
    assert D.steal_jiffies(str(stat)) is None
    assert D.steal_jiffies(str(tmp_path / "missing")) is None
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\ncpu MHz\t\t: 2400.5\n\nprocessor\t: 1\ncpu MHz\t\t: 3100.0\n")
    assert D.cpu_mhz(1, str(info)) == 3100.0 and D.cpu_mhz(0, str(info)) == 2400.5
    assert D.cpu_mhz(2, str(info)) is None


def test_rounds_sample_each_configuration_until_the_time_is_up() -> None:
    problem = ConvProblem(n=1, c=3, h=6, w=6, k=4, r=3, s=3, pad=1)
    ticks = iter(range(0, 1000))
    rounds = D.drift(CpuRuntime(), problem, ["im2col_gemm/default", "direct/default"],
                     seconds=3.0, interval=0.0, device_every=1,
                     policy=TimingPolicy(batch_below_ms=0.0), clock=lambda: next(ticks) / 2)
    assert len(rounds) >= 2
    for row in rounds:
        assert set(row["configs"]) == {"im2col_gemm/default", "direct/default"}
        for found in row["configs"].values():
            assert found["ms"] > 0 and found["batch"] == 1 and found["host_ms"] is None
            assert "device_ms" not in found  # the CPU backend has no device time
    meta = {"date": "d", "device": "cpu", "commit": "c", "problem": problem.describe()}
    text = D.report(meta, rounds)
    assert "| im2col_gemm/default: ms per run (1 a sample) |" in text


def test_a_configuration_that_cannot_run_the_problem_is_a_one_line_error() -> None:
    problem = ConvProblem(n=1, c=3, h=6, w=6, k=4, r=3, s=3, pad=1)
    with pytest.raises(ValueError, match="direct/nonesuch does not run"):
        D.drift(CpuRuntime(), problem, ["direct/nonesuch"], 0.0, 0.0, 1, TimingPolicy())
