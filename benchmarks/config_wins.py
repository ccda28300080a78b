"""Which configurations ever come close to a layer's best, from bench_gpu.py's per-configuration
times: the candidates whose tuning time buys nothing (issue 11's tuning cost; issue 10's
"keep only the tiles that win").

Usage: python benchmarks/config_wins.py --results bench_fp32.json [...] [--within 0.10]
                                        [--by-math] [--out table.md]
Per configuration (split-K counts "-k2", "-k3"... folded into one "-kS" row: which split a
layer gets depends on its grid), over every layer it was measured on: how often it was the
fastest, how often within `within` of the fastest, and its best ratio to the fastest. Rows
that never came within are what exhaustive tuning measures for nothing on these layers (and
on these layers only: a tile may exist for shapes no network here has). Reads stored times
only: no device needed.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.problem import ConvProblem  # noqa: E402
from benchmarks.bench_model import from_results  # noqa: E402

#: A split-K configuration's split count, folded into one row.
_SPLIT = re.compile(r"-k\d+$")


@dataclass
class Tally:
    """One configuration row's counts over the layers it was measured on."""

    layers: int = 0
    fastest: int = 0
    close: int = 0
    best_ratio: float = float("inf")


def folded(config: str) -> str:
    """The row a configuration counts in: split-K counts as "-kS"."""
    return _SPLIT.sub("-kS", config)


def tally(paths: list[Path], within: float, by_math: bool) -> dict[tuple[str, ...], Tally]:
    """(math if by_math, algorithm, folded config) -> its Tally over the files' layers."""
    samples, _, _ = from_results(paths)
    times: dict[ConvProblem, dict[tuple[str, str], float]] = defaultdict(dict)
    for s in samples:
        if s.time_ms is None:
            continue
        found = times[s.problem].get((s.algorithm, s.config))
        if found is None or s.time_ms < found:
            times[s.problem][s.algorithm, s.config] = s.time_ms
    rows: dict[tuple[str, ...], Tally] = defaultdict(Tally)
    for problem, measured in times.items():
        fastest = min(measured.values())
        # A folded row counts a layer once, by its best split there.
        best: dict[tuple[str, ...], float] = {}
        for (algorithm, config), ms in measured.items():
            row_key = ((problem.math,) if by_math else ()) + (algorithm, folded(config))
            best[row_key] = min(ms, best.get(row_key, ms))
        for row_key, ms in best.items():
            row = rows[row_key]
            row.layers += 1
            row.fastest += ms == fastest
            row.close += ms <= fastest * (1 + within)
            row.best_ratio = min(row.best_ratio, ms / fastest)
    return rows


def markdown(rows: dict[tuple[str, ...], Tally], within: float) -> str:
    """The table, closest first within each algorithm; the never-close rows counted last."""
    width = len(next(iter(rows))) if rows else 2
    head = (["math"] if width == 3 else []) + ["algorithm", "configuration"]
    lines = ["| " + " | ".join(head) + f" | layers | fastest | within {within:.0%} | "
             "best / fastest |", "|" + "---|" * (len(head) + 4)]
    for key in sorted(rows, key=lambda k: (k[:-1], -rows[k].close, rows[k].best_ratio)):
        row = rows[key]
        lines.append("| " + " | ".join(key) + f" | {row.layers} | {row.fastest} | {row.close} "
                     f"| {row.best_ratio:.2f} |")
    never = [key for key, row in rows.items() if row.close == 0]
    measured = sum(row.layers for row in rows.values())
    wasted = sum(rows[key].layers for key in never)
    lines += ["", f"{len(never)} of {len(rows)} rows never within {within:.0%} of a layer's "
              f"fastest: {wasted} of {measured} measurements (folded rows count a layer "
              "once)."]
    return "\n".join(lines)


def main() -> None:
    """Print (or write) the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", type=Path, nargs="+", required=True)
    parser.add_argument("--within", type=float, default=0.10)
    parser.add_argument("--by-math", action="store_true", help="a row per math mode too")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    text = markdown(tally(args.results, args.within, args.by_math), args.within)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
