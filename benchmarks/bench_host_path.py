"""Where a plan call's host time goes (issue 9): each step of `Plan.enqueue` alone, and
each algorithm configuration's enqueue on issue 9's small problem.

Usage: python benchmarks/bench_host_path.py [--device cpu|cuda:0] [--layer NET:LAYER
       --batch N --dtype D --math M] [--no-algorithms] [--out f.json]

1. Steps: a plan call with `out` given, taken apart as `Plan.enqueue` does it (adopt each
   operand, make the device and the caller's stream current, make x and w contiguous, find
   the lane's workspace, run the algorithm), each step timed alone, then the whole call.
   With NumPy/CuPy arrays and with torch tensors. "unaccounted" is the whole call by the
   checked path minus the sum of its steps; the direct path (`Runtime.ready`: operands
   taken as they are) is its check and the whole call.
2. A cached `convolve()` with the same plan, taken apart as `tuner.calls.execute` does it
   (the Service of the database, the call's key, the kept plan found by it, the result
   allocated, the plan's enqueue into it), then the whole call: what convolve adds to a
   plan call (13 us with torch tensors on the H200 of 2026-11-27, against the 20 us
   F.conv2d takes in all).
3. Algorithms: every supported configuration of every algorithm on the same problem, its
   `run` alone: host time per call (enqueue only on a GPU; on the CPU the work itself),
   and wall time per call with a synchronisation after each.

Host time is taken in bursts of back-to-back calls with the device synchronised between
bursts, outside the timed part, so that queued GPU work never blocks a launch being timed.
No tuning: plans are built directly for the configuration named (convolve finds its plan
kept under its call's key in a Service of a throwaway SQLite file).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import date
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.cuda import _launch
from algorithms.cuda._launch import KernelLaunch, Launch
from algorithms.problem import ConvProblem
from algorithms.registry import algorithms_for, get_algorithm
from algorithms.runtime import Runtime, random_operands
from tuner.api import convolve
from tuner.calls import _call_key, execute
from tuner.devices import backend_of, get_runtime, parse_device
from tuner.networks import network_problems
from tuner.plans import Plan
from tuner.results import OK, AlgorithmResult
from tuner.service import service

SMALL = dict(n=1, c=64, h=56, w=56, k=64, r=3, s=3, pad=1)  # issue 9's small problem
#: Longest a burst of back-to-back calls runs, and the most calls in one.
BURST_S, MAX_BURST = 0.002, 50


def host_us(fn: Callable[[], Any], sync: Callable[[], None], budget_s: float = 0.2,
            rounds: int = 41) -> float:
    """Median over bursts of the host time per call, in microseconds (sync between bursts)."""
    fn()
    sync()
    start = time.perf_counter()
    fn()
    probe = time.perf_counter() - start
    sync()
    calls = max(1, min(MAX_BURST, int(BURST_S / max(probe, 1e-9))))
    per_call: list[float] = []
    began = time.perf_counter()
    while len(per_call) < 5 or (len(per_call) < rounds and time.perf_counter() - began < budget_s):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - start) / calls * 1e6)
        sync()
    return statistics.median(per_call)


def wall_us(fn: Callable[[], Any], sync: Callable[[], None], budget_s: float = 0.2) -> float:
    """Median wall time per call, in microseconds, with a synchronisation after each."""
    def once() -> None:
        fn()
        sync()

    return host_us(once, lambda: None, budget_s)


def make_plan(problem: ConvProblem, device: str, algorithm: str, config: str) -> Plan:
    """A plan of `algorithm`/`config` built directly (no tuning, no database)."""
    implementation = get_algorithm(backend_of(device), algorithm)
    choice = AlgorithmResult(algorithm=algorithm, config=config, status=OK, time_ms=None,
                             workspace_bytes=implementation.workspace_bytes(problem, config))
    return Plan(problem, device, choice, implementation, get_runtime(device))


def run_of(plan: Plan, operands: tuple[Any, Any, Any]) -> Callable[[], None]:
    """The plan's algorithm run on `operands` as the checked path adopts them."""
    problem, names = plan.problem, plan.problem.operand_names
    xa, wa, ya = (plan._adopt(a, n, s) for a, n, s in zip(
        operands, (*names[:2], "out"), problem.operand_shapes, strict=True))
    workspace = plan.workspace()
    return lambda: plan.implementation.run(xa, wa, ya, workspace, problem, plan.config)


