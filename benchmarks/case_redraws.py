"""One emulated case's error again and again, with fresh inputs: how far a configuration's
error spreads over draws, next to other algorithms' on the same problem (accuracy only, CPU).

A fuzz failure of a few percent over the tolerance may be a bug or an unlucky draw (a small
output whose float64 value cancels); this tells which, by the error's distribution.

Usage: python benchmarks/case_redraws.py --problem '{"n": 2, ...}' --draws 40 \
           --algorithms implicit_gemm_wgmma,implicit_gemm [--out f.json]
(`--problem` is a fuzz failure's "problem" object, as tests/cuda_emu/fuzz.py prints it.)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.cuda_emu.cases import run_cases  # noqa: E402

#: A case's message when a configuration's error is over the tolerance.
OVER = re.compile(r"^(\S+): relative error (\S+)$")


def summarize(errors: dict[str, list[float]], limit: float) -> list[dict[str, Any]]:
    """Per configuration: draws, median, 90th percentile, largest error, draws over `limit`."""
    rows = []
    for name, values in sorted(errors.items()):
        array = np.asarray(values)
        rows.append({"configuration": name, "draws": len(values),
                     "median": float(np.median(array)),
                     "p90": float(np.quantile(array, 0.9)), "max": float(array.max()),
                     "over": int((array > limit).sum())})
    return rows


def main() -> int:
    """Run the case `--draws` times per algorithm; print a table, optionally save JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", required=True, help="the case's problem, as JSON")
    parser.add_argument("--draws", type=int, default=40)
    parser.add_argument("--algorithms", required=True)
    parser.add_argument("--limit", type=float, default=1e-5, help="the tolerance to count")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    problem = json.loads(args.problem)
    names = args.algorithms.split(",")
    cases = [{"id": f"draw{i}-{name}", "algorithm": name, "problem": problem,
              "offsets": None, "inputs": None}
             for i in range(args.draws) for name in names]
    verdicts = run_cases(cases, workers=args.workers)
    errors: dict[str, list[float]] = {}
    failed = []
    for case_id, verdict in verdicts.items():
        name = case_id.split("-", 1)[1]
        # A draw over the tolerance ends its case at that configuration (cases.py): its
        # error is in the message, the configurations after it are not run on that draw.
        over = OVER.match(str(verdict.get("message", "")))
        if verdict.get("status") == "ok":
            for config, error in verdict["errors"].items():
                errors.setdefault(f"{name} {config}", []).append(float(error))
        elif over:
            errors.setdefault(f"{name} {over[1]}", []).append(float(over[2]))
        else:
            failed.append((case_id, verdict.get("status"), verdict.get("message")))
    rows = summarize(errors, args.limit)
    print(f"problem {json.dumps(problem)}; {args.draws} draws; count over {args.limit:g}")
    print("| configuration | draws | median | p90 | max | over |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['configuration']} | {row['draws']} | {row['median']:.2e} | "
              f"{row['p90']:.2e} | {row['max']:.2e} | {row['over']} |")
    for case_id, status, message in failed:
        print(f"{case_id}: {status}: {message}")
    if args.out:
        args.out.write_text(json.dumps({"problem": problem, "draws": args.draws,
                                        "limit": args.limit, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
