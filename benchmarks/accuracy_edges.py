"""Errors the tuner's verification does not see: each CPU algorithm on data unlike its own.

Usage: python benchmarks/accuracy_edges.py [--seed 0] [--out accuracy_edges.json]

The tuner verifies every candidate on fresh standard-normal data by one relative error over
the whole output (||y - ref|| / ||ref|| against float64: algorithms/reference.py). Three
kinds of data a model can produce, every CPU algorithm and configuration in float32, each
against the float64 reference of the same inputs (README.md, "What verification bounds"):
- spikes: N(0,1) activations with 0.1% of elements multiplied by A; the error over the
  outputs whose 3x3 window holds no spike (in any channel), beside the whole tensor's;
- flat: integer images at a level L plus a small integer texture, under Sobel filters / 8
  (exactly representable, weights summing to zero), pad 0;
- non-finite: one NaN or +inf in x; how many outputs come out non-finite, against the
  reference's count and PyTorch's CPU conv2d (where torch is installed).
Prints Markdown tables; JSON with --out. CPU only: no speed is measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.problem import ConvProblem  # noqa: E402
from algorithms.reference import reference, relative_error  # noqa: E402
from algorithms.registry import algorithms_for  # noqa: E402

SPIKES = (1e2, 1e3, 1e4, 1e6)
LEVELS = (3e4, 6e4)


def runs(problem: ConvProblem, x: np.ndarray, w: np.ndarray
         ) -> Iterator[tuple[str, np.ndarray]]:
    """("algorithm/config", output) of every CPU configuration that serves `problem`."""
    for algorithm in algorithms_for("cpu"):
        if not algorithm.supports(problem):
            continue
        for config in algorithm.configs(problem):
            nbytes = algorithm.workspace_bytes(problem, config)
            workspace = np.zeros(nbytes, np.uint8) if nbytes else None
            y = np.full(problem.output_shape, np.nan, np.float32)
            with np.errstate(all="ignore"):
                algorithm.run(x, w, y, workspace, problem, config)
            yield f"{algorithm.name}/{config}", y


def spikes(rng: np.random.Generator) -> list[dict[str, Any]]:
    """Errors on the outputs no spike reaches, and over the whole tensor, per spike size."""
    from scipy.ndimage import binary_dilation

    problem = ConvProblem(n=2, c=8, h=32, w=32, k=8, r=3, s=3, pad=1)
    rows = []
    for size in SPIKES:
        x = rng.standard_normal(problem.input_shape).astype(np.float32)
        w = rng.standard_normal(problem.filter_shape).astype(np.float32)
        hit = rng.random(problem.input_shape) < 1e-3
        x[hit] *= np.float32(size)
        reached = binary_dilation(hit.any(1), structure=np.ones((1, 3, 3), bool))
        clean = np.repeat(~reached[:, None], problem.k, axis=1)
        ref = reference(x, w, problem)
        for name, y in runs(problem, x, w):
            d = y.astype(np.float64) - ref
            rows.append({"spike": size, "config": name,
                         "clean": float(np.linalg.norm(d[clean]) / np.linalg.norm(ref[clean])),
                         "whole": relative_error(y, ref),
                         "clean_share": float(clean.mean())})
    return rows


def flat(rng: np.random.Generator) -> list[dict[str, Any]]:
    """Errors of Sobel / 8 on integer images at each level (float32 holds them exactly)."""
    problem = ConvProblem(n=1, c=1, h=64, w=64, k=2, r=3, s=3, pad=0)
    sobel = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]], np.float64) / 8
    w = np.stack([sobel, sobel.T])[:, None].astype(np.float32)
    rows = []
    for level in LEVELS:
        x = (level + rng.integers(-8, 9, problem.input_shape)).astype(np.float32)
        ref = reference(x, w, problem)
        rows += [{"level": level, "config": name, "error": relative_error(y, ref)}
                 for name, y in runs(problem, x, w)]
    return rows


def non_finite(rng: np.random.Generator) -> list[dict[str, Any]]:
    """Non-finite outputs from one NaN or +inf in x, against the reference's and torch's."""
    problem = ConvProblem(n=2, c=4, h=16, w=16, k=4, r=3, s=3, pad=1)
    rows = []
    for label, value in (("NaN", np.nan), ("+inf", np.inf)):
        x = rng.standard_normal(problem.input_shape).astype(np.float32)
        w = rng.standard_normal(problem.filter_shape).astype(np.float32)
        x[0, 1, 7, 7] = value
        with np.errstate(invalid="ignore"):
            ref = reference(x, w, problem)
        torch_count = _torch_non_finite(x, w)
        for name, y in runs(problem, x, w):
            bad = ~np.isfinite(y)
            rows.append({"input": label, "config": name, "non_finite": int(bad.sum()),
                         "reference": int((~np.isfinite(ref)).sum()), "torch": torch_count,
                         "finite_in_reference": int((bad & np.isfinite(ref)).sum())})
    return rows


def _torch_non_finite(x: np.ndarray, w: np.ndarray) -> int | None:
    try:
        import torch
    except ImportError:
        return None
    y = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1)
    return int((~torch.isfinite(y)).sum())


def main() -> None:
    """Measure the three kinds of data; print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    report = {"seed": args.seed, "spikes": spikes(rng), "flat": flat(rng),
              "non_finite": non_finite(rng)}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    configs = list(dict.fromkeys(r["config"] for r in report["spikes"]))
    print("| spikes x A: error on the outputs they miss (whole tensor) | "
          + " | ".join(f"A = {a:g}" for a in SPIKES) + " |")
    print("|---|" + "---|" * len(SPIKES))
    for config in configs:
        cells = [f"{r['clean']:.1e} ({r['whole']:.1e})" for r in report["spikes"]
                 if r["config"] == config]
        print(f"| {config} | " + " | ".join(cells) + " |")
    print("\n| Sobel / 8 on integer images | " + " | ".join(f"level {v:g}" for v in LEVELS)
          + " |")
    print("|---|" + "---|" * len(LEVELS))
    for config in dict.fromkeys(r["config"] for r in report["flat"]):
        cells = [f"{r['error']:.1e}" for r in report["flat"] if r["config"] == config]
        print(f"| {config} | " + " | ".join(cells) + " |")
    print("\n| one bad input in x (n2 c4 16x16) | NaN: non-finite outputs | +inf |")
    print("|---|---|---|")
    found = report["non_finite"]
    first = {r["input"]: r for r in found}
    print(f"| float64 reference / torch CPU | {first['NaN']['reference']} / "
          f"{first['NaN']['torch']} | {first['+inf']['reference']} / {first['+inf']['torch']} |")
    for config in dict.fromkeys(r["config"] for r in found):
        cells = [str(r["non_finite"]) for r in found if r["config"] == config]
        print(f"| {config} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
