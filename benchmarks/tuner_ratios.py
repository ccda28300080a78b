"""The tuner's time over the isolated time per kind of configuration (issue 11).

Usage: python benchmarks/tuner_ratios.py [--ties] tuner.json [...]
       python benchmarks/tuner_ratios.py --bench bench_*.json [--plot p.png] -- tuner.json [...]

Reads bench_tuner.py results (each configuration's time as the tuner measured it and as
the isolated child re-measured it) and groups the ratios by algorithm and by what makes a
configuration launch several kernels (a K split "-kN", an NHWC transpose, a merged
im2col), and by size: under 50 us a run is near its launch cost. A group far below 1 is
timed faster during tuning than alone, so the tuner favours it where it is not faster.

With --bench: a third measurement of the same configurations from bench_gpu.py JSON files of
the same run (each configuration timed alone, after its warm-ups, in that long-lived
process): per group, the tuner's and the isolated child's times over bench_gpu.py's. It says
which of the two disagreeing measurements a third one sides with.

With --ties: every pick the tuner made for less workspace within noise of a faster
candidate (its note says so), with the gap it called a tie and the pick's regret.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterator
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


Key = tuple[tuple[str, Any], ...]  # a problem's key, as sorted items


def bench_times(reports: list[dict[str, Any]]) -> dict[Key, dict[str, float]]:
    """Per problem, each configuration's time (ms) in bench_gpu.py reports."""
    out: dict[Key, dict[str, float]] = defaultdict(dict)
    for report in reports:
        for row in report["rows"]:
            times = out[tuple(sorted(row["problem"].items()))]
            for algorithm, entry in row["algorithms"].items():
                for config, found in (entry.get("configs") or {}).items():
                    if found.get("status") == "ok" and found.get("ms"):
                        times[f"{algorithm}/{config}"] = found["ms"]
    return dict(out)


def _triples(reports: list[dict[str, Any]], bench: dict[Key, dict[str, float]]
             ) -> Iterator[tuple[str, float, float, float]]:
    """(configuration, as tuned, alone in the child, in bench_gpu.py) wherever all three
    measured it (ms)."""
    for report in reports:
        for row in report["rows"]:
            third = bench.get(tuple(sorted(row["key"].items())), {})
            for name, tuned in row.get("tuned_all_ms", {}).items():
                alone, other = row["isolated_ms"].get(name), third.get(name)
                if tuned and alone and other:
                    yield name, tuned, alone, other


def against_bench(reports: list[dict[str, Any]], bench: dict[Key, dict[str, float]]
                  ) -> dict[tuple[str, str], tuple[list[float], list[float]]]:
    """Per (family, size): the tuner's and the isolated child's times over bench_gpu.py's,
    for the configurations all three measured."""
    out: dict[tuple[str, str], tuple[list[float], list[float]]] = defaultdict(
        lambda: ([], []))
    for name, tuned, alone, other in _triples(reports, bench):
        group = out[(family(name), "small" if alone < SMALL_MS else "large")]
        group[0].append(tuned / other)
        group[1].append(alone / other)
    return dict(out)


def bench_regrets(reports: list[tuple[str, dict[str, Any]]], bench: dict[Key, dict[str, float]]
                  ) -> str:
    """Markdown: per run, the tuner's regret against bench_gpu.py's times (the pick's over
    the fastest of the configurations both measured) beside its regret against the child,
    and the layers above 5% by either, with the three times of the pick and of each
    reference's best."""
    lines = ["| run | layers | median against bench_gpu | worst | against the child: median | "
             "worst |", "|---|---|---|---|---|---|"]
    above: list[str] = []
    for name, report in reports:
        bench_regret, child_regret = [], []
        for row in report["rows"]:
            third = bench.get(tuple(sorted(row["key"].items())), {})
            common = {n: third[n] for n in row["isolated_ms"] if n in third}
            if row["pick"] not in common:
                continue
            regret = common[row["pick"]] / min(common.values()) - 1
            bench_regret.append(regret)
            child_regret.append(row["regret"])
            if max(regret, row["regret"]) > 0.05:
                best = min(common, key=common.__getitem__)
                above.append(
                    f"| {name} | {row['layer']} | {row['pick']} | {100 * regret:.1f}% | "
                    f"{100 * row['regret']:.1f}% | "
                    + " / ".join(f"{n}: {1e3 * row['tuned_all_ms'].get(n, math.nan):.1f}, "
                                 f"{1e3 * row['isolated_ms'].get(n, math.nan):.1f}, "
                                 f"{1e3 * third.get(n, math.nan):.1f}"
                                 for n in dict.fromkeys((row["pick"], best, row["best"])))
                    + " |")
        if bench_regret:
            lines.append(f"| {name} | {len(bench_regret)} | "
                         f"{100 * statistics.median(bench_regret):.1f}% | "
                         f"{100 * max(bench_regret):.1f}% | "
                         f"{100 * statistics.median(child_regret):.1f}% | "
                         f"{100 * max(child_regret):.1f}% |")
    lines += ["", "| run | layer | pick | regret against bench_gpu | against the child | "
              "us as tuned, alone in the child, in bench_gpu: the pick / bench_gpu's best / "
              "the child's best |", "|---|---|---|---|---|---|", *above]
    return "\n".join(lines)


