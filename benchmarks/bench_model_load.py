"""What a process pays for the cost model (issue 11): fitting it, against loading the fit
an earlier process kept (tuner.model_files), and asking again after a write.

Usage: python benchmarks/bench_model_load.py --db URL [--kind cpu] [--runs 3] [--out f.json]
           [--from-results bench_fp32.json ...]

Each run starts two fresh Python processes on the store at URL with one empty model
directory: the first fits the model of device kind `kind` (and saves it), the second loads
it. Each process times its first `model_cache(store).model(kind)` call, the one a fast-mode
find makes before measuring anything (imports and opening the store are not timed). The
second then counts one write (the generation bump every save of measurements makes) and
times `model(kind)` once more: what each layer of a fast tuning pays after the previous
layer's save, the store not having grown enough to refit. Fill a store first, with
`benchmarks/bench_model.py --db URL` (CPU, CI-sized), or here with --from-results: every
configuration `bench_gpu.py` measured, as one device's rows (the GPU stores' size).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, sys, time
from db import find
from db.engine import open_store
from tuner.model import model_cache
store = open_store(sys.argv[1])
cache = model_cache(store)
began = time.perf_counter()
model = cache.model(sys.argv[2])
first = time.perf_counter() - began
store.write(lambda session: find.lock_for_write(session=session))  # a write, no new rows
began = time.perf_counter()
again = cache.model(sys.argv[2])
print(json.dumps({"s": first, "after_write_s": time.perf_counter() - began,
                  "fits": cache.fits, "loads": cache.loads, "same": again is model,
                  "rows": model.rows if model else 0,
                  "problems": model.problems if model else 0}))
"""


def first_model(url: str, kind: str, directory: str) -> dict[str, float]:
    """The child's timing of its first model() call, with models kept in `directory`."""
    env = {**os.environ, "CONVTUNE_MODEL_DIR": directory}
    done = subprocess.run([sys.executable, "-c", CHILD, url, kind], capture_output=True,
                          text=True, cwd=ROOT, env=env, check=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def fill(url: str, paths: list[Path]) -> None:
    """Store every configuration the bench_gpu JSON files at `paths` measured, as rows of
    one device (their own), unless the store at `url` already has rows."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks.bench_model import from_results
    from db import find
    from db.engine import open_store
    from db.rows import MeasurementRow, utcnow

    store = open_store(url)
    with store.session() as session:
        if find.generation(session=session):
            return
    samples, _, info = from_results(paths)
    by_problem: dict[Any, list[MeasurementRow]] = {}
    for s in samples:
        by_problem.setdefault(s.problem, []).append(MeasurementRow(
            algorithm=s.algorithm, config=s.config, impl_hash="bench_gpu", status="ok",
            time_ms=s.time_ms, spread_ms=0.0, min_ms=None, reps=1,
            workspace_bytes=s.workspace_bytes, max_error=None, rel_error=None, error=None,
            measured_at=utcnow(), tuner_version="bench_gpu"))

    def save(session: Any, key: dict[str, Any], rows: list[MeasurementRow]) -> None:
        find.save_measurements(session=session, fingerprint=f"bench_gpu:{info.get('name')}",
                               device_info=info, key=key, rows=rows)

    for problem, rows in by_problem.items():
        store.write(functools.partial(save, key=problem.key(), rows=rows))


def main() -> None:
    """Time fit-then-load pairs and print a table (JSON with --out)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the store (SQLAlchemy URL)")
    parser.add_argument("--kind", default="cpu", help="device kind of the model")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--from-results", type=Path, nargs="+", default=None,
                        help="fill an empty store at --db from these bench_gpu.py JSON files")
    args = parser.parse_args()
    if args.from_results:
        fill(args.db, args.from_results)
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as directory:
            fitted = first_model(args.db, args.kind, directory)
            loaded = first_model(args.db, args.kind, directory)
        if (fitted["fits"], loaded["loads"], loaded["same"]) != (1, 1, True):
            raise SystemExit(f"expected a fit, then a load kept after a write; got {fitted} "
                             f"and {loaded}")
        runs.append({"fit_s": fitted["s"], "load_s": loaded["s"],
                     "after_write_s": loaded["after_write_s"]})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    report = {"date": date.today().isoformat(), "commit": commit, "kind": args.kind,
              "rows": fitted["rows"], "problems": fitted["problems"], "runs": runs}
    print(f"{report['date']}, commit {commit}: model of {args.kind}, {fitted['rows']} "
          f"measurements of {fitted['problems']} problems\n")
    print("| model() of a process | median | runs |\n|---|---|---|")
    for key, label in (("fit_s", "fits (no saved model)"), ("load_s", "loads the saved fit"),
                       ("after_write_s", "again, after a write (no refit due)")):
        values = [r[key] for r in runs]
        print(f"| {label} | {statistics.median(values):.3f} s | "
              f"{', '.join(f'{v:.3f}' for v in values)} |")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
