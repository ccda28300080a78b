"""Does priming each sample make the tuner's CPU times rank like the configurations alone?

Usage: python benchmarks/prime_effect.py [--model resnet50 --batch 8]
                                        [--layers res5.1x1b,res4.proj,res5.1x1a.s2]
                                        [--rounds 4] [--out r.json]

Per round and layer, in this order, one process, so that a machine changing speed moves the
three alike:
- the tuner's find (exhaustive, a fresh in-memory store) with runtime.prime a no-op, as
  before 2026-11-27: each interleaved sample started from the caches of the candidate
  timed before it;
- the same with CpuRuntime.prime (as shipped);
- bench_tuner's isolated re-measurement of the same configurations (each alone, primed,
  taking turns; budget --iso-budget-s).
Each time is divided by its own measurement's fastest, so each measurement is a ranking
with margins. Prints, per layer and round, each top configuration's three relative times,
and over everything: how far each tuner's relative times lie from the isolated ones (the
median of |log(tuner / isolated)|), and how often each tuner's pick is the isolated best.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from algorithms.cpu.runtime import CpuRuntime
from algorithms.runtime import TimingPolicy
from benchmarks.remeasure import iso_policy, isolated_ms
from db.engine import open_store
from tuner.networks import network_problems
from tuner.tuning import Tuner


class Unprimed(CpuRuntime):
    """The CPU runtime as it was before priming: a sample starts from whatever ran last."""

    def prime(self, fn: Callable[[], None], last_ms: float) -> None:
        """Nothing."""


def relative(times: dict[str, float]) -> dict[str, float]:
    """Each time over the fastest."""
    best = min(times.values())
    return {name: ms / best for name, ms in times.items()}


def _always(runtime: CpuRuntime) -> Callable[[str], CpuRuntime]:
    """A tuner's runtime factory that gives `runtime` for every device."""
    return lambda device: runtime


def one_round(problem: Any, policy: TimingPolicy, rng: np.random.Generator
              ) -> dict[str, dict[str, float]]:
    """The three measurements of one layer, each as relative times by configuration."""
    found: dict[str, dict[str, float]] = {}
    runtimes: tuple[tuple[str, CpuRuntime], ...] = (("unprimed", Unprimed()),
                                                     ("primed", CpuRuntime()))
    for label, runtime in runtimes:
        tuner = Tuner(open_store("sqlite://"), runtime=_always(runtime))
        rows = tuner.find_candidates(problem, "cpu", mode="tune")
        found[label] = relative({f"{r.algorithm}/{r.config}": r.time_ms
                                 for r in rows if r.usable and r.time_ms})
    tuner = Tuner(open_store("sqlite://"))
    candidates, _ = tuner.candidates(problem, "cpu")
    chosen = [c for c in candidates if f"{c.algorithm.name}/{c.config}" in found["primed"]]
    alone = isolated_ms(CpuRuntime(), chosen, problem, policy, rng)
    found["isolated"] = relative({f"{c.algorithm.name}/{c.config}": ms
                                  for c, (ms, _, _) in zip(chosen, alone, strict=True)})
    return found


def summary(rounds: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per tuner variant: the median |log(tuner / isolated)| over every configuration
    within 1.5x of its best alone, and the share of picks that are the best alone."""
    out = {}
    for label in ("unprimed", "primed"):
        gaps, hits = [], []
        for r in rounds:
            iso, tuned = r["isolated"], r[label]
            gaps += [abs(math.log(tuned[name] / ms)) for name, ms in iso.items()
                     if ms <= 1.5 and name in tuned]
            hits.append(min(tuned, key=lambda n: tuned[n]) == min(iso, key=lambda n: iso[n]))
        out[label] = {"median_gap": statistics.median(gaps), "pick_is_best": sum(hits) /
                      len(hits), "pick_regret_max": max(
                          r["isolated"][min(r[label], key=lambda n: r[label][n])] - 1
                          for r in rounds)}
    return out


def main() -> None:
    """Measure in rounds, print the table and the summary (and JSON with --out)."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--layers", default="res5.1x1b,res4.proj,res5.1x1a.s2")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--iso-budget-s", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.rounds < 1 or args.batch < 1:
        parser.error("--rounds and --batch must be at least 1")
    problems = dict((layer.name, p) for layer, p in network_problems(args.model, args.batch))
    layers = args.layers.split(",")
    if unknown := [name for name in layers if name not in problems]:
        parser.error(f"no layer {', '.join(unknown)} in {args.model}")
    policy = iso_policy(args.iso_budget_s, 5)  # bench_tuner's, with its default min_reps
    rng = np.random.default_rng()
    rounds = []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    print(f"{args.model} batch {args.batch}, CPU backend ({CpuRuntime().fingerprint()['name']}), "
          f"{date.today().isoformat()}, commit {commit}\n")
    print("| round | layer | configuration | unprimed tuner | primed tuner | isolated |")
    print("|---|---|---|---|---|---|")
    for index in range(args.rounds):
        for name in layers:
            found = one_round(problems[name], policy, rng)
            rounds.append({"round": index, "layer": name, **found})
            for config in sorted(found["isolated"], key=lambda n: found["isolated"][n])[:3]:
                print(f"| {index} | {name} | {config} | {found['unprimed'][config]:.3f} | "
                      f"{found['primed'][config]:.3f} | {found['isolated'][config]:.3f} |",
                      flush=True)
    result = summary(rounds)
    print()
    for label, s in result.items():
        print(f"{label} tuner: median |log(tuner / isolated)| {s['median_gap']:.3f}, pick is "
              f"the best alone in {100 * s['pick_is_best']:.0f}% of {len(rounds)}, worst "
              f"regret against the isolated times {100 * s['pick_regret_max']:.1f}%")
    if args.out:
        args.out.write_text(json.dumps({"model": args.model, "batch": args.batch,
                                        "date": date.today().isoformat(), "commit": commit,
                                        "rounds": rounds,
                                        "summary": result}, indent=2))


if __name__ == "__main__":
    main()