#: Algorithms whose every run is several launches or library calls (cuBLAS, cuFFT).
SEVERAL_CALLS = ("im2col_gemm", "fft", "winograd")


def several_calls(name: str) -> bool:
    """Whether a configuration's run is more than one kernel launch."""
    return family(name) != name.partition("/")[0] or name.partition("/")[0] in SEVERAL_CALLS


def draw_three(groups_of: dict[str, list[tuple[float, float]]], title: str, path: Path) -> None:
    """Scatter: each configuration's tuner / bench_gpu time (x) and child / bench_gpu (y),
    one colour per kind (`groups_of`: kind -> points)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5))
    for label, points in groups_of.items():
        if points:
            ax.scatter([p[0] for p in points], [p[1] for p in points], s=8, alpha=0.6,
                       label=f"{label} ({len(points)})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axvline(1, color="black", linewidth=0.6)
    ax.axhline(1, color="black", linewidth=0.6)
    ax.set_xlabel("tuner's time / bench_gpu's")
    ax.set_ylabel("isolated child's time / bench_gpu's")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def three_points(reports: list[dict[str, Any]], bench: dict[Key, dict[str, float]]
                 ) -> dict[str, list[tuple[float, float]]]:
    """`draw_three`'s points: small configurations (under SMALL_MS alone) by whether they
    launch once, and the large ones."""
    out: dict[str, list[tuple[float, float]]] = {
        "small, one launch": [], "small, several": [], "large": []}
    for name, tuned, alone, other in _triples(reports, bench):
        kind = ("large" if alone >= SMALL_MS else
                "small, several" if several_calls(name) else "small, one launch")
        out[kind].append((tuned / other, alone / other))
    return out


def _quartiles(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4)
    return f"{q[1]:.3f} ({q[0]:.3f}-{q[2]:.3f})"


def bench_table(groups: dict[tuple[str, str], tuple[list[float], list[float]]],
                least: int = 5) -> str:
    """Markdown: per group with at least `least` configurations, the median and quartiles
    of the tuner's and the child's time over bench_gpu.py's."""
    lines = ["| configurations | size | count | tuner / bench_gpu | isolated child / bench_gpu |",
             "|---|---|---|---|---|"]
    for (name, size), (tuner, child) in sorted(groups.items()):
        if len(tuner) >= least:
            lines.append(f"| {name} | {size} | {len(tuner)} | {_quartiles(tuner)} | "
                         f"{_quartiles(child)} |")
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
    parser.add_argument("--bench", nargs="+", type=Path, default=None,
                        help="bench_gpu.py JSON files of the same run: compare with them")
    parser.add_argument("--plot", type=Path, default=None,
                        help="with --bench: draw the three measurements' scatter here")
    parser.add_argument("results", nargs="+", type=Path, help="bench_tuner.py JSON files")
    args = parser.parse_args()
    if args.plot and not args.bench:
        parser.error("--plot needs --bench")
    reports = [(str(p), json.loads(p.read_text())) for p in args.results]
    if args.ties:
        print(ties(reports))
    elif args.bench:
        bench = bench_times([json.loads(p.read_text()) for p in args.bench])
        print(bench_table(against_bench([r for _, r in reports], bench)))
        print()
        print(bench_regrets(reports, bench))
        if args.plot:
            draw_three(three_points([r for _, r in reports], bench),
                       f"three measurements of each configuration, {args.results[0].parent.name}",
                       args.plot)
    else:
        print(table(ratios([r for _, r in reports])))

if __name__ == "__main__":
    main()
