"""What a new process pays for the cost model before its first prediction (issue 11):
fitting it, against loading the fit an earlier process kept (tuner.model_files).

Usage: python benchmarks/bench_model_load.py --db URL [--kind cpu] [--runs 3] [--out f.json]

Each run starts two fresh Python processes on the store at URL with one empty model
directory: the first fits the model of device kind `kind` (and saves it), the second loads
it. Each process times its first `model_cache(store).model(kind)` call, the one a fast-mode
find makes before measuring anything (imports and opening the store are not timed). Fill a
store first, for instance with `benchmarks/bench_model.py --db URL` (CPU, CI-sized).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, sys, time
from db.engine import open_store
from tuner.model import model_cache
cache = model_cache(open_store(sys.argv[1]))
began = time.perf_counter()
model = cache.model(sys.argv[2])
print(json.dumps({"s": time.perf_counter() - began, "fits": cache.fits, "loads": cache.loads,
                  "rows": model.rows if model else 0,
                  "problems": model.problems if model else 0}))
"""


def first_model(url: str, kind: str, directory: str) -> dict[str, float]:
    """The child's timing of its first model() call, with models kept in `directory`."""
    env = {**os.environ, "CONVTUNE_MODEL_DIR": directory}
    done = subprocess.run([sys.executable, "-c", CHILD, url, kind], capture_output=True,
                          text=True, cwd=ROOT, env=env, check=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def main() -> None:
    """Time fit-then-load pairs and print a table (JSON with --out)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the store (SQLAlchemy URL)")
    parser.add_argument("--kind", default="cpu", help="device kind of the model")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as directory:
            fitted = first_model(args.db, args.kind, directory)
            loaded = first_model(args.db, args.kind, directory)
        if (fitted["fits"], loaded["loads"]) != (1, 1):
            raise SystemExit(f"expected a fit, then a load; got {fitted} and {loaded}")
        runs.append({"fit_s": fitted["s"], "load_s": loaded["s"]})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    report = {"date": date.today().isoformat(), "commit": commit, "kind": args.kind,
              "rows": fitted["rows"], "problems": fitted["problems"], "runs": runs}
    print(f"{report['date']}, commit {commit}: model of {args.kind}, {fitted['rows']} "
          f"measurements of {fitted['problems']} problems\n")
    print("| first model() of a process | median | runs |\n|---|---|---|")
    for key, label in (("fit_s", "fits (no saved model)"), ("load_s", "loads the saved fit")):
        values = [r[key] for r in runs]
        print(f"| {label} | {statistics.median(values):.3f} s | "
              f"{', '.join(f'{v:.3f}' for v in values)} |")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
