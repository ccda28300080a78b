"""Where the host time of convtune's calls goes, by Python function (issue 9, issue 13).

Usage: python benchmarks/profile_host.py [--device cpu|cuda] [--calls N] [--top N]

On issue 9's small problem (n1 c64 56x56 -> k64 3x3 p1), tuned first into a throwaway
database: a plan call with torch tensors, a cached `convolve()`, the PyTorch module's
inference forward, and its training step (forward and both gradients), each run `--calls`
times under cProfile after a warm-up. Prints, per case, the host time per call without the
profiler and the functions with the most own time per call under it. The profiler inflates
every Python call, so read the table for where the time goes, and the unprofiled number
for how much there is.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.problem import ConvProblem  # noqa: E402
from tuner.api import convolve, plan  # noqa: E402
from tuner.nn import Conv2d  # noqa: E402

SMALL = dict(n=1, c=64, h=56, w=56, k=64, r=3, s=3, pad=1)  # issue 9's small problem


def host_us(fn: Callable[[], Any], sync: Callable[[], None], calls: int) -> float:
    """Host time per call in microseconds: `calls` back to back, synchronised after."""
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    sync()
    return elapsed / calls * 1e6


def profile_rows(fn: Callable[[], Any], sync: Callable[[], None], calls: int,
                 top: int) -> list[tuple[str, float, float]]:
    """(function, own us per call, cumulative us per call) of the `top` by own time."""
    profiler = cProfile.Profile()
    sync()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    sync()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = []
    for (path, line, name), (_cc, _nc, own, cumulative, _callers) in stats.items():
        where = f"{Path(path).name}:{line}({name})" if line else name
        rows.append((where, own / calls * 1e6, cumulative / calls * 1e6))
    rows.sort(key=lambda row: row[1], reverse=True)
    return rows[:top]


def main() -> None:
    """Tune the small problem, then time and profile each case; print Markdown."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    problem = ConvProblem(**SMALL)  # type: ignore[arg-type]
    db = f"sqlite:///{tempfile.mkdtemp()}/profile_host.db"
    x = torch.randn(problem.input_shape, device=device)
    w = torch.randn(problem.filter_shape, device=device)
    y = torch.empty(problem.output_shape, device=device)
    where = "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"
    chosen = plan(problem, where, db=db)
    module = Conv2d(problem.c, problem.k, 3, padding=1, bias=False, db=db).to(device)
    xg = x.clone().requires_grad_()
    dy = torch.randn(problem.output_shape, device=device)

    def inference() -> None:
        with torch.no_grad():
            module(x)

    cases: dict[str, Callable[[], Any]] = {
        "plan(x, w, out=y), torch tensors": lambda: chosen(x, w, out=y),
        "convolve(x, w, padding=1), torch tensors": lambda: convolve(x, w, padding=1, db=db),
        "module forward, no graph": inference,
        "module training step (forward, dx, dw)": lambda: module(xg).backward(dy),
        "F.conv2d training step (reference)":
            lambda: torch.nn.functional.conv2d(xg, module.weight, padding=1).backward(dy),
    }
    print(f"{problem.describe()} on {where}; plan: {chosen.algorithm}/{chosen.config}; "
          f"torch {torch.__version__}\n")
    for name, fn in cases.items():
        for _ in range(20):  # tunes the backward directions on the first training step
            fn()
        sync()
        unprofiled = min(host_us(fn, sync, args.calls) for _ in range(3))
        print(f"### {name}: {unprofiled:.1f} us host per call (best of 3 x {args.calls})\n")
        print("| function | own us/call (profiled) | cumulative us/call |\n|---|---|---|")
        for where_, own, cumulative in profile_rows(fn, sync, args.calls, args.top):
            print(f"| {where_} | {own:.1f} | {cumulative:.1f} |")
        print()


if __name__ == "__main__":
    main()
