"""The Nsight Compute step's cases and its log summary (no GPU: configurations and parsing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from algorithms.registry import get_algorithm
from benchmarks import ncu_summary, profile_kernels


@pytest.mark.parametrize("name", list(profile_kernels.CASES))
def test_each_case_names_a_configuration_its_algorithm_offers(name: str) -> None:
    # A GPU session must not spend device time on a case that cannot run.
    case = profile_kernels.CASES[name]
    problem = case.conv_problem()
    if case.algorithm == "torch":
        assert case.config == ""
        return
    algorithm = get_algorithm("cuda", case.algorithm)
    assert algorithm.supports(problem)
    assert case.config in algorithm.configs(problem)


HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Section Name","Metric Name","Metric Unit","Metric Value"')


def row(kid: int, kernel: str, metric: str, unit: str, value: str) -> str:
    return f'"{kid}","7","python3","h","{kernel}","1","7","S","{metric}","{unit}","{value}"'


def test_summary_reads_each_kernel_with_units_separators_and_stalls(tmp_path: Path) -> None:
    log = tmp_path / "ncu_dw_7x7_flat.log"
    log.write_text("\n".join([
        "==PROF== Connected to process 7",
        "case 0: dw_7x7_flat: n32 ...",
        HEADER,
        row(1, "second", "Duration", "msecond", "1.5"),
        row(0, "first<float, 1>", "Duration", "nsecond", "12,500"),
        row(0, "first<float, 1>", "DRAM Throughput", "%", "71.25"),
        row(0, "first<float, 1>", "Registers Per Thread", "register/thread", "38"),
        row(0, "first<float, 1>", "Block Limit Registers", "block", "n/a"),
        row(0, "first<float, 1>",
            "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "",
            "9.5"),
        row(0, "first<float, 1>",
            "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", "", "0.25"),
        row(0, "first<float, 1>",
            "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", "", "2"),
        row(0, "first<float, 1>",
            "smsp__average_warps_issue_stalled_not_issued_per_issue_active.ratio", "", "99"),
        row(0, "first<float, 1>",
            "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio", "", "1"),
    ]))
    found = ncu_summary.kernels(log.read_text().splitlines())
    assert [k["name"] for k in found] == ["first<float, 1>", "second"]
    first = found[0]["metrics"]
    assert isinstance(first, dict)
    assert first["Duration"] == pytest.approx(12.5)  # ns with a thousands separator -> us
    assert found[1]["metrics"] == {"Duration": pytest.approx(1500.0)}
    assert "Block Limit Registers" not in first
    assert ncu_summary.stalls(first) == "long_scoreboard 9.5, wait 2, selected 1"
    empty = tmp_path / "ncu_empty.log"
    empty.write_text("==ERROR== refused")
    lines = ncu_summary.table([log, empty]).splitlines()
    assert lines[2].startswith("| dw_7x7_flat | `first<float, 1>` | 12.5 |")
    assert "| 71.25 |" in lines[2] and "| 38 |" in lines[2]
    assert lines[4].startswith("| empty | (no ncu results in ncu_empty.log) |")
    assert all(line.count("|") == lines[0].count("|") for line in lines)
