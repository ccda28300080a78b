"""Strided backward_data by stride phases against dy spread with zeros (algorithms/phases.py),
on the CPU backend, next to PyTorch's CPU `torch.nn.grad.conv2d_input` (issue 13).

Usage: python benchmarks/bench_phases.py [--model resnet50] [--batch 1] [--out r.json]

For each stride > 1 layer of the network, backward_data in float32: every configuration
of the CPU algorithms that compute it as a forward problem (implicit_gemm, fft) is timed
twice, in two child processes: as shipped (phases), and with the phases turned off so that
dy is spread with zeros (the code path before 49494ed, still used for dilation > 1). The
best configuration of each counts. PyTorch is timed in this process on the same shapes.
CPU numbers: they show the saved products turning into time on this machine, not what a
GPU gains.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ("implicit_gemm", "fft")


def median_ms(run: Callable[[], Any], reps: int) -> float:
    """The median wall time of `reps` runs of `run`, after one untimed warm-up run."""
    run()
    samples = []
    for _ in range(reps):
        began = time.perf_counter()
        run()
        samples.append(1e3 * (time.perf_counter() - began))
    return statistics.median(samples)


def child(model: str, batch: int, spread: bool, reps: int) -> dict[str, dict[str, float]]:
    """Layer -> algorithm -> best median ms (child process; `spread` turns the phases off)."""
    import algorithms.by_forward as by_forward
    from algorithms.registry import get_algorithm
    from tuner.networks import network_problems

    if spread:  # before anything is asked and memoised
        by_forward.phases = lambda problem: None  # type: ignore[assignment]
    rng = np.random.default_rng(0)
    out: dict[str, dict[str, float]] = {}
    for layer, forward in network_problems(model, batch):
        if forward.stride == (1, 1):
            continue
        problem = replace(forward, direction="backward_data")
        a_shape, b_shape, out_shape = problem.operand_shapes
        a = rng.standard_normal(a_shape).astype(np.float32)
        b = rng.standard_normal(b_shape).astype(np.float32)
        y = np.empty(out_shape, np.float32)
        out[layer.name] = {}
        for name in ALGORITHMS:
            algorithm = get_algorithm("cpu", name)
            times = []
            for config in algorithm.configs(problem):
                nbytes = algorithm.workspace_bytes(problem, config)
                workspace = np.empty(nbytes, np.uint8) if nbytes else None
                times.append(median_ms(functools.partial(
                    algorithm.run, a, b, y, workspace, problem, config), reps))
            out[layer.name][name] = min(times)
    return out


def torch_ms(model: str, batch: int, reps: int) -> dict[str, float]:
    """Layer -> PyTorch CPU conv2d_input median ms, float32."""
    import torch
    import torch.nn.grad

    from tuner.networks import network_problems

    out = {}
    for layer, p in network_problems(model, batch):
        if p.stride == (1, 1):
            continue
        dy = torch.randn(p.n, p.k, *p.out_hw)
        w = torch.randn(p.k, p.c // p.groups, p.r, p.s)
        out[layer.name] = median_ms(functools.partial(
            torch.nn.grad.conv2d_input, (p.n, p.c, p.h, p.w), w, dy, stride=p.stride,
            padding=p.pad, dilation=p.dilation, groups=p.groups), reps)
    return out


def main() -> None:
    """Time both paths in children, PyTorch here; print the table (JSON with --out)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", choices=["phases", "spread"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.model, args.batch, args.child == "spread", args.reps)))
        return
    runs = {}
    for mode in ("spread", "phases"):
        done = subprocess.run(
            [sys.executable, __file__, "--child", mode, "--model", args.model,
             "--batch", str(args.batch), "--reps", str(args.reps)],
            capture_output=True, text=True, cwd=ROOT, check=True)
        runs[mode] = json.loads(done.stdout.splitlines()[-1])
    reference = torch_ms(args.model, args.batch, args.reps)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT, check=False).stdout.strip()
    print(f"{date.today()}, commit {commit}, CPU, {args.model} batch {args.batch}, "
          "backward_data float32, median ms (best configuration)\n")
    print("| layer | algorithm | dy spread | phases | speed-up | PyTorch |")
    print("|---|---|---|---|---|---|")
    for layer, per in runs["phases"].items():
        for name, ms in per.items():
            before = runs["spread"][layer][name]
            print(f"| {layer} | {name} | {before:.2f} | {ms:.2f} | {before / ms:.2f}x | "
                  f"{reference[layer]:.2f} |")
    if args.out:
        args.out.write_text(json.dumps({"date": str(date.today()), "commit": commit,
                                        "model": args.model, "batch": args.batch,
                                        "runs": runs, "torch_ms": reference}, indent=2))


if __name__ == "__main__":
    main()