def step_times(plan: Plan, operands: tuple[Any, Any, Any],
               sync: Callable[[], None]) -> dict[str, float]:
    """Each step of `plan.enqueue(x, w, out)`, timed alone, and the whole call (us)."""
    x, w, y = operands
    runtime, problem = plan._runtime, plan.problem
    shapes, names = problem.operand_shapes, problem.operand_names
    xa, wa = (plan._adopt(a, n, s) for a, n, s in zip(operands[:2], names[:2], shapes[:2],
                                                       strict=True))

    def device() -> None:
        with runtime.activate():
            pass

    def stream() -> None:
        with runtime.caller_stream(x):
            pass

    storage = runtime.storage_dtype(problem.dtype)
    steps = {
        "ready operands (the direct path's check)": lambda: runtime.ready(x, w, y, shapes,
                                                                          storage),
        "adopt x": lambda: plan._adopt(x, names[0], shapes[0]),
        "adopt w": lambda: plan._adopt(w, names[1], shapes[1]),
        "adopt out": lambda: plan._adopt(y, "out", shapes[2]),
        "device current": device,
        "caller's stream": stream,
        "contiguous x, w": lambda: (runtime.contiguous(xa, problem.dtype),
                                    runtime.contiguous(wa, problem.dtype)),
        "workspace": plan.workspace,
        "algorithm run": run_of(plan, operands),
    }
    ready = runtime.ready(x, w, y, shapes, storage)
    if plan._direct_run is not None and ready is not None:
        # The direct path's run: the algorithm's calls replayed (algorithms.cuda._replay).
        steps["replayed run (the direct path's)"] = partial(plan._direct_run, *ready)
    # The stream step enters the device too; count the device step once, inside it.
    times = {name: host_us(fn, sync) for name, fn in steps.items()}
    checked = Plan(problem, plan.device, plan.choice, plan.implementation, runtime,
                   direct=False)
    whole = host_us(lambda: checked(x, w, out=y), sync)
    parts = sum(t for name, t in times.items() if name != "device current"
                and not name.startswith(("ready", "replayed")))
    return {**times, "whole plan call, checked path": whole, "unaccounted": whole - parts,
            "whole plan call": host_us(lambda: plan(x, w, out=y), sync)}


def convolve_steps(plan: Plan, operands: tuple[Any, Any, Any], sync: Callable[[], None],
                   db: str) -> dict[str, float]:
    """A cached `convolve(x, w)` (forward plans only) taken apart as `execute` does it,
    each step timed alone, and the whole call (us). The plan is kept under the call's key
    in `db`'s Service first, so that the call finds it instead of tuning."""
    x, w, y = operands
    problem = plan.problem
    geometry = (problem.stride, problem.pad, problem.dilation, problem.groups)
    key = _call_key(x, w, None, "forward", geometry, None, None, None, problem.math)
    found = service(db)
    found.remember_call(key, found.answers.token(), plan)
    chosen = execute(x, w, None, "forward", geometry, None, None, None, db, problem.math,
                     None, False)[0]
    if chosen is not plan:  # the call went elsewhere: its times would say nothing
        raise RuntimeError(f"convolve did not find the kept plan (got {chosen!r})")
    stride, pad, dilation, groups = geometry
    steps = {
        "the database's Service": lambda: service(db),
        "the call's key": lambda: _call_key(x, w, None, "forward", geometry, None, None,
                                            None, problem.math),
        "the kept plan found by it": lambda: found.call_plan(key),
        "the result allocated": lambda: plan.output(x, None),
        "the plan's enqueue into it": lambda: plan.enqueue(x, w, y),
    }
    times = {name: host_us(fn, sync) for name, fn in steps.items()}
    whole = host_us(lambda: convolve(x, w, stride, pad, dilation, groups, db=db,
                                     math=problem.math), sync)
    return {**times, "whole convolve call": whole, "unaccounted": whole - sum(times.values())}


