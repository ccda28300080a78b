"""NumPy's BLAS against PyTorch's on the CPU GEMMs our convolutions run (algorithms/cpu/gemm.py).

Usage: python benchmarks/cpu_gemm_engines.py [--model resnet50] [--batch 1] [--rounds 15]

For each distinct layer of the network (forward), the GEMM that im2col_gemm runs per image,
(1, k, c*r*s) @ (1, c*r*s, out_h*out_w) in float32, timed with `np.matmul` and with
`torch.matmul` on the same memory (what algorithms.cpu.gemm routes work for torch tensors
to), in rounds (one sample of each per round, so that a drifting machine moves both alike).
Each sample is 5 back-to-back calls after one untimed call. Prints the medians and the
ratio; this process runs nothing else, so neither pool fights the other here.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import date
from functools import partial
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from tuner.networks import network_problems


def _sample_ms(fn: Callable[[], object]) -> float:
    fn()
    began = time.perf_counter()
    for _ in range(5):
        fn()
    return (time.perf_counter() - began) / 5 * 1e3


def main() -> None:
    """Time both engines per layer in rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    if args.rounds < 1 or args.batch < 1:
        parser.error("--rounds and --batch must be at least 1")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    print(f"{args.model} b{args.batch} layers' im2col GEMMs, float32, "
          f"{date.today().isoformat()}, commit {commit}, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), numpy {np.__version__}\n")
    print("| layer | GEMM (M x K x N) | NumPy ms | torch ms | torch over NumPy |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng()
    ratios = []
    for layer, problem in network_problems(args.model, args.batch):
        out_h, out_w = problem.out_hw
        m, k, n = problem.k, problem.c * problem.r * problem.s, out_h * out_w
        a = rng.standard_normal((1, m, k), dtype=np.float32)
        b = rng.standard_normal((1, k, n), dtype=np.float32)
        out = np.empty((1, m, n), np.float32)
        ta, tb, tout = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(out)
        engines = {"numpy": partial(np.matmul, a, b, out=out),
                   "torch": partial(torch.matmul, ta, tb, out=tout)}
        times: dict[str, list[float]] = {name: [] for name in engines}
        for _ in range(args.rounds):
            for name, gemm in engines.items():
                times[name].append(_sample_ms(gemm))
        mid = {name: statistics.median(values) for name, values in times.items()}
        ratios.append(mid["torch"] / mid["numpy"])
        print(f"| {layer.name} | {m} x {k} x {n} | {mid['numpy']:.3f} | {mid['torch']:.3f} | "
              f"{ratios[-1]:.2f} |", flush=True)
    print(f"\ntorch over NumPy: median {statistics.median(ratios):.2f}, "
          f"range {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} layers")


if __name__ == "__main__":
    main()
