"""CPU benchmark: every algorithm on every convolution of a network, and the tuner's choice.

Usage: python benchmarks/bench_cpu.py --model resnet50 --batch 8 [--out cpu.json]
Measures into a throwaway SQLite database (mode="tune"), so nothing is read from a cache.
Prints a Markdown table: per layer each algorithm's median ms, the best one's GFLOP/s
(direct-convolution FLOP count) and what the tuner chose.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from datetime import date
from pathlib import Path
from typing import Any

from algorithms.registry import ALGORITHM_NAMES
from algorithms.runtime import TimingPolicy
from db.engine import open_store
from tuner.devices import identify
from tuner.networks import network_problems
from tuner.tuning import Tuner


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--budget-s", type=float, default=0.5, help="timing budget per candidate")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tuner = Tuner(open_store(f"sqlite:///{tmp}/bench.db"),
                      policy=TimingPolicy(warmup=1, budget_s=args.budget_s, min_reps=3))
        rows: list[dict[str, Any]] = []
        for layer, problem in network_problems(args.model, args.batch):
            found = tuner.find(problem, "cpu", mode="tune")
            times = {r.algorithm: r.time_ms for r in found}
            best = found[0]
            rows.append({
                "layer": layer.name, "problem": problem.describe(), "flops": problem.flops,
                "times_ms": times, "best": best.algorithm, "best_config": best.config,
                "best_ms": best.time_ms,
                "gflops": problem.flops / (best.time_ms or float("nan")) / 1e6,
            })
    identity = identify("cpu")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    report = {"date": date.today().isoformat(), "device": identity.info, "commit": commit,
              "model": args.model, "batch": args.batch, "layers": rows}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    print(f"{args.model} batch {args.batch} on {identity.info['name']} "
          f"({identity.info['units']} cores), {report['date']}, commit {commit}\n")
    print("| layer | problem | " + " | ".join(ALGORITHM_NAMES) + " | best | GFLOP/s |")
    print("|---" * (len(ALGORITHM_NAMES) + 4) + "|")
    for row in rows:
        cells = [fmt(row["times_ms"].get(name)) for name in ALGORITHM_NAMES]
        print(f"| {row['layer']} | {row['problem']} | " + " | ".join(cells)
              + f" | {row['best']} | {row['gflops']:.1f} |")
    total = sum(row["best_ms"] or 0 for row in rows)
    print(f"\nsum of best times over distinct layers: {total:.1f} ms")


if __name__ == "__main__":
    main()
