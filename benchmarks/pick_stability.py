"""How stable the tuner's pick is: one problem tuned again and again, each time into a fresh
store, in one process, each tuning's pick and every candidate's time (issue 11: a pick
that changes from tuning to tuning is regret waiting to happen).

    python benchmarks/pick_stability.py [--device cpu] [--tunings 8] [--torch]
        [--problem n1,c64,h56,w56,k64,r3,s3,pad1] [--out r.json]

The problem defaults to issue 9's small problem (bench_host_path.SMALL), the one
bench_overhead.py tunes first.

--torch imports PyTorch first, as bench_overhead.py's process has it when it tunes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms.problem import ConvProblem
from benchmarks.bench_host_path import SMALL
from tuner import find_algorithms, find_best_algorithm


def parse_problem(text: str) -> ConvProblem:
    """`n1,c64,h56,...` (ConvProblem's fields, each a name and an int) as a problem."""
    fields: dict[str, Any] = {}
    for item in text.split(","):
        name = item.rstrip("0123456789")
        if not name or name == item:
            raise ValueError(f"problem field {item!r} is not a name followed by an int")
        fields[name] = int(item[len(name):])
    return ConvProblem(**fields)


def tune_once(problem: ConvProblem, device: str) -> dict[str, Any]:
    """One tuning into a fresh store: the pick and every usable candidate's time."""
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{tmp}/stability.db"
        best = find_best_algorithm(problem, device, db=db)
        rows = [r for r in find_algorithms(problem, device, db=db) if r.status == "ok"]
    return {"pick": f"{best.algorithm}/{best.config}", "note": rows[0].note if rows else None,
            "times": {f"{r.algorithm}/{r.config}": [r.time_ms, r.spread_ms, r.reps]
                      for r in rows}}


def main(argv: list[str] | None = None) -> None:
    """Tune, print one line per tuning and the picks' counts, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tunings", type=int, default=8)
    parser.add_argument("--problem", default=None,
                        help="n1,c64,h56,...: ConvProblem's fields (default: issue 9's small one)")
    parser.add_argument("--torch", action="store_true", help="import PyTorch first")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.tunings < 1:
        parser.error(f"--tunings must be at least 1, got {args.tunings}")
    try:
        problem = (ConvProblem(**SMALL) if args.problem is None  # type: ignore[arg-type]
                   else parse_problem(args.problem))
    except (ValueError, TypeError) as exc:
        parser.error(str(exc))
    if args.torch:
        import torch  # noqa: F401
    tunings = [tune_once(problem, args.device) for _ in range(args.tunings)]
    print(f"{date.today()}, {args.device}, {problem}, torch imported: {args.torch}")
    for i, tuning in enumerate(tunings):
        times = " ".join(f"{name} {t:.3f}±{spread:.3f} ({reps})"
                         for name, (t, spread, reps) in tuning["times"].items())
        print(f"{i}: pick {tuning['pick']} | {times}")
    counts = Counter(t["pick"] for t in tunings)
    print("picks:", ", ".join(f"{pick} x{n}" for pick, n in counts.most_common()))
    if args.out is not None:
        args.out.write_text(json.dumps({"problem": problem.describe(), "device": args.device,
                                        "torch": args.torch, "tunings": tunings}, indent=1))


if __name__ == "__main__":
    main()
