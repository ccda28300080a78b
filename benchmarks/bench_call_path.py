"""The host cost of each way of calling one convolution, timed interleaved (issue 9).

Usage: python benchmarks/bench_call_path.py [--device cpu|cuda] [--rounds N] [--out f.json]

On a problem whose work takes microseconds (n1 c4 4x4 -> k4 1x1, tuned first into a
throwaway database), each call path runs in bursts of back-to-back calls, one burst per path
per round, the paths interleaved round after round (A B C ... A B C ...), so that a noisy
machine's slow spells hit every path alike. Each path's time is the median over rounds of
its mean time per call in a burst (the device synchronised after each burst: on a GPU
the work is queued within the burst, and this much work is tiny). Paths: the algorithm
alone, a plan (also with every call the checked way: `Plan(..., direct=False)`),
`convolve`, the backward calls, the PyTorch module (inference and a
training step) and `F.conv2d`, with NumPy/CuPy arrays and with torch tensors; `convolve`
and the module also without `db`, as most callers use them: the default database, here a
throwaway one ($CONVTUNE_DB_URL unset and the data and cache directories pointed at a
temporary one for this process, so that the user's own database is never touched), which
starts as a copy of the tuned one: both ways run the same algorithm.
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
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.problem import ConvProblem  # noqa: E402
from db.location import adopt_database, default_url  # noqa: E402
from tuner.api import convolve, convolve_backward_data, convolve_backward_filter, plan  # noqa: E402
from tuner.nn import Conv2d  # noqa: E402
from tuner.plans import Plan, untracked  # noqa: E402

TINY = ConvProblem(n=1, c=4, h=4, w=4, k=4, r=1, s=1)
CALLS = 50  # per burst
PLAN_TORCH = "plan(x, w, out=y), torch tensors"


def interleaved_us(paths: dict[str, Callable[[], Any]], sync: Callable[[], None],
                   rounds: int) -> dict[str, float]:
    """Median over rounds of each path's mean host time per call in a burst (us)."""
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for fn in paths.values():  # warm-up: tuning, compiling, first allocations
        for _ in range(3):
            fn()
    sync()
    for _ in range(rounds):
        for name, fn in paths.items():
            start = time.perf_counter()
            for _ in range(CALLS):
                fn()
            sync()
            samples[name].append((time.perf_counter() - start) / CALLS * 1e6)
    return {name: statistics.median(times) for name, times in samples.items()}


def main() -> None:
    """Time every path; print Markdown, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    where = f"cuda:{device.index or 0}" if gpu else "cpu"
    db = f"sqlite:///{tempfile.mkdtemp()}/bench_call_path.db"
    homes = tempfile.mkdtemp()  # the default database's directories, for this process only
    os.environ.pop("CONVTUNE_DB_URL", None)
    os.environ["XDG_DATA_HOME"], os.environ["XDG_CACHE_HOME"] = f"{homes}/data", f"{homes}/cache"
    p = TINY
    x, w, y = (torch.randn(shape, device=device) for shape in p.operand_shapes)
    dy = torch.randn(p.output_shape, device=device)
    chosen = plan(p, where, db=db)
    # The default database starts as a copy of the tuned one, so that both ways of calling
    # run the same algorithm and differ only in how the database is found. Tuned apart (as
    # on the H200 of 2026-11-27), their picks among the tiny problem's near-equal
    # candidates could differ, and so could their host costs.
    adopt_database(*(Path(str(make_url(url).database)) for url in (db, default_url())))
    by_default = plan(p, where)
    picks = {"explicit db": f"{chosen.algorithm}/{chosen.config}",
             "default database": f"{by_default.algorithm}/{by_default.config}"}
    runtime = chosen._runtime
    checked = Plan(p, chosen.device, chosen.choice, chosen.implementation, runtime,
                   direct=False)  # every call the checked way (tuner.plans)
    xa, wa, ya = (runtime.adopt(untracked(a)) for a in (x, w, y))
    workspace = chosen.workspace()
    module = Conv2d(p.c, p.k, 1, bias=False, db=db).to(device)
    default_module = Conv2d(p.c, p.k, 1, bias=False).to(device)  # the default database
    xg = x.clone().requires_grad_()

    def inference(conv: Conv2d = module) -> None:
        with torch.no_grad():
            conv(x)

    paths: dict[str, Callable[[], Any]] = {
        "algorithm alone": lambda: chosen.implementation.run(xa, wa, ya, workspace, p,
                                                             chosen.config),
        "plan(x, w, out=y), backend arrays": lambda: chosen(xa, wa, out=ya),
        PLAN_TORCH: lambda: chosen(x, w, out=y),
        "plan(x, w, out=y), torch tensors, checked path": lambda: checked(x, w, out=y),
        "convolve(x, w), backend arrays": lambda: convolve(xa, wa, db=db),
        "convolve(x, w), torch tensors": lambda: convolve(x, w, db=db),
        "convolve(x, w), torch tensors, default database": lambda: convolve(x, w),
        "convolve_backward_data, torch": lambda: convolve_backward_data(
            dy, w, p.input_shape, db=db),
        "convolve_backward_filter, torch": lambda: convolve_backward_filter(
            x, dy, p.filter_shape, db=db),
        "Conv2d forward, no graph": inference,
        "Conv2d forward, no graph, default database": lambda: inference(default_module),
        "Conv2d training step (forward, dx, dw)": lambda: module(xg).backward(dy),
        "F.conv2d": lambda: F.conv2d(x, module.weight.detach()),
        "F.conv2d training step": lambda: F.conv2d(xg, module.weight).backward(dy),
    }
    results = interleaved_us(paths, sync, args.rounds)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False, cwd=ROOT).stdout.strip()
    name = torch.cuda.get_device_name(device) if gpu else "CPU"
    print(f"{date.today().isoformat()}, {name}, commit {commit}, torch {torch.__version__}; "
          f"{p.describe()} by {picks['explicit db']} (default database: "
          f"{picks['default database']}); median of {args.rounds} interleaved rounds of "
          f"{CALLS} calls\n")
    # Over the plan call in the same run: a machine that changes speed between runs moves
    # both alike, so before/after comparisons of two trees read this column (BENCHMARKS.md,
    # "A kept call skips its checks").
    base = results[PLAN_TORCH]
    print(f"| call path | us per call | over `{PLAN_TORCH}` |\n|---|---|---|")
    for path, us in results.items():
        print(f"| {path} | {us:.1f} | {us - base:+.1f} |")
    if args.out:
        args.out.write_text(json.dumps({
            "date": date.today().isoformat(), "device": name, "commit": commit,
            "torch": torch.__version__, "problem": p.describe(),
            "plan": picks["explicit db"], "default_plan": picks["default database"],
            "rounds": args.rounds,
            "us_per_call": results}, indent=2))


if __name__ == "__main__":
    main()
