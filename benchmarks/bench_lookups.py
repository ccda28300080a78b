"""Host time of the in-process lookups every cached call makes: an answer from the answer
cache, a kept call plan, an open store.

Usage: python benchmarks/bench_lookups.py [--rounds 7] [--number 20000] [--json OUT]

A tiny CPU problem is tuned into a fresh SQLite store; then each lookup is timed with
`timeit`, `--number` calls a sample, the least of `--rounds` samples (the least: the
lookups are a few hundred nanoseconds, and anything else the machine does only adds):
- `cached find`: `Service.best` of a problem whose answer is kept (what a cached
  `find_best_algorithm` costs past its argument checks);
- `call plan`: `Service.call_plan` of a kept call (what every repeated `convolve` and
  module call asks first);
- `open store`: `db.engine.opened_store` of the open store (what every call asks to find
  its Service).
Run it on two trees to compare them (same machine, back to back): the tables it measures
became least recently used on 2026-11-30, which moves a kept key on every hit.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import timeit
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms.problem import ConvProblem
from db.engine import open_store, opened_store
from tuner.service import Service

PROBLEM = ConvProblem(n=1, c=4, h=6, w=6, k=4, r=3, s=3, pad=1)


def measure(rounds: int, number: int) -> dict[str, float]:
    """Microseconds per call of each lookup (the least of `rounds` samples)."""
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/lookups.db"
        facade = Service(open_store(url), cache_check_s=3600)
        facade.best(PROBLEM, "cpu")  # tunes (its own write: that answer is not kept)
        facade.best(PROBLEM, "cpu")  # from the store, then kept
        plan = facade.plan(PROBLEM, "cpu")
        facade.remember_call("call", facade.answers.token(), plan)
        assert facade.call_plan("call") is plan and opened_store(url) is facade.store
        lookups: dict[str, Any] = {
            "cached find": lambda: facade.best(PROBLEM, "cpu"),
            "call plan": lambda: facade.call_plan("call"),
            "open store": lambda: opened_store(url),
        }
        return {name: min(timeit.repeat(call, number=number, repeat=rounds)) / number * 1e6
                for name, call in lookups.items()}


def main(argv: list[str] | None = None) -> int:
    """Print the table (and write JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.number < 1:
        parser.error("--rounds and --number must be positive")
    us = measure(args.rounds, args.number)
    print(f"| lookup ({platform.processor() or platform.machine()}) | us per call |")
    print("|---|---|")
    for name, value in us.items():
        print(f"| {name} | {value:.3f} |")
    if args.json is not None:
        args.json.write_text(json.dumps({"us_per_call": us, "rounds": args.rounds,
                                         "number": args.number}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
