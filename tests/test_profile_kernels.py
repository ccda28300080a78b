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


def test_summary_reads_lines_that_end_after_the_metric_value(tmp_path: Path) -> None:
    # Bug: ncu on the H100 of 2026-11-27 (and the H200 of 2026-11-26) ends each metric's
    # line after its value when the rule columns are empty; every such line was dropped as
    # malformed and the profile table came out empty.
    header = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
              '"Block Size","Grid Size","Device","CC","Section Name","Metric Name",'
              '"Metric Unit","Metric Value","Rule Name","Rule Type","Rule Description",'
              '"Estimated Speedup Type","Estimated Speedup"')
    line = ('"0","2250","python3.12","127.0.0.1","void k<float, 64>(const T1 *)","1","7",'
            '"(128, 1, 1)","(98, 4, 1)","0","9.0","GPU Speed Of Light Throughput",{}')
    log = tmp_path / "ncu_short.log"
    log.write_text("\n".join([
        "case 0: short", header,
        line.format('"Duration","ns","60,288",'),
        line.format('"Memory Throughput","%","79.98"'),
        line.format('"Registers Per Thread","register/thread","78"'),
        line.format('"Memory Throughput","byte/s","486,462,845,010.62"'),
    ]))
    found = ncu_summary.kernels(log.read_text().splitlines())
    assert [k["name"] for k in found] == ["void k<float, 64>(const T1 *)"]
    assert found[0]["metrics"] == {"Duration": pytest.approx(60.288),  # ns, not nsecond
                                   "Memory Throughput": 79.98,  # the %, not the bytes/s
                                   "Registers Per Thread": 78.0}
