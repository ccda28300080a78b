"""The tuner's time over the isolated time per kind of configuration (issue 11).

Usage: python benchmarks/tuner_ratios.py [--ties] tuner.json [tuner_vgg16.json ...]

Reads bench_tuner.py results (each configuration's time as the tuner measured it and as
the isolated child re-measured it) and groups the ratios by algorithm and by what makes a
configuration launch several kernels (a K split "-kN", an NHWC transpose, a merged
im2col), and by size: under 50 us a run is near its launch cost. A group far below 1 is
timed faster during tuning than alone, so the tuner favours it where it is not faster.

With --ties: every pick the tuner made for less workspace within noise of a faster
candidate (its note says so), with the gap it called a tie and the pick's regret.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

#: Below this isolated time (ms) a configuration counts as small.
SMALL_MS = 0.05


def family(name: str) -> str:
    """A configuration's group: its algorithm and the parts of its config that add launches."""
    algorithm, _, config = name.partition("/")
    parts = [algorithm]
    if re.search(r"-k\d", config):
        parts.append("split K")
    if "nhwc" in config:
        parts.append("NHWC")
    if "merged" in config:
        parts.append("merged")
    return ", ".join(parts)


def ratios(reports: list[dict[str, Any]]) -> dict[tuple[str, str], list[float]]:
    """Tuner's time over the isolated one, per (family, "small"/"large")."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for report in reports:
        for row in report["rows"]:
            for name, tuned in row.get("tuned_all_ms", {}).items():
                alone = row["isolated_ms"].get(name)
                if tuned and alone:
                    size = "small" if alone < SMALL_MS else "large"
                    out[(family(name), size)].append(tuned / alone)
    return dict(out)


def table(groups: dict[tuple[str, str], list[float]], least: int = 5) -> str:
    """Markdown: per group with at least `least` configurations, the ratio's quartiles."""
    lines = ["| configurations | size | count | median | quartiles | lowest |",
             "|---|---|---|---|---|---|"]
    for (name, size), values in sorted(groups.items()):
        if len(values) < least:
            continue
        q = statistics.quantiles(values, n=4)
        lines.append(f"| {name} | {size} | {len(values)} | {q[1]:.3f} | "
                     f"{q[0]:.3f}-{q[2]:.3f} | {min(values):.2f} |")
    return "\n".join(lines)


#: A workspace tie-break's note: "within noise of A/B (0.171 vs 0.1677 ms): chosen ...".
_TIE = re.compile(r"within noise of \S+ \(([\d.e+-]+) vs ([\d.e+-]+) ms\)")


def ties(reports: list[tuple[str, dict[str, Any]]]) -> str:
    """Markdown: each pick chosen within noise for less workspace, its gap and its regret."""
    lines = ["| run | layer | pick | gap called a tie | regret |", "|---|---|---|---|---|"]
    for name, report in reports:
        for row in report["rows"]:
            found = _TIE.search(row.get("note") or "")
            if found:
                pick, fastest = float(found.group(1)), float(found.group(2))
                lines.append(f"| {name} | {row['layer']} | {row['pick']} | "
                             f"{100 * (pick / fastest - 1):.2f}% | {100 * row['regret']:.1f}% |")
    return "\n".join(lines)


def main() -> None:
    """Print the table for the files named."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ties", action="store_true",
                        help="list the workspace tie-breaks instead of the ratios")
    parser.add_argument("results", nargs="+", type=Path, help="bench_tuner.py JSON files")
    args = parser.parse_args()
    reports = [(str(p), json.loads(p.read_text())) for p in args.results]
    print(ties(reports) if args.ties else table(ratios([r for _, r in reports])))

if __name__ == "__main__":
    main()
