"""How the cost model's ranking of a held-out network grows with its training data: a
learning curve over sets of bench_gpu.py results (issue 11: is the model short of data?).

Usage: python benchmarks/model_curve.py --held-out resnet50 --results bench_fp32.json \
           [bench_tf32.json ...] --add bench_small.json --add bench_small_tf32.json \
           [--seeds 0 1 2]
The held-out network's layers (in `--results`) are ranked by tuner.model fitted on: the other
networks of `--results`, then those plus the first `--add` set, then plus the next, and so on
(a problem of the held-out network is never trained on, whichever file holds it). Prints one
line per training set: its problems, and top-1 within 10% / top-3 hit (bench_model.py's
scores) per seed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_model import (  # noqa: E402
    by_model,
    from_results,
    held_out_layers,
    score,
    training_rows,
)
from tuner import model as M  # noqa: E402


def curve(held_out: str, base: Sequence[Path], additions: Sequence[Sequence[Path]],
          seeds: Sequence[int]) -> list[tuple[int, list[tuple[int, int]], int]]:
    """Per training set (the base's other networks, then each addition on top): (its
    problems, (top-1, top-3) per seed, the held-out layers scored)."""
    samples, problems, _ = from_results(base)
    held = problems[held_out]
    layers = held_out_layers(samples, held)
    train = training_rows(samples, held)
    out = []
    for extra in [[], *additions]:
        if extra:
            train = train + training_rows(from_results(extra)[0], held)
        scores = []
        for seed in seeds:
            model = M.fit(train, seed=seed)
            assert model is not None, "too few training rows"
            found = score([by_model(model, t) for t in layers], layers)
            scores.append((found.top1, found.top3))
        out.append((len({s.problem for s in train}), scores, len(layers)))
    return out


def main() -> None:
    """Print the curve."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--held-out", required=True)
    parser.add_argument("--results", type=Path, nargs="+", required=True)
    parser.add_argument("--add", type=Path, nargs="+", action="append", default=[])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    names = ["the other networks of --results",
             *(f"+ {', '.join(p.name for p in group)}" for group in args.add)]
    print(f"| trained on | problems | {args.held_out}: top-1 within 10% / top-3 hit, "
          f"seeds {' '.join(map(str, args.seeds))} |\n|---|---|---|")
    for name, (count, scores, layers) in zip(
            names, curve(args.held_out, args.results, args.add, args.seeds), strict=True):
        cells = ", ".join(f"{t1}/{t3}" for t1, t3 in scores)
        print(f"| {name} | {count} | {cells} (of {layers}) |", flush=True)


if __name__ == "__main__":
    main()
