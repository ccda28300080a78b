"""What a new process pays before its first answer: importing the tuner, a cached answer from
the store, the CLI's help, and a plan's first call, each in a fresh Python process.

Usage: python benchmarks/bench_startup.py [--device cpu|cuda:N] [--rounds 7] [--tree PATH ...]
           [--out startup.json]

Each `--tree` (default: this checkout) is a source tree the children import from
(PYTHONPATH and working directory), so that two commits can be timed side by side in one
run: the trees and the kinds of child take turns within every round, so that a change of
this machine's speed moves them alike. Reported per tree and child, median and minimum over
the rounds: the process's wall time (interpreter start-up included) and the seconds the
child measured itself from its first statement. The cached answer's store is made once per
tree in a temporary directory (one small problem tuned on `--device`); children run with
CONVTUNE_MODEL_DIR off, so none fits or loads a cost model. The plan's first call plans the
stored problem, runs it once on fresh random inputs and waits for the device: on a GPU that
includes CuPy's import, the CUDA context, and loading the pick's kernels (from the kernel
cache on disk where an earlier process built them: run `gpu_session.sh warm` first).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: The problem the cached answer asks for (small: tuning it for the store takes seconds).
PROBLEM = "ConvProblem(n=1, c=8, h=12, w=12, k=8, r=3, s=3, pad=(1, 1))"

#: Each child: a name, and the code it runs (DEVICE and URL are set before it); every child
#: prints its own seconds last.
CHILDREN: dict[str, str] = {
    "import tuner": "import tuner",
    "cached answer": (
        "from algorithms.problem import ConvProblem\n"
        "from tuner import find_best_algorithm\n"
        f"find_best_algorithm({PROBLEM}, DEVICE, db=URL, mode=MODE)"),
    "plan's first call": (
        "from algorithms.problem import ConvProblem\n"
        "from tuner import plan\n"
        "from tuner.devices import get_runtime\n"
        "import numpy as np\n"
        f"problem = {PROBLEM}\n"
        "runtime = get_runtime(DEVICE)\n"
        "rng = np.random.default_rng()\n"
        "x = runtime.random(problem.input_shape, problem.dtype, rng)\n"
        "w = runtime.random(problem.filter_shape, problem.dtype, rng)\n"
        "plan(problem, DEVICE, db=URL)(x, w)\n"
        "runtime.synchronize()"),
    "convtune --help": (
        "import contextlib, io, sys\n"
        "from tuner.cli import main\n"
        "sys.argv = ['convtune', '--help']\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main()"),
}


def child_code(body: str, url: str, device: str = "cpu", mode: str = "cached") -> str:
    """`body` timed from the child's first statement, its seconds printed last (`mode`: the
    cached answer's find mode)."""
    return ("import time\n_began = time.perf_counter()\n"
            f"URL, DEVICE = {url!r}, {device!r}\nMODE = {mode!r}\n{body}\n"
            "print(time.perf_counter() - _began)\n")


def run_child(tree: Path, code: str) -> tuple[float, float]:
    """(process wall seconds, the child's own seconds) of one child on `tree`."""
    # The tree first, then whatever the caller's path held (gpu_session.sh puts the wheels
    # it installs there: without them a child cannot import SQLAlchemy).
    path = os.pathsep.join(filter(None, (str(tree), os.environ.get("PYTHONPATH", ""))))
    env = {**os.environ, "PYTHONPATH": path, "CONVTUNE_MODEL_DIR": ""}
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"child failed on {tree}:\n{done.stderr[-2000:]}")
    return wall, float(done.stdout.split()[-1])


def make_store(tree: Path, folder: Path, device: str) -> str:
    """A SQLite store holding PROBLEM tuned on `device` by `tree`'s code."""
    url = f"sqlite:///{folder / 'startup.db'}"
    run_child(tree, child_code(CHILDREN["cached answer"], url, device, mode="auto"))
    return url


def measure(trees: list[Path], rounds: int, device: str = "cpu") -> list[dict[str, Any]]:
    """Every child on every tree, `rounds` times in turns; a row per (tree, child)."""
    with tempfile.TemporaryDirectory() as tmp:
        urls = {}
        for i, tree in enumerate(trees):
            folder = Path(tmp, str(i))
            folder.mkdir()
            urls[tree] = make_store(tree, folder, device)
        times: dict[tuple[Path, str], list[tuple[float, float]]] = {}
        for r in range(rounds):
            order = [(t, c) for t in trees for c in CHILDREN]
            for tree, name in order if r % 2 == 0 else reversed(order):
                times.setdefault((tree, name), []).append(
                    run_child(tree, child_code(CHILDREN[name], urls[tree], device)))
    rows = []
    for (tree, name), samples in times.items():
        walls, own = [s[0] for s in samples], [s[1] for s in samples]
        rows.append({"tree": str(tree), "child": name, "rounds": len(samples),
                     "wall_median_s": round(statistics.median(walls), 3),
                     "wall_min_s": round(min(walls), 3),
                     "own_median_s": round(statistics.median(own), 3),
                     "own_min_s": round(min(own), 3)})
    return rows


def main() -> None:
    """Time the children, print a table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tree", type=Path, action="append", default=None)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    missing = [t for t in trees if not (t / "tuner" / "__init__.py").is_file()]
    if missing:
        parser.error(f"not a convtune source tree: {missing[0]}")
    began = time.perf_counter()
    rows = measure(trees, args.rounds, args.device)
    report = {"date": date.today().isoformat(), "python": sys.version.split()[0],
              "device": args.device,
              "rounds": args.rounds, "seconds": round(time.perf_counter() - began, 1),
              "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    print(f"{report['date']}, {args.device}, Python {report['python']}, {args.rounds} rounds\n")
    print("| tree | child | process wall s, median (min) | its own s, median (min) |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['tree']} | {row['child']} | {row['wall_median_s']} ({row['wall_min_s']}) "
              f"| {row['own_median_s']} ({row['own_min_s']}) |")


if __name__ == "__main__":
    main()