def launch_steps(run: Callable[[], Any], sync: Callable[[], None]) -> dict[str, float] | None:
    """A run's prepared launches taken apart (algorithms.cuda._launch), each piece timed
    alone over all the run's launches (us), beside the whole run; None when the run makes
    none (the CPU backend, or CuPy's own call path).

    Why: on the H200 of 2026-11-27 a one-launch run took 13-15 us of host time where a
    prepared launch alone took 4.3 on the H100; this says which piece holds the rest.
    """
    bind, call = KernelLaunch.bind, Launch.__call__
    bound: list[tuple[KernelLaunch, Callable[[str, str], Any]]] = []
    filled: list[tuple[Launch, tuple[int, ...]]] = []

    def recording_bind(self: KernelLaunch, get_kernel: Callable[[str, str], Any]) -> Any:
        bound.append((self, get_kernel))
        return bind(self, get_kernel)

    def recording_call(self: Launch, stream: int, *values: int) -> None:
        filled.append((self, values))
        call(self, stream, *values)

    KernelLaunch.bind = recording_bind  # type: ignore[method-assign]
    Launch.__call__ = recording_call  # type: ignore[method-assign]
    try:
        run()
        sync()
    finally:
        KernelLaunch.bind = bind  # type: ignore[method-assign]
        Launch.__call__ = call  # type: ignore[method-assign]
    if not filled:
        return None
    stream = _launch.current_stream()
    launches, binds = tuple(filled), tuple(bound)
    pieces = {
        "kernel lookups (get_kernel)": lambda: [get(k.file, k.name) for k, get in binds],
        "prepared launches found (bind, lookups included)":
            lambda: [bind(k, get) for k, get in binds],
        "current stream queries": lambda: [_launch.current_stream() for _ in launches],
        "prepared launches alone (the driver call included)":
            lambda: [call(launch, stream, *values) for launch, values in launches],
    }
    times = {name: host_us(fn, sync) for name, fn in pieces.items()}
    whole = host_us(run, sync)
    rest = whole - sum(t for name, t in times.items() if not name.startswith("kernel"))
    return {"launches": float(len(launches)), **times, "whole run": whole,
            "the run's own Python (whole run less the three above it)": rest}


def torch_operands(problem: ConvProblem, device: str) -> tuple[Any, Any, Any] | None:
    """Random torch tensors for the problem on `device`, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    where = torch.device("cpu" if device == "cpu" else device)
    a, b, out = problem.operand_shapes
    return torch.randn(a, device=where), torch.randn(b, device=where), torch.empty(out,
                                                                                  device=where)


def native_operands(runtime: Runtime, problem: ConvProblem) -> tuple[Any, Any, Any]:
    """Random NumPy (CPU) or CuPy (GPU) operands for the problem."""
    return random_operands(runtime, problem, np.random.default_rng(0))


def launches(algorithm: Any, problem: ConvProblem, config: str) -> int | None:
    """What the implementation says one run launches (None where it says nothing)."""
    work = getattr(algorithm, "work", None)  # optional in the Algorithm protocol
    return None if work is None else int(work(problem, config).launches)


def algorithm_rows(problem: ConvProblem, device: str, runtime: Runtime,
                   sync: Callable[[], None]) -> list[dict[str, Any]]:
    """Every supported configuration's run: host time, wall time, launches."""
    x, w, y = native_operands(runtime, problem)
    rows = []
    with runtime.activate():
        for algorithm in algorithms_for(backend_of(device)):
            if not algorithm.supports(problem):
                continue
            for config in algorithm.configs(problem):
                workspace = runtime.workspace(algorithm.workspace_bytes(problem, config))

                def run(algorithm: Any = algorithm, config: str = config,
                        workspace: Any = workspace) -> None:
                    algorithm.run(x, w, y, workspace, problem, config)

                try:
                    rows.append({"algorithm": algorithm.name, "config": config,
                                 "launches": launches(algorithm, problem, config),
                                 "host_us": host_us(run, sync), "wall_us": wall_us(run, sync)})
                except Exception as exc:  # a configuration that fails is data, not a crash
                    rows.append({"algorithm": algorithm.name, "config": config,
                                 "error": f"{type(exc).__name__}: {exc}"[:200]})
    return rows


def layer_problem(spec: str, batch: int, dtype: str, math: str) -> ConvProblem:
    """The problem of "network:layer" at a batch size, dtype and math mode."""
    network, _, name = spec.partition(":")
    for layer, problem in network_problems(network, batch, dtype, math):
        if layer.name == name:
            return problem
    raise SystemExit(f"no layer {name!r} in {network} (its distinct convolutions)")


