"""The cost of the call around the kernels: cached finds, plans, convolve(), a whole model.

Usage: python benchmarks/bench_overhead.py [--device cpu|cuda] [--batch N] [--out f.json]

Measured side by side in one run (issue 9's targets):
1. a cached `find_best_algorithm`, in process (microseconds per call);
2. `plan(x, w, out=y)`, host time per call (the work is enqueued, not waited for, on a GPU:
   in short bursts with the device synchronised between them, bench_host_path.host_us);
3. a cached `convolve()` per call, wall time including the work, against `F.conv2d`
   (PyTorch; cuDNN on a GPU with benchmark mode on and TF32 off) on the same arrays;
4. a ResNet-50 (torchvision's architecture, built here: torchvision is not always
   installable) forward pass after `tuner.nn.convert` against the same model in PyTorch.
   "predicted" is PyTorch's time minus its convolutions plus our plans' times for the same
   convolutions, each timed alone: the converted model should be within 5% of it. Two
   copies of the model (the same weights), timed in turns over MODEL_ROUNDS rounds.
Tuning happens first, into a throwaway database, and is not timed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import date
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.bench_host_path import host_us
from benchmarks.gpu_report import write_json
from tuner import ConvProblem, convolve, find_best_algorithm, plan
from tuner.nn import Conv2d, convert
from tuner.nn import conv2d as operator
from tuner.plans import Plan, untracked

SMALL = dict(n=1, c=64, h=56, w=56, k=64, r=3, s=3, pad=1)  # issue 9's small problem


def graph_us(fn: Callable[[], Any], calls: int = 20, replays: int = 50) -> float | str:
    """Device time per call of `fn` (us), `calls` of it captured in one torch CUDA graph and
    the graph replayed `replays` times between events: the work alone, without the host's
    enqueueing. A capture that fails gives its error (the rest of the run goes on)."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm on the capturing stream (plans: its workspace)
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / (calls * replays)
    except Exception as exc:  # a benchmark row, not the benchmark
        return f"{type(exc).__name__}: {exc}"


def per_call_us(fn: Callable[[], Any], sync: Callable[[], None], seconds: float) -> float:
    """Median over 5 rounds of the mean time per call, in microseconds (work included)."""
    fn()
    sync()
    rounds = []
    for _ in range(5):
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 5:
            fn()
            calls += 1
        sync()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
    return float(np.median(rounds))


def paired_difference_us(first: Callable[[], Any], second: Callable[[], Any],
                         sync: Callable[[], None], pairs: int = 300) -> float:
    """Median over `pairs` of (time of `first` - time of `second`), called back to back."""
    diffs = []
    for _ in range(pairs):
        start = time.perf_counter()
        first()
        sync()
        middle = time.perf_counter()
        second()
        sync()
        diffs.append((middle - start) - (time.perf_counter() - middle))
    return float(np.median(diffs)) * 1e6


def bottleneck(c_in: int, width: int, stride: int) -> nn.Module:
    """torchvision's ResNet-50 bottleneck (the 3x3 carries the stride, v1.5)."""
    out = width * 4

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(c_in, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
                nn.ReLU(), nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out),
            )
            self.skip: nn.Module = nn.Identity()
            if stride != 1 or c_in != out:
                self.skip = nn.Sequential(nn.Conv2d(c_in, out, 1, stride, bias=False),
                                          nn.BatchNorm2d(out))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.body(x) + self.skip(x))

    return Block()


def resnet50() -> nn.Module:
    """ResNet-50 as torchvision builds it (weights random: speed does not depend on them)."""
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                               nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    c = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(bottleneck(c, width, stride if i == 0 else 1))
            c = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 1000)]
    return nn.Sequential(*layers)


