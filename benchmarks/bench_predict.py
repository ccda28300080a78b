"""The cost model's prediction for one unseen layer, as a fast find asks it: host time.

Usage: python benchmarks/bench_predict.py --results bench_fp32.json [...] [--hold-out resnet50]
                                          [--rounds 7]

Fits tuner.model on the `--results` measurements of every network but the held-out one
(bench_model.py's leave-one-network-out split), then times `model.predict` on each held-out
layer's candidates, one call per layer as a find makes it, with the feature caches cleared
first (a new problem: what a fast find pays). Three variants of the host work, measured in
rounds in the same process (A B C A B C ...), so that a machine changing speed between
runs moves all three alike:
- `threadpool_limits`: the one-thread limit entered through threadpoolctl.threadpool_limits
  and each candidate asking its algorithm for the whole config list (the code before
  2026-11-27);
- `controller`: the kept ThreadpoolController (tuner.model.one_thread), the configs still
  per candidate;
- `shipped`: as the code runs now (configs once per algorithm and problem as well).
Prints the median and the spread over rounds of the mean ms per layer. The rankings are the
same in all three (checked).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from threadpoolctl import threadpool_limits

from benchmarks.bench_model import from_results
from tuner import features as F
from tuner import model as M
from tuner.features import Sample

VARIANTS = ("threadpool_limits", "controller", "shipped")
#: The shipped, cached lookup (variants swap F._offered out while they run), and the same
#: lookup uncached, as every candidate made it before.
_OFFERED = F._offered
_uncached_offered = _OFFERED.__wrapped__


@contextmanager
def variant(name: str) -> Iterator[None]:
    """The host work of `name` (VARIANTS) in place while the block runs."""
    saved_thread, saved_offered = M.one_thread, F._offered
    try:
        if name == "threadpool_limits":
            M.one_thread = lambda: threadpool_limits(1)  # type: ignore[assignment]
        if name in ("threadpool_limits", "controller"):
            F._offered = _uncached_offered  # type: ignore[assignment]
        yield
    finally:
        M.one_thread, F._offered = saved_thread, saved_offered


def clear_caches() -> None:
    """Forget every problem's features, as a process meeting new problems has none."""
    F.work_vector.cache_clear()
    _OFFERED.cache_clear()
    F._problem_vector.cache_clear()


def time_layers(predict: Callable[[list[Sample]], Any], layers: list[list[Sample]]) -> float:
    """Mean ms per layer of `predict`, one call per layer, caches cleared first."""
    clear_caches()
    started = time.perf_counter()
    for layer in layers:
        predict(layer)
    return (time.perf_counter() - started) * 1e3 / len(layers)


def main() -> None:
    """Fit without the held-out network, then time the variants in rounds; print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, nargs="+", required=True)
    parser.add_argument("--hold-out", default="resnet50")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    samples, problems, _info = from_results(args.results)
    if args.hold_out not in problems:
        parser.error(f"--hold-out: no network {args.hold_out!r} in the results "
                     f"({', '.join(problems)})")
    held = problems[args.hold_out]
    model = M.fit([s for s in samples if s.problem not in held], seed=0)
    if model is None:
        parser.error("too few measurements outside the held-out network to fit a model")
    per_problem: dict[Any, list[Sample]] = defaultdict(list)
    for s in samples:
        if s.problem in held:
            per_problem[s.problem].append(s)
    layers = [per_problem[p] for p in sorted(per_problem, key=repr)]

    rankings = {}
    for name in VARIANTS:
        with variant(name):
            clear_caches()
            rankings[name] = [[(p.algorithm, p.config, p.time_ms) for p in model.predict(x)]
                              for x in layers]
    assert all(r == rankings["shipped"] for r in rankings.values()), "variants disagree"

    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name in VARIANTS:
            with variant(name):
                times[name].append(time_layers(model.predict, layers))
    candidates = sum(map(len, layers)) / len(layers)
    print(f"{args.hold_out}: {len(layers)} layers, {candidates:.1f} candidates a layer, "
          f"{args.rounds} rounds\n")
    print("| variant | ms per layer, median | min - max over rounds |")
    print("|---|---|---|")
    for name in VARIANTS:
        t = times[name]
        print(f"| {name} | {statistics.median(t):.2f} | {min(t):.2f} - {max(t):.2f} |")


if __name__ == "__main__":
    main()