def report(results: dict[str, Any]) -> str:
    """The results as Markdown."""
    lines = [f"{results['date']}, {results['device']}, commit {results['commit']}; problem "
             f"{results['problem']}", ""]
    kinds = list(results["operands"])
    for plan_name, by_kind in results["plans"].items():
        lines += [f"Plan {plan_name}, host time per call (us):", "",
                  "| step | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
        for step in next(iter(by_kind.values())):
            lines.append(f"| {step} | "
                         + " | ".join(f"{by_kind[k][step]:.1f}" for k in kinds) + " |")
        lines.append("")
    for plan_name, by_kind in results.get("convolve", {}).items():
        lines += [f"A cached convolve() with plan {plan_name}, host time per call (us):", "",
                  "| step | " + " | ".join(by_kind) + " |", "|---|" + "---|" * len(by_kind)]
        for step in next(iter(by_kind.values())):
            lines.append(f"| {step} | "
                         + " | ".join(f"{times[step]:.1f}" for times in by_kind.values())
                         + " |")
        lines.append("")
    for plan_name, found in results.get("launch_steps", {}).items():
        lines += [f"Plan {plan_name}'s run, its {found['launches']:.0f} prepared launch(es) "
                  "taken apart (host us per run, native operands):", "",
                  "| piece | us |", "|---|---|"]
        lines += [f"| {name} | {us:.1f} |" for name, us in found.items() if name != "launches"]
        lines.append("")
    lines += ["Each configuration's run alone (host: enqueue only on a GPU; wall: with a "
              "synchronisation after each call):", "",
              "| algorithm/config | launches | host us | wall us |", "|---|---|---|---|"]
    for row in results["algorithms"]:
        if "error" in row:
            lines.append(f"| {row['algorithm']}/{row['config']} | | failed: {row['error']} | |")
        else:
            lines.append(f"| {row['algorithm']}/{row['config']} | {row['launches'] or '?'} | "
                         f"{row['host_us']:.1f} | {row['wall_us']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    """Run the benchmark; print Markdown, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N")
    parser.add_argument("--plans", default="",
                        help="algorithm/config,... whose plan steps to time (default: the "
                             "first configuration of implicit_gemm_tc on a GPU, of "
                             "im2col_gemm on the CPU, and of direct)")
    parser.add_argument("--layer", default=None,
                        help="network:layer (e.g. resnet50:res5.1x1a.rest) in place of "
                             "issue 9's small problem, at --batch, --dtype and --math")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--math", default="fp32")
    parser.add_argument("--no-algorithms", action="store_true",
                        help="leave out part 3 (every configuration's run): minutes on a CPU")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    device = parse_device(args.device)
    runtime = get_runtime(device)
    sync = runtime.synchronize
    problem = (ConvProblem(**SMALL) if args.layer is None  # type: ignore[arg-type]
               else layer_problem(args.layer, args.batch, args.dtype, args.math))
    names = [p.split("/", 1) for p in args.plans.split(",") if p]
    if not names:
        first = "implicit_gemm_tc" if backend_of(device) == "cuda" else "im2col_gemm"
        names = [[a, get_algorithm(backend_of(device), a).configs(problem)[0]]
                 for a in dict.fromkeys((first, "direct"))]
    operand_sets = {"native": native_operands(runtime, problem)}
    if (tensors := torch_operands(problem, device)) is not None:
        operand_sets["torch"] = tensors
    plans: dict[str, dict[str, dict[str, float]]] = {}
    calls: dict[str, dict[str, dict[str, float]]] = {}
    pieces: dict[str, dict[str, float]] = {}
    scratch = tempfile.TemporaryDirectory()
    db = f"sqlite:///{scratch.name}/host_path.db"
    for algorithm, config in names:
        built = make_plan(problem, device, algorithm, config)
        plans[f"{algorithm}/{config}"] = {
            kind: step_times(built, operands, sync) for kind, operands in operand_sets.items()
        }
        try:
            calls[f"{algorithm}/{config}"] = {
                kind: convolve_steps(built, operands, sync, db)
                for kind, operands in operand_sets.items()
            }
        except Exception as exc:  # the plans' tables and the rows below still come
            print(f"convolve steps of {algorithm}/{config} failed: {type(exc).__name__}: "
                  f"{exc}")
        found = launch_steps(run_of(built, operand_sets["native"]), sync)
        if found is not None:
            pieces[f"{algorithm}/{config}"] = found
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    results = {"date": date.today().isoformat(), "device": runtime.fingerprint()["name"],
               "commit": commit, "problem": problem.describe(), "operands": list(operand_sets),
               "plans": plans, "convolve": calls, "launch_steps": pieces,
               "algorithms": [] if args.no_algorithms else algorithm_rows(problem, device,
                                                                         runtime, sync)}
    print(report(results))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
