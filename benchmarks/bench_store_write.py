"""What the tuner pays to store one layer's measurements (issue 11): one write of a layer's
rows, new and re-measured, into a store of a GPU run's size.

Usage: python benchmarks/bench_store_write.py --db URL [--rows 25] [--writes 20]
           [--from-results bench_fp32.json ...] [--out f.json]

A find stores the rows of each layer it measured in one write (tuner.tuning._save): the
generation bump, the device and problem keys, then an insert or an update per row. Each
write here stores `rows` configurations of a problem the store has not seen (as a new
layer's find does), then the same rows again (as a re-tune does), on a store filled, if
empty, from bench_gpu JSON files (bench_model_load.fill). Prints the median time per write
of each kind.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.problem import ConvProblem  # noqa: E402
from benchmarks.bench_model_load import fill  # noqa: E402
from db import find  # noqa: E402
from db.engine import open_store  # noqa: E402
from db.rows import MeasurementRow, utcnow  # noqa: E402


def layer_rows(count: int, scale: float) -> list[MeasurementRow]:
    """`count` measured configurations of one layer, times scaled by `scale`."""
    return [MeasurementRow(
        algorithm=f"algorithm{i % 7}", config=f"config{i}", impl_hash="bench_store_write",
        status="ok", time_ms=0.05 * (1 + i) * scale, spread_ms=0.001, min_ms=0.049, reps=20,
        workspace_bytes=1 << 20, max_error=1e-6, rel_error=1e-7, error=None,
        measured_at=utcnow(), tuner_version="bench") for i in range(count)]


def main() -> None:
    """Time the writes; print a table (JSON with --out)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the store (SQLAlchemy URL)")
    parser.add_argument("--rows", type=int, default=25, help="configurations of a layer")
    parser.add_argument("--writes", type=int, default=20, help="layers written")
    parser.add_argument("--from-results", type=Path, nargs="+", default=None,
                        help="fill an empty store at --db from these bench_gpu.py JSON files")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.from_results:
        fill(args.db, args.from_results)
    store = open_store(args.db)
    info = {"kind": "bench", "name": "bench_store_write", "arch": "none", "units": 1}
    with store.session() as session:
        start = find.generation(session=session)
    times: dict[str, list[float]] = {"new layer": [], "re-measured layer": []}
    for i in range(args.writes):
        key = ConvProblem(n=1, c=3 + start + i, h=7, w=7, k=5, r=3, s=3).key()
        for kind, scale in (("new layer", 1.0), ("re-measured layer", 1.1)):
            work = functools.partial(_save, key=key, rows=layer_rows(args.rows, scale),
                                     info=info)
            began = time.perf_counter()
            store.write(work)
            times[kind].append(time.perf_counter() - began)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT, check=False).stdout.strip()
    with store.session() as session:
        stored = find.count_timed_measurements(session=session, kind="bench")
    print(f"{date.today().isoformat()}, commit {commit}, {store.url.split(':')[0]}: "
          f"{args.writes} writes of {args.rows} rows each way ({stored} rows of this "
          "benchmark's device now stored)\n")
    print("| write | median ms | quartiles |\n|---|---|---|")
    for kind, values in times.items():
        q = statistics.quantiles(values, n=4)
        print(f"| {kind} | {statistics.median(values) * 1e3:.2f} | "
              f"{q[0] * 1e3:.2f}-{q[2] * 1e3:.2f} |")
    if args.out:
        args.out.write_text(json.dumps({
            "date": date.today().isoformat(), "commit": commit, "db": store.url.split(":")[0],
            "rows": args.rows, "writes": args.writes, "seconds": times}, indent=1))


def _save(session: Any, *, key: dict[str, Any], rows: list[MeasurementRow],
          info: dict[str, Any]) -> None:
    find.save_measurements(session=session, fingerprint="bench_store_write", device_info=info,
                           key=key, rows=rows)


if __name__ == "__main__":
    main()
