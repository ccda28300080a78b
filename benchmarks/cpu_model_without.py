"""A converted ResNet-50's CPU forward pass with and without one CPU algorithm, in rounds.

Usage: python benchmarks/cpu_model_without.py --without winograd [--batch 1] [--rounds 7]
           [--passes 5] [--out f.json]

The tuner measures CPU candidates on NumPy arrays, alone; a converted model runs its plans
among PyTorch's operators, with the GEMMs on torch's threads (algorithms/cpu/gemm.py).
Whether a pick that wins alone also wins there is what this measures: two converted copies
of one ResNet-50 (bench_overhead's; random weights), each tuned into a store of its own,
the second with `--without`'s algorithm refused while it tunes; then the two forward
passes and PyTorch's own, in turn, `--rounds` times (median of `--passes` passes each),
and every convolution whose pick differs, timed alone in both models the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from functools import partial
from pathlib import Path
from typing import cast
from unittest import mock

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch import nn

from algorithms.base import unsupported
from algorithms.registry import get_algorithm
from benchmarks.bench_overhead import conv_calls, resnet50
from benchmarks.bench_phases import median_ms
from tuner import candidates
from tuner.api import find_best_algorithm
from tuner.calls import problem_for
from tuner.devices import identify
from tuner.nn import Conv2d, convert


def converted(model: nn.Module, image: torch.Tensor, db: str,
              without: str | None) -> list[tuple[Conv2d, torch.Tensor]]:
    """Convert `model` into `db` and tune each convolution there, refusing `without`
    meanwhile; its convolutions with their inputs."""
    refused = contextlib.nullcontext() if without is None else mock.patch.object(
        get_algorithm("cpu", without), "_limits",
        lambda problem: unsupported("left out by cpu_model_without"))
    candidates.enumerate_candidates.cache_clear()  # it keeps each problem's supported list
    try:
        with refused:
            convert(model, db=db)
            calls = [(cast(Conv2d, m), x) for m, x in conv_calls(model, image)]  # tunes each
    finally:
        candidates.enumerate_candidates.cache_clear()
    return calls


def pick(module: Conv2d, x: torch.Tensor) -> str:
    """The algorithm and config module's plan runs for input x (its store's answer)."""
    w = module.weight
    problem = problem_for(tuple(x.shape), tuple(w.shape), stride=module.stride,
                          padding=module.padding, dilation=module.dilation,
                          groups=module.groups, dtype="float32", math="fp32",
                          direction="forward")
    best = find_best_algorithm(problem, device="cpu", db=module.db)
    return f"{best.algorithm}/{best.config}"


def main() -> None:
    """Measure and print a Markdown summary."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--without", required=True, help="a CPU algorithm's name")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    get_algorithm("cpu", args.without)  # a clear error for an unknown name

    torch.manual_seed(0)
    reference = resnet50().eval()
    image = torch.randn(args.batch, 3, 224, 224)
    tmp = tempfile.mkdtemp()
    models = {"all": copy.deepcopy(reference), "without": copy.deepcopy(reference)}
    convs = {"without": converted(models["without"], image, f"sqlite:///{tmp}/b.db",
                                  args.without),
             "all": converted(models["all"], image, f"sqlite:///{tmp}/a.db", None)}
    models["pytorch"] = reference
    picks = {name: [pick(m, x) for m, x in calls] for name, calls in convs.items()}
    differing = [(i, a, b) for i, (a, b) in enumerate(zip(picks["all"], picks["without"],
                                                          strict=True)) if a != b]
    samples: dict[str, list[float]] = {name: [] for name in models}
    layer_samples: dict[int, dict[str, list[float]]] = {
        i: {"all": [], "without": []} for i, _, _ in differing}
    with torch.no_grad():
        for model in models.values():  # warm: plans built, torch's primitives made
            model(image)
        for _ in range(args.rounds):
            for name, model in models.items():
                samples[name].append(median_ms(partial(model, image), args.passes))
            for i, _, _ in differing:
                for name in ("all", "without"):
                    module, x = convs[name][i]
                    layer_samples[i][name].append(median_ms(partial(module, x), args.passes))

    ms = {name: statistics.median(v) for name, v in samples.items()}
    layers = [{"index": i, "all": a, "without": b,
               "all_ms": statistics.median(layer_samples[i]["all"]),
               "without_ms": statistics.median(layer_samples[i]["without"])}
              for i, a, b in differing]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    report = {"date": date.today().isoformat(), "device": identify("cpu").info,
              "commit": commit, "torch": torch.__version__, "batch": args.batch,
              "without": args.without, "rounds": args.rounds, "passes": args.passes,
              "forward_ms": ms, "layers": layers}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    print(f"{report['date']}, {report['device'].get('name')}, {commit}, ResNet-50 "
          f"b{args.batch}, median of {args.rounds} rounds of {args.passes} passes\n")
    print(f"| forward pass | all algorithms | without {args.without} | PyTorch |")
    print("|---|---|---|---|")
    print(f"| ms | {ms['all']:.2f} | {ms['without']:.2f} | {ms['pytorch']:.2f} |\n")
    print("| convolution | pick | ms | pick without | ms |\n|---|---|---|---|---|")
    for row in layers:
        print(f"| {row['index']} | {row['all']} | {row['all_ms']:.3f} | {row['without']} | "
              f"{row['without_ms']:.3f} |")


if __name__ == "__main__":
    main()
