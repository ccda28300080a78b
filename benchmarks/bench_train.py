"""A training step of ResNet-50 with convtune's module against the same model in PyTorch.

Usage: python benchmarks/bench_train.py [--device cpu|cuda] [--batch N] [--size PIXELS]

One step is forward, cross-entropy loss, backward and an SGD update. Both sides start from
the same weights; convtune's side is `tuner.nn.convert(model)`, whose forward and both
gradients run tuned convtune algorithms (issue 13's training target). Tuning (all three
directions of every distinct convolution, into a throwaway database) happens in the first,
untimed step. TF32 is off on both sides. Prints the median step time of each and the ratio,
then each phase (forward with the loss, backward, update) timed alone, with its host time:
what a slow side loses where, and whether Python or the device holds it up.
"""

from __future__ import annotations

import argparse
import copy
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
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_overhead import per_call_us, resnet50  # noqa: E402
from tuner.nn import convert  # noqa: E402


def step_fn(model: nn.Module, images: torch.Tensor, labels: torch.Tensor
            ) -> Callable[[], None]:
    """One SGD training step of `model` on a fixed batch."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(images), labels).backward()
        optimizer.step()

    return step


PHASES = ("forward", "backward", "update")


def phases_ms(model: nn.Module, images: torch.Tensor, labels: torch.Tensor,
              sync: Callable[[], None], steps: int) -> dict[str, tuple[float, float]]:
    """Median (wall ms, host ms) of each phase of a step, a sync after each phase.

    Wall: from the phase's first call to the end of its work. Host: until its last call
    returns (the work is only enqueued on a GPU); host close to wall means the phase
    waits on Python, not on the device. The syncs remove the overlap between phases, so
    the phases add up to more than a step.
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    samples: dict[str, list[tuple[float, float]]] = {phase: [] for phase in PHASES}

    def timed(phase: str, fn: Callable[[], Any], keep: bool) -> Any:
        sync()
        start = time.perf_counter()
        out = fn()
        host = time.perf_counter() - start
        sync()
        if keep:
            samples[phase].append(((time.perf_counter() - start) * 1e3, host * 1e3))
        return out

    for i in range(steps + 1):  # the first step only warms up
        optimizer.zero_grad(set_to_none=True)
        loss = timed("forward", lambda: loss_fn(model(images), labels), i > 0)
        timed("backward", loss.backward, i > 0)
        timed("update", optimizer.step, i > 0)
    return {phase: (statistics.median(w for w, _ in got), statistics.median(h for _, h in got))
            for phase, got in samples.items()}


def main() -> None:
    """Time both sides; print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=None, help="default: 32 on a GPU, 2 on CPU")
    parser.add_argument("--size", type=int, default=None, help="image side (default 224)")
    parser.add_argument("--seconds", type=float, default=10.0, help="timing per side")
    parser.add_argument("--phase-steps", type=int, default=10,
                        help="steps timed phase by phase, per side (0: none)")
    args = parser.parse_args()
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    batch, size = args.batch or (32 if gpu else 2), args.size or 224
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False  # both sides FP32-accurate
    torch.backends.cuda.matmul.allow_tf32 = False
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    torch.manual_seed(0)
    images = torch.randn(batch, 3, size, size, device=device)
    labels = torch.randint(0, 1000, (batch,), device=device)
    reference = resnet50().to(device).train()
    ours = copy.deepcopy(reference)

    torch_ms = per_call_us(step_fn(reference, images, labels), sync, args.seconds) / 1e3
    torch_phases = phases_ms(reference, images, labels, sync, args.phase_steps)
    with tempfile.TemporaryDirectory() as tmp:
        convert(ours, db=f"sqlite:///{tmp}/train.db")
        step = step_fn(ours, images, labels)
        started = time.perf_counter()
        step()  # tunes forward, backward-data and backward-filter of every convolution
        sync()
        tuning_s = time.perf_counter() - started
        ours_ms = per_call_us(step, sync, args.seconds) / 1e3
        our_phases = phases_ms(ours, images, labels, sync, args.phase_steps)

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False, cwd=ROOT).stdout.strip()
    name = torch.cuda.get_device_name(device) if gpu else "CPU"
    print(f"{date.today().isoformat()}, {name} ({torch.get_num_threads()} threads), "
          f"commit {commit}, torch {torch.__version__}\n")
    print("| ResNet-50 training step | batch | image | ms per step | vs PyTorch |")
    print("|---|---|---|---|---|")
    print(f"| PyTorch (TF32 off) | {batch} | {size} | {torch_ms:.1f} | 1.00 |")
    print(f"| `convert(model)` (convtune forward and gradients) | {batch} | {size} | "
          f"{ours_ms:.1f} | {torch_ms / ours_ms:.2f}x speed |")
    print(f"\nFirst step with tuning: {tuning_s:.1f} s.")
    if args.phase_steps:
        print(f"\nPhase by phase (median of {args.phase_steps} steps, a sync after each "
              "phase; host: until the phase's last call returned):\n")
        print("| phase | PyTorch ms (host) | `convert(model)` ms (host) | vs PyTorch |")
        print("|---|---|---|---|")
        for phase in PHASES:
            (tw, th), (ow, oh) = torch_phases[phase], our_phases[phase]
            print(f"| {phase} | {tw:.1f} ({th:.1f}) | {ow:.1f} ({oh:.1f}) | "
                  f"{tw / ow:.2f}x speed |")


if __name__ == "__main__":
    main()
