"""The CPU winograd against im2col_gemm and PyTorch's F.conv2d on a network's 3x3 layers.

Usage: python benchmarks/bench_cpu_winograd.py [--networks resnet50:1,vgg16:1]
           [--before REV] [--rounds 7] [--reps 5] [--out f.json]

Every 3x3, stride-1, ungrouped layer of each network, float32. Per layer, in rounds (each
variant once a round, in turn, so that a change of this machine's speed moves them all
alike): winograd F(2x2) and F(4x4), im2col_gemm, and F.conv2d (PyTorch, oneDNN) on inputs
of the same shape; each a median of `--reps` calls, then the median over rounds. F.conv2d
runs in a child process, with a pause before and after it: in one process, torch's spinning
OpenMP threads and NumPy's BLAS threads slow each other down (BENCHMARKS.md, "Our CPU work
on torch's threads"), which made F.conv2d up to 3x slower at batch 8 here. `--before REV` adds
the CPU winograd of another commit (algorithms/cpu/winograd.py as it was there), run in the
same rounds. Each winograd variant's relative error against the float64 reference is given
next to its time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import date
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
import torch.nn.functional as F

from algorithms.base import Algorithm
from algorithms.problem import ConvProblem
from algorithms.reference import reference_conv, relative_error
from algorithms.registry import get_algorithm
from benchmarks.bench_phases import median_ms
from benchmarks.children import LineChild
from tuner.devices import identify
from tuner.networks import network_problems

ROOT = Path(__file__).resolve().parents[1]
#: Seconds between our NumPy work and the child's F.conv2d, either way: OpenBLAS's threads
#: spin for a while after a GEMM before they sleep, and torch's OpenMP threads after an
#: operator (with 2 cores, one spinning thread takes half of the machine).
PAUSE_S = 0.3


def winograd_at(rev: str) -> Algorithm:
    """The CPU winograd algorithm as it was at commit `rev`."""
    source = subprocess.run(["git", "show", f"{rev}:algorithms/cpu/winograd.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "winograd_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("winograd_before", path)
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    algorithm: Algorithm = module.WinogradConv()
    return algorithm


def layers(spec: str) -> list[tuple[str, ConvProblem]]:
    """The 3x3 stride-1 ungrouped layers of "net:batch,net:batch"."""
    found = []
    for item in spec.split(","):
        net, _, batch = item.partition(":")
        for layer, problem in network_problems(net, int(batch or 1)):
            if ((problem.r, problem.s) == (3, 3) and problem.stride == (1, 1)
                    and problem.dilation == (1, 1) and problem.groups == 1):
                found.append((f"{net}.{layer.name}", problem))
    return found


def measure(problem: ConvProblem, variants: dict[str, tuple[Algorithm, str]],
            torch_child: LineChild, rounds: int, reps: int) -> dict[str, Any]:
    """Times (ms) and winograd errors of every variant, plus F.conv2d (in `torch_child`),
    on one problem."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(problem.input_shape).astype(np.float32)
    w = rng.standard_normal(problem.filter_shape).astype(np.float32)
    ref = reference_conv(x, w, problem)
    calls: dict[str, Callable[[], Any]] = {}
    errors: dict[str, float] = {}
    for name, (algorithm, config) in variants.items():
        workspace = np.zeros(algorithm.workspace_bytes(problem, config), np.uint8)
        y = np.empty(problem.output_shape, np.float32)

        def call(algorithm: Algorithm = algorithm, config: str = config,
                 workspace: np.ndarray = workspace, y: np.ndarray = y) -> None:
            algorithm.run(x, w, y, workspace, problem, config)
        call()
        calls[name] = call
        if "winograd" in name:
            errors[name] = relative_error(y, ref)
    samples: dict[str, list[float]] = {name: [] for name in [*calls, "F.conv2d"]}
    request = json.dumps({"x": problem.input_shape, "w": problem.filter_shape,
                          "pad": problem.pad, "reps": reps})
    for _ in range(rounds):
        for name, timed in calls.items():
            samples[name].append(median_ms(timed, reps))
        time.sleep(PAUSE_S)  # let NumPy's BLAS threads stop spinning
        samples["F.conv2d"].append(float(torch_child.ask(request)))
        time.sleep(PAUSE_S)  # and the child's OpenMP threads
    return {"ms": {name: statistics.median(v) for name, v in samples.items()},
            "rel_error": errors}


def child() -> None:
    """Answer each request line (shapes, padding, reps) with F.conv2d's median ms per call
    on fresh random tensors of those shapes."""
    print("ready", flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        call = partial(F.conv2d, torch.randn(*ask["x"]), torch.randn(*ask["w"]),
                       padding=tuple(ask["pad"]))
        print(median_ms(call, ask["reps"]), flush=True)


def main() -> None:
    """Measure and print a Markdown table."""
    if sys.argv[1:] == ["--child"]:
        child()
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--networks", default="resnet50:1,vgg16:1")
    parser.add_argument("--before", default=None, help="also time winograd at this commit")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    winograd = get_algorithm("cpu", "winograd")
    variants: dict[str, tuple[Algorithm, str]] = {}
    if args.before:
        old = winograd_at(args.before)
        variants |= {f"winograd {c} before": (old, c) for c in ("f2x2", "f4x4")}
    variants |= {f"winograd {c}": (winograd, c) for c in ("f2x2", "f4x4")}
    variants["im2col_gemm"] = (get_algorithm("cpu", "im2col_gemm"), "default")

    rows = []
    torch_child = LineChild([__file__, "--child"], "the F.conv2d child")
    try:
        for name, problem in layers(args.networks):
            result = measure(problem, variants, torch_child, args.rounds, args.reps)
            rows.append({"layer": name, "problem": problem.describe(), **result})
            print(name, {k: round(v, 3) for k, v in result["ms"].items()}, flush=True)
    finally:
        torch_child.close()

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True, check=False).stdout.strip()
    report = {"date": date.today().isoformat(), "device": identify("cpu").info,
              "commit": commit + ("+uncommitted" if dirty else ""), "before": args.before,
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "rounds": args.rounds, "reps": args.reps, "layers": rows}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))

    names = list(rows[0]["ms"]) if rows else []
    print(f"\n{report['date']}, {report['device'].get('name', 'cpu')}, {report['commit']}; "
          f"ms per call, median of {args.rounds} rounds of {args.reps}")
    print("| layer | " + " | ".join(names) + " | best winograd's time / F.conv2d's |")
    print("|---|" + "---|" * (len(names) + 1))
    for row in rows:
        ms = row["ms"]
        best = min(v for k, v in ms.items() if "winograd" in k and "before" not in k)
        cells = " | ".join(f"{ms[n]:.3f}" for n in names)
        print(f"| {row['layer']} | {cells} | {best / ms['F.conv2d']:.2f} |")
    for key in names:
        if "winograd" in key:
            worst = max(row["rel_error"][key] for row in rows)
            print(f"- {key}: largest relative error {worst:.2g}")


if __name__ == "__main__":
    main()
