"""A training step of ResNet-50 with convtune's module against the same model in PyTorch.

Usage: python benchmarks/bench_train.py [--device cpu|cuda] [--batch N] [--size PIXELS]

One step is forward, cross-entropy loss, backward and an SGD update. Both sides start from
the same weights; convtune's side is `tuner.nn.convert(model)`, whose forward and both
gradients run tuned convtune algorithms (issue 13's training target). Tuning (all three
directions of every distinct convolution, into a throwaway database) happens in the first,
untimed step. TF32 is off on both sides. Prints the median step time of each and the ratio,
then each phase (forward with the loss, backward, update) timed alone, with its host time:
what a slow side loses where, and whether Python or the device holds it up. Then, per
distinct convolution of the model, each direction timed alone on both sides (PyTorch's
F.conv2d and torch.nn.grad against convtune's operators with the tuned answers of the
step), and the backward pass whole (PyTorch's convolution_backward computes dx and dw in
one call), summed over the model's convolutions: which layers and directions lose.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_overhead import per_call_us, resnet50  # noqa: E402
from tuner.nn import (  # noqa: E402
    conv2d,
    conv2d_backward_data,
    conv2d_backward_filter,
    convert,
)


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


DIRECTIONS = ("forward", "backward_data", "backward_filter")
#: Timed per layer: each direction, and the backward pass whole. In a training step PyTorch
#: computes dx and dw in one convolution_backward call, which shares work between them, so
#: the two directions timed apart overstate its backward; convtune runs two algorithms.
TIMED = (*DIRECTIONS, "backward")


def distinct_convolutions(model: nn.Module, images: torch.Tensor
                          ) -> list[tuple[str, nn.Conv2d, torch.Size, int]]:
    """(first name, module, input shape, count) of each distinct convolution a forward pass
    of `model` runs, in order."""
    first: dict[tuple[Any, ...], tuple[str, nn.Conv2d, torch.Size]] = {}
    counts: Counter[tuple[Any, ...]] = Counter()

    def record(name: str, conv: nn.Conv2d, shape: torch.Size) -> None:
        key = (tuple(shape), tuple(conv.weight.shape), conv.stride, conv.padding,
               conv.dilation, conv.groups)
        first.setdefault(key, (name, conv, shape))
        counts[key] += 1

    hooks = [module.register_forward_hook(
        lambda mod, inputs, _, name=name: record(name, mod, inputs[0].shape))
        for name, module in model.named_modules() if isinstance(module, nn.Conv2d)]
    with torch.no_grad():
        model(images)
    for hook in hooks:
        hook.remove()
    return [(*seen, counts[key]) for key, seen in first.items()]


def layer_ms(conv: nn.Conv2d, x_shape: torch.Size, db: str, sync: Callable[[], None],
             seconds: float) -> dict[str, tuple[float, float]]:
    """TIMED entry -> (PyTorch ms, convtune ms) per call of `conv` on a fresh input of
    `x_shape`, each timed alone (convtune through its operators, answers from `db`)."""
    if isinstance(conv.padding, str) or conv.padding_mode != "zeros":
        raise ValueError(f"{conv}: only explicit zero padding is timed layer by layer")
    x = torch.randn(x_shape, device=conv.weight.device)
    w = conv.weight.detach()
    stride, padding = list(conv.stride), [int(p) for p in conv.padding]
    dilation, groups = list(conv.dilation), conv.groups
    dy = torch.randn_like(F.conv2d(x, w, None, stride, padding, dilation, groups))
    geometry = (stride, padding, dilation, groups, "fp32", -1, db)
    sides: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "forward": (lambda: F.conv2d(x, w, None, stride, padding, dilation, groups),
                    lambda: conv2d(x, w, *geometry)),
        "backward_data": (
            lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, stride, padding, dilation,
                                               groups),
            lambda: conv2d_backward_data(dy, w, list(x.shape), *geometry)),
        "backward_filter": (
            lambda: torch.nn.grad.conv2d_weight(x, w.shape, dy, stride, padding, dilation,
                                                groups),
            lambda: conv2d_backward_filter(x, dy, list(w.shape), *geometry)),
        "backward": (
            lambda: torch.ops.aten.convolution_backward(
                dy, x, w, None, stride, padding, dilation, False, [0, 0], groups,
                [True, True, False]),
            lambda: (conv2d_backward_data(dy, w, list(x.shape), *geometry),
                     conv2d_backward_filter(x, dy, list(w.shape), *geometry))),
    }
    return {direction: (per_call_us(theirs, sync, seconds) / 1e3,
                        per_call_us(ours, sync, seconds) / 1e3)
            for direction, (theirs, ours) in sides.items()}


def print_layers(layers: list[tuple[str, torch.Size, int, dict[str, tuple[float, float]]]],
                 torch_ms: float, ours_ms: float, seconds: float) -> None:
    """The per-layer table and its sums against the steps."""
    print(f"\nConvolutions layer by layer (each distinct one timed alone for {seconds:g} s "
          "per direction and side; ms per call; x: its count in the model):\n")
    print("| layer | x | input | " + " | ".join(
        f"{d} PyTorch | {d} ours" for d in TIMED) + " |")
    print("|---" * (3 + 2 * len(TIMED)) + "|")
    sums = {d: [0.0, 0.0] for d in TIMED}
    for name, shape, count, times in layers:
        cells = []
        for d in TIMED:
            theirs, ours = times[d]
            sums[d][0] += count * theirs
            sums[d][1] += count * ours
            cells.append(f"{theirs:.3f} | {ours:.3f}")
        print(f"| {name} | {count} | {'x'.join(map(str, shape))} | " + " | ".join(cells) + " |")
    print("| all, each times its count | | | " + " | ".join(
        f"{sums[d][0]:.2f} | {sums[d][1]:.2f}" for d in TIMED) + " |")
    print("\n| summed over the model | PyTorch ms | ours ms | vs PyTorch |")
    print("|---|---|---|---|")
    for d in TIMED:
        print(f"| {d} | {sums[d][0]:.2f} | {sums[d][1]:.2f} | "
              f"{sums[d][0] / sums[d][1]:.2f}x speed |")
    theirs = sums["forward"][0] + sums["backward"][0]
    ours = sums["forward"][1] + sums["backward"][1]
    print(f"| forward and backward | {theirs:.2f} | {ours:.2f} | {theirs / ours:.2f}x speed |")
    print(f"\nConvolutions timed alone, forward and backward: {theirs:.1f} ms against "
          f"PyTorch's {torch_ms:.1f} ms step, {ours:.1f} ms against our {ours_ms:.1f} ms. "
          "Alone, each call finds its data in the caches, which a step does not.")


def main() -> None:
    """Time both sides; print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=None, help="default: 32 on a GPU, 2 on CPU")
    parser.add_argument("--size", type=int, default=None, help="image side (default 224)")
    parser.add_argument("--seconds", type=float, default=10.0, help="timing per side")
    parser.add_argument("--phase-steps", type=int, default=10,
                        help="steps timed phase by phase, per side (0: none)")
    parser.add_argument("--layer-seconds", type=float, default=0.2,
                        help="timing per direction and side of each distinct convolution, "
                             "timed alone (0: no per-layer table)")
    args = parser.parse_args()
    if min(args.seconds, args.layer_seconds) < 0 or args.phase_steps < 0:
        parser.error("--seconds, --layer-seconds and --phase-steps must be >= 0")
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
    layers = []
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{tmp}/train.db"
        convert(ours, db=db)
        step = step_fn(ours, images, labels)
        started = time.perf_counter()
        step()  # tunes forward, backward-data and backward-filter of every convolution
        sync()
        tuning_s = time.perf_counter() - started
        ours_ms = per_call_us(step, sync, args.seconds) / 1e3
        our_phases = phases_ms(ours, images, labels, sync, args.phase_steps)
        if args.layer_seconds:
            layers = [(name, shape, count, layer_ms(conv, shape, db, sync, args.layer_seconds))
                      for name, conv, shape, count in distinct_convolutions(reference, images)]

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
    if layers:
        print_layers(layers, torch_ms, ours_ms, args.layer_seconds)


if __name__ == "__main__":
    main()