def conv_calls(model: nn.Module, x: torch.Tensor) -> list[tuple[nn.Conv2d, torch.Tensor]]:
    """Every convolution of one forward pass with the input it sees."""
    seen: list[tuple[nn.Conv2d, torch.Tensor]] = []
    hooks = [m.register_forward_pre_hook(lambda m, a: seen.append((m, a[0])))
             for m in model.modules() if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return seen


def convolutions_ms(calls: list[tuple[nn.Conv2d, torch.Tensor]],
                    sync: Callable[[], None], seconds: float = 0.2) -> float:
    """The convolutions of one forward pass, each timed alone for `seconds`, summed (ms)."""
    return sum(per_call_us(partial(m, a), sync, seconds) for m, a in calls) / 1e3


#: Rounds of the model rows. Each round times PyTorch's model, its convolutions alone, the
#: converted model and its convolutions alone, in turn, and each row is the median over the
#: rounds: timed one after the other, seconds apart, the rows drifted apart with the CPU
#: machines' speed (the converted model at 0.983x and 1.080x of predicted in two runs of
#: one commit, 2026-11-29, BENCHMARKS.md "One workspace per thread on the CPU").
MODEL_ROUNDS = 3


def model_rows(reference: nn.Module, converted: nn.Module, image: torch.Tensor,
               sync: Callable[[], None], seconds: float) -> dict[str, Any]:
    """The model rows: `reference` (PyTorch's) and `converted` (the same model after
    `tuner.nn.convert`) forward passes on `image`, and their convolutions each alone,
    in MODEL_ROUNDS rounds; "predicted" is PyTorch's forward pass minus its convolutions
    plus ours."""
    theirs = conv_calls(reference, image)
    ours = conv_calls(converted, image)  # the converted modules; tunes every convolution
    rounds: dict[str, list[float]] = {
        "torch_ms": [], "torch_convs_ms": [], "converted_ms": [], "our_convs_ms": []}
    for _ in range(MODEL_ROUNDS):
        for model, calls, whole, parts in (
            (reference, theirs, "torch_ms", "torch_convs_ms"),
            (converted, ours, "converted_ms", "our_convs_ms"),
        ):
            rounds[whole].append(
                per_call_us(partial(model, image), sync, seconds * 2 / MODEL_ROUNDS) / 1e3)
            rounds[parts].append(convolutions_ms(calls, sync, 0.2 / MODEL_ROUNDS))
    ms = {key: float(np.median(values)) for key, values in rounds.items()}
    predicted = ms["torch_ms"] - ms["torch_convs_ms"] + ms["our_convs_ms"]
    return {"batch": image.shape[0], "convolutions": len(theirs), **ms,
            "predicted_ms": predicted,
            "converted_over_predicted": ms["converted_ms"] / predicted,
            "converted_over_torch": ms["converted_ms"] / ms["torch_ms"], "rounds": rounds}


def main() -> None:
    """Run the benchmark; print Markdown, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=None, help="ResNet-50 batch (cpu 1, gpu 32)")
    parser.add_argument("--seconds", type=float, default=2.0, help="timing per measure")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    batch = args.batch or (32 if gpu else 1)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False  # both sides FP32-accurate
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    results: dict[str, Any] = {}

    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        db = f"sqlite:///{tmp}/bench.db"
        problem = ConvProblem(**SMALL)  # type: ignore[arg-type]
        where = "cuda:0" if gpu else "cpu"
        find_best_algorithm(problem, where, db=db)  # tunes
        find_best_algorithm(problem, where, db=db)  # stored, now kept in memory
        results["cached_find_us"] = per_call_us(
            lambda: find_best_algorithm(problem, where, db=db), lambda: None, args.seconds)

        x = torch.randn(problem.input_shape, device=device)
        w = torch.randn(problem.filter_shape, device=device)
        y = torch.empty(problem.output_shape, device=device)
        chosen = plan(problem, where, db=db)
        # The same plan taking every call the checked way (tuner.plans), in alternation
        # with the direct one: both ways' host time in the same run.
        checked = Plan(problem, chosen.device, chosen.choice, chosen.implementation,
                       chosen._runtime, direct=False)
        # Host time in short bursts with the device synchronised between them: blocks of 200
        # calls of a plan whose GPU work outlasts its enqueueing read the GPU's time (on the
        # H200 of 2026-11-27 the row equalled the synchronised wall time, twice), since
        # launches wait once enough work is queued.
        host: dict[str, list[float]] = {"plan_host_us": [], "plan_host_checked_us": []}
        for _ in range(5):
            for key, way in (("plan_host_us", chosen), ("plan_host_checked_us", checked)):
                host[key].append(host_us(partial(way, x, w, out=y), sync,
                                         budget_s=args.seconds / 20, rounds=9))
        results |= {key: float(np.median(times)) for key, times in host.items()}
        results["plan_us"] = per_call_us(lambda: chosen(x, w, out=y), sync, args.seconds)
        # The algorithm alone on the same buffers: what the plan adds is the difference.
        xa, wa, ya = (chosen._runtime.adopt(untracked(a)) for a in (x, w, y))
        workspace = chosen.workspace()
        results["kernel_us"] = per_call_us(
            lambda: chosen.implementation.run(xa, wa, ya, workspace, problem, chosen.config),
            sync, args.seconds)
        # Two blocks timed one after the other differ by more than the plan's cost (caches,
        # clocks, other processes): the plan's share is the median of paired differences,
        # each pair a plan call and a direct call back to back.
        results["plan_overhead_us"] = paired_difference_us(
            lambda: chosen(x, w, out=y),
            lambda: chosen.implementation.run(xa, wa, ya, workspace, problem, chosen.config),
            sync)
        # The host cost alone: a problem whose work takes microseconds, so the plan's own
        # share is not lost in the noise of milliseconds of work.
        tiny = ConvProblem(n=1, c=4, h=4, w=4, k=4, r=1, s=1)
        tiny_plan = plan(tiny, where, db=db)
        tx, tw, ty = (torch.randn(shape, device=device) for shape in tiny.operand_shapes)
        results["tiny_plan_torch_us"] = per_call_us(lambda: tiny_plan(tx, tw, out=ty), sync,
                                                    args.seconds)
        na, nb, ny = (tiny_plan._runtime.adopt(untracked(a)) for a in (tx, tw, ty))
        results["tiny_plan_native_us"] = per_call_us(lambda: tiny_plan(na, nb, out=ny), sync,
                                                     args.seconds)
        tiny_ws = tiny_plan.workspace()
        results["tiny_kernel_us"] = per_call_us(
            lambda: tiny_plan.implementation.run(na, nb, ny, tiny_ws, tiny, tiny_plan.config),
            sync, args.seconds)
        results["tiny_plan"] = f"{tiny_plan.algorithm}/{tiny_plan.config}"
        # The PyTorch module on the same tiny problem: inference (no graph), a forward pass
        # that records the graph, and the custom operator the module goes through only
        # when traced (it used to take every call), next to F.conv2d.
        module = Conv2d(tiny.c, tiny.k, 1, bias=False, db=db).to(device)
        results["tiny_module_us"] = per_call_us(partial(module, tx), sync, args.seconds)
        with torch.enable_grad():
            results["tiny_module_grad_us"] = per_call_us(partial(module, tx), sync,
                                                         args.seconds)
        weight = module.weight.detach()
        geometry = ([1, 1], [0, 0], [1, 1], 1, "fp32", -1, db)
        results["tiny_operator_us"] = per_call_us(
            lambda: operator(tx, weight, *geometry), sync, args.seconds)
        with torch.enable_grad():
            results["tiny_operator_grad_us"] = per_call_us(
                lambda: operator(tx, module.weight, *geometry), sync, args.seconds)
        results["tiny_conv2d_us"] = per_call_us(partial(F.conv2d, tx, weight), sync,
                                                args.seconds)
        # A training step's share: forward and both gradients, each way.
        with torch.enable_grad():
            xg = tx.clone().requires_grad_()
            dy = torch.randn(tiny.output_shape, device=device)
            results["tiny_module_train_us"] = per_call_us(
                lambda: module(xg).backward(dy), sync, args.seconds)
            results["tiny_operator_train_us"] = per_call_us(
                lambda: operator(xg, module.weight, *geometry).backward(dy), sync,
                args.seconds)
            results["tiny_conv2d_train_us"] = per_call_us(
                lambda: F.conv2d(xg, module.weight).backward(dy), sync, args.seconds)
        results["convolve_us"] = per_call_us(
            lambda: convolve(x, w, padding=1, db=db), sync, args.seconds)
        results["torch_conv2d_us"] = per_call_us(
            lambda: F.conv2d(x, w, padding=1), sync, args.seconds)
        results["plan_algorithm"] = f"{chosen.algorithm}/{chosen.config}"
        # The model below tunes every ResNet-50 convolution first: a run cut off there
        # still leaves these numbers (in --out too, rewritten after each section).
        print(json.dumps(results), file=sys.stderr, flush=True)
        if args.out:  # the results so far (a cut-off keeps the last)
            write_json(results, args.out, indent=2)

        reference = resnet50().to(device).eval()
        converted = resnet50().to(device).eval()
        converted.load_state_dict(reference.state_dict())
        convert(converted, db=db)
        image = torch.randn(batch, 3, 224, 224, device=device)
        results["resnet50"] = model_rows(reference, converted, image, sync, args.seconds)
        if args.out:  # the results so far (a cut-off keeps the last)
            write_json(results, args.out, indent=2)
        if gpu:
            # The small problem's work alone on each side: whether convolve() can reach
            # F.conv2d's time there is first a question of the kernels (the H200's host of
            # 2026-11-27 took 20 us for the whole F.conv2d call). Last, after every other
            # row: a capture that went wrong cannot spoil them.
            results["plan_graph_us"] = graph_us(lambda: chosen(x, w, out=y))
            results["torch_conv2d_graph_us"] = graph_us(lambda: F.conv2d(x, w, padding=1))

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    name = torch.cuda.get_device_name(device) if gpu else "CPU"
    results |= {"date": date.today().isoformat(), "device": name, "commit": commit,
                "torch": torch.__version__, "threads": torch.get_num_threads()}
    r = results["resnet50"]
    print(f"{results['date']}, {name} ({results['threads']} threads), commit {commit}, "
          f"torch {torch.__version__}\n")
    print("| measure | ours | PyTorch | target |\n|---|---|---|---|")
    print(f"| cached `find_best_algorithm` | {results['cached_find_us']:.1f} us | | <= 20 us |")
    print(f"| `plan(x, w, out=y)` host time per call (work included on the CPU) | "
          f"{results['plan_host_us']:.1f} us | | <= 15 us |")
    print(f"| the same, every call the checked way (`Plan(..., direct=False)`) | "
          f"{results['plan_host_checked_us']:.1f} us | | |")
    print(f"| `plan(x, w, out=y)` with its work ({results['plan_algorithm']}) | "
          f"{results['plan_us']:.1f} us | | |")
    print(f"| the same algorithm called directly | {results['kernel_us']:.1f} us | | |")
    print(f"| what the plan adds (median paired difference) | "
          f"{results['plan_overhead_us']:.1f} us | | <= 15 us |")
    print(f"| tiny problem n1 c4 4x4 k4 1x1 ({results['tiny_plan']}): plan with NumPy / torch "
          f"arrays, algorithm alone | {results['tiny_plan_native_us']:.1f} / "
          f"{results['tiny_plan_torch_us']:.1f} us, {results['tiny_kernel_us']:.1f} us | | "
          f"plan - algorithm <= 15 us |")
    print(f"| tiny problem: `tuner.nn.Conv2d` forward, no graph / recording the graph | "
          f"{results['tiny_module_us']:.1f} / {results['tiny_module_grad_us']:.1f} us | "
          f"{results['tiny_conv2d_us']:.1f} us (`F.conv2d`) | |")
    print(f"| tiny problem: the custom operator, no graph / recording the graph | "
          f"{results['tiny_operator_us']:.1f} / {results['tiny_operator_grad_us']:.1f} us | | |")
    print(f"| tiny problem: forward and both gradients, module / through the operators | "
          f"{results['tiny_module_train_us']:.1f} / {results['tiny_operator_train_us']:.1f} us "
          f"| {results['tiny_conv2d_train_us']:.1f} us (`F.conv2d`) | |")
    print(f"| cached `convolve()`, n1 c64 56x56 k64 3x3 | {results['convolve_us']:.1f} us | "
          f"{results['torch_conv2d_us']:.1f} us (`F.conv2d`) | <= 1.0x `F.conv2d` |")
    if gpu:
        print(f"| the same problem's work alone (in a CUDA graph) | "
              f"{_us(results['plan_graph_us'])} | {_us(results['torch_conv2d_graph_us'])} | |")
    print(f"| ResNet-50 b{batch} forward, {r['convolutions']} convolutions | "
          f"{r['converted_ms']:.2f} ms (predicted {r['predicted_ms']:.2f}: "
          f"{r['converted_over_predicted']:.3f}x) | {r['torch_ms']:.2f} ms "
          f"({r['converted_over_torch']:.2f}x ours) | within 5% of predicted |")
    print(f"| ResNet-50 convolutions alone, summed | {r['our_convs_ms']:.2f} ms | "
          f"{r['torch_convs_ms']:.2f} ms | |")
    if args.out:
        write_json(results, args.out, indent=2)


def _us(value: float | str) -> str:
    """A graph time as a table cell: microseconds, or why it could not be taken."""
    return f"{value:.1f} us" if isinstance(value, float) else f"not taken ({value})"


if __name__ == "__main__":
    main()
