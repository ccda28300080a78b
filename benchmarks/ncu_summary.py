"""One Markdown table from Nsight Compute logs (`ncu --csv --page details`), a row per kernel.

Usage: python benchmarks/ncu_summary.py LOG... (gpu_session.sh's `profile` step writes one
log per case of benchmarks/profile_kernels.py, named ncu_<case>.log)

Per kernel: duration, SM and memory throughput (% of peak), DRAM throughput, achieved
occupancy, registers, issue-slot use, cycles per issued instruction, and the three largest
stall reasons (warps stalled per issued instruction) where the log has them.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterable
from pathlib import Path

#: Column title -> ncu's metric name in the details page.
COLUMNS = {
    "us": "Duration",
    "SM %": "Compute (SM) Throughput",
    "memory %": "Memory Throughput",
    "DRAM %": "DRAM Throughput",
    "occupancy %": "Achieved Occupancy",
    "registers": "Registers Per Thread",
    "issue busy %": "Issue Slots Busy",
    "cycles/issue": "Warp Cycles Per Issued Instruction",
}
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"
#: Microseconds per unit of a duration.
TIME_UNITS = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6,
              "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}  # older and newer ncu


def number(text: str) -> float | None:
    """A metric value as a float ("1,234.5" included), or None when it is not a number."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def kernels(lines: Iterable[str]) -> list[dict[str, object]]:
    """Each profiled kernel of one log, in ID order: its name and metrics by ncu's names.

    Lines that are not ncu's CSV (the program's own output, ==PROF== notes) are skipped.
    """
    rows = [line for line in lines if line.startswith('"')]
    found: dict[str, dict[str, object]] = {}
    header: list[str] | None = None
    for record in csv.reader(rows):
        if record[:1] == ["ID"]:
            header = record
            continue
        # Newer ncu (2025.3 on the H100 of 2026-11-27) ends a metric's line after its value
        # when the rule columns are empty: pad such lines instead of dropping them.
        if header is None or len(record) > len(header):
            continue
        row = dict(zip(header, record + [""] * (len(header) - len(record)), strict=True))
        kernel = found.setdefault(row["ID"], {"name": row.get("Kernel Name", "?"),
                                              "metrics": {}})
        value = number(row.get("Metric Value", ""))
        if value is None:
            continue
        name, unit = row.get("Metric Name", ""), row.get("Metric Unit", "")
        if name == "Duration":
            value *= TIME_UNITS.get(unit, 1.0)
        metrics = kernel["metrics"]
        assert isinstance(metrics, dict)
        # First one wins: "Memory Throughput" is a % of peak in SpeedOfLight and comes again
        # in bytes/s from MemoryWorkloadAnalysis.
        metrics.setdefault(name, value)
    return [found[k] for k in sorted(found, key=lambda k: int(number(k) or 0))]


def stalls(metrics: dict[str, float], top: int = 3) -> str:
    """The largest stall reasons, "long_scoreboard 4.1, barrier 1.2, ..."."""
    named = [(value, name[len(STALL_PREFIX):-len(STALL_SUFFIX)])
             for name, value in metrics.items()
             if name.startswith(STALL_PREFIX) and name.endswith(STALL_SUFFIX)
             and "not_issued" not in name]
    return ", ".join(f"{reason} {value:.2g}" for value, reason in sorted(named, reverse=True)[:top])


def short(name: str, width: int = 70) -> str:
    """A kernel name cut to `width` characters, Markdown-safe."""
    name = name.replace("|", "/")
    return name if len(name) <= width else name[: width - 3] + "..."


def table(logs: list[Path]) -> str:
    """The Markdown table over every kernel of every log."""
    lines = ["| case | kernel | " + " | ".join(COLUMNS) + " | top stalls |",
             "|---|---|" + "---|" * len(COLUMNS) + "---|"]
    for log in logs:
        case = log.stem.removeprefix("ncu_")
        found = kernels(log.read_text(errors="replace").splitlines())
        if not found:
            lines.append(f"| {case} | (no ncu results in {log.name}) |" + " |" * (len(COLUMNS) + 1))
        for kernel in found:
            metrics = kernel["metrics"]
            assert isinstance(metrics, dict)
            cells = [f"{v:.4g}" if (v := metrics.get(m)) is not None else ""
                     for m in COLUMNS.values()]
            lines.append(f"| {case} | `{short(str(kernel['name']))}` | " + " | ".join(cells)
                         + f" | {stalls(metrics)} |")
    return "\n".join(lines)


def main() -> None:
    """Print the table of the logs named on the command line."""
    if len(sys.argv) < 2:
        sys.exit("usage: ncu_summary.py LOG...")
    print(table([Path(p) for p in sys.argv[1:]]))


if __name__ == "__main__":
    main()
