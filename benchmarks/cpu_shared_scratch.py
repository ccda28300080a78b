"""A converted model on the CPU with one scratch per thread for all plans, or one per plan.

Usage: python benchmarks/cpu_shared_scratch.py [--batch 1] [--rounds 5] [--seconds 3]
                                               [--out r.json]

ResNet-50 (bench_overhead.py's, torchvision's architecture) forward passes, no grad, in one
process: `tuner.nn.convert(model)` with its CPU plans in the thread's one scratch (as
shipped, `CpuRuntime.shares_scratch`) and with a workspace each (as before), and the model
unconverted. Per round, in turn (so that this machine's drifting speed moves all alike):
- each model's forward pass, median over `--seconds`;
- each model's convolutions in the model's order, each call timed, summed (the time the
  layers take among each other, without the other operators), and each alone (repeated
  back to back, as the tuner and bench_overhead's "predicted" time them), and per layer
  the difference;
- for the ratio bench_overhead reports, "predicted": PyTorch's forward pass minus its own
  convolutions alone, plus ours alone.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import date
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
from torch import nn

from benchmarks.bench_overhead import conv_calls, resnet50
from tuner.devices import identify
from tuner.nn import convert
from tuner.plans import Plan

MODES = ("shared", "own")


def median_call_ms(fn: Callable[[], Any], seconds: float) -> float:
    """Median wall time of `fn` (ms) over calls for about `seconds`, after one untimed."""
    fn()
    times: list[float] = []
    began = time.perf_counter()
    while time.perf_counter() - began < seconds or len(times) < 3:
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def in_order_ms(calls: Sequence[tuple[nn.Module, torch.Tensor]], passes: int = 9
                ) -> np.ndarray:
    """The convolutions called in the model's order, `passes` times: each call's median
    over the passes (ms)."""
    times = np.zeros((passes, len(calls)))
    for p in range(passes):
        for i, (module, x) in enumerate(calls):
            start = time.perf_counter()
            module(x)
            times[p, i] = time.perf_counter() - start
    return np.median(times, axis=0) * 1e3


def alone_ms(calls: Sequence[tuple[nn.Module, torch.Tensor]], reps: int = 9) -> np.ndarray:
    """Each convolution called `reps` times back to back: each one's median (ms)."""
    each = []
    for module, x in calls:
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            module(x)
            times.append(time.perf_counter() - start)
        each.append(statistics.median(times))
    return np.array(each) * 1e3


def describe(module: nn.Module, x: torch.Tensor) -> str:
    """"c64 56x56 -> k64 3x3 s1" for a convolution and its input."""
    assert isinstance(module, nn.Conv2d)
    (r, s), (stride, _) = module.kernel_size, module.stride
    return (f"c{x.shape[1]} {x.shape[2]}x{x.shape[3]} -> k{module.out_channels} {r}x{s} "
            f"s{stride}")


def set_mode(plans: list[Plan], mode: str) -> None:
    """Every plan in the thread's scratch ("shared") or in a workspace of its own."""
    for chosen in plans:
        chosen._shares_scratch = mode == "shared"


def main() -> None:
    """Tune, time in rounds, print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.batch < 1 or args.rounds < 1 or args.seconds <= 0:
        parser.error("--batch, --rounds and --seconds must be positive")

    torch.manual_seed(0)
    image = torch.randn(args.batch, 3, 224, 224)
    reference = resnet50().eval()
    converted = resnet50().eval()
    converted.load_state_dict(reference.state_dict())
    rounds: dict[str, list[float]] = {}
    layers: dict[str, list[np.ndarray]] = {}  # per layer: in order minus alone, each round
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        convert(converted, db=f"sqlite:///{tmp}/store.db")
        ours = conv_calls(converted, image)  # tunes every convolution
        theirs = conv_calls(reference, image)
        # type(), not isinstance: that asks some lazy modules' objects for their class,
        # which warns.
        plans = [o for o in gc.get_objects() if type(o) is Plan]
        sides = {mode: (converted, ours) for mode in MODES} | {"pytorch": (reference, theirs)}
        for _ in range(args.rounds):
            for side, (model, calls) in sides.items():
                if side in MODES:
                    set_mode(plans, side)
                model(image)  # "own": each plan's workspace exists from here on
                forward = median_call_ms(partial(model, image), args.seconds)
                in_order, alone = in_order_ms(calls), alone_ms(calls)
                for key, value in ((f"model {side}", forward),
                                   (f"in order {side}", float(in_order.sum())),
                                   (f"alone {side}", float(alone.sum()))):
                    rounds.setdefault(key, []).append(value)
                layers.setdefault(side, []).append(in_order - alone)
            print({k: round(v[-1], 2) for k, v in rounds.items()}, flush=True)

    ms = {key: statistics.median(values) for key, values in rounds.items()}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=False).stdout.strip()
    report = {"date": date.today().isoformat(), "device": identify("cpu").info,
              "commit": commit + ("+uncommitted" if dirty else ""), "batch": args.batch,
              "plans": len(plans), "convolutions": len(ours), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "rounds": rounds, "median_ms": ms,
              "layers": [describe(m, x) for m, x in ours],
              "in_order_minus_alone_ms": {side: np.median(v, axis=0).tolist()
                                          for side, v in layers.items()}}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    print(f"\nResNet-50 b{args.batch} forward, CPU ({report['device'].get('name', 'cpu')}), "
          f"{report['date']}, {report['commit']}; ms, median of {args.rounds} rounds\n")
    print("| converted model's plans | forward pass | over PyTorch's | over predicted | "
          "convolutions in the model's order | each alone |")
    print("|---|---|---|---|---|---|")
    for mode in MODES:
        predicted = ms["model pytorch"] - ms["alone pytorch"] + ms[f"alone {mode}"]
        print(f"| {mode} | {ms[f'model {mode}']:.2f} | "
              f"{ms[f'model {mode}'] / ms['model pytorch']:.3f} | "
              f"{ms[f'model {mode}'] / predicted:.3f} | {ms[f'in order {mode}']:.2f} | "
              f"{ms[f'alone {mode}']:.2f} |")
    print(f"| PyTorch | {ms['model pytorch']:.2f} | 1 | | {ms['in order pytorch']:.2f} | "
          f"{ms['alone pytorch']:.2f} |")
    lost = report["in_order_minus_alone_ms"]
    print("\nThe layers that lose most in the model's order with a workspace each "
          "(ms in order minus alone, median of the rounds):\n")
    print("| # | layer | a workspace each | one scratch | PyTorch |")
    print("|---|---|---|---|---|")
    for i in np.argsort(lost["own"])[::-1][:8]:
        print(f"| {i} | {report['layers'][i]} | {lost['own'][i]:+.2f} | "
              f"{lost['shared'][i]:+.2f} | {lost['pytorch'][i]:+.2f} |")


if __name__ == "__main__":
    main()
