"""Does the host's speed drift? One configuration timed back to back, again and again.

Usage: python benchmarks/host_drift.py [--device cuda:0] [--layer mobilenet_v2:block6.2.expand]
       [--batch 32] [--configs im2col_gemm/chunk=all,implicit_gemm_tc/64x64] [--seconds 60]
       [--out drift.json]

On the H200 of 2026-11-27 (bb7b625) the tuner and the isolated re-measurement of
bench_tuner disagreed on host-bound configurations only: the tuner's time over the isolated
one went from 1.5-2.6x on MobileNet-v2's early layers to 0.4-0.8x on its late ones, while
device-bound configurations agreed within 7%. Either the host's speed changes over
seconds to minutes (a VM's steal time, CPU clocks), or the two sampled differently.
This script asks the first question alone: every `--interval` seconds, for `--seconds`, it
takes one sample of each configuration as the tuner does (runtime.sample_ms: the L2 flushed,
runs back to back, batched as the tuner batches them) and records:
- the time per run and the host's enqueueing per run (runtime.last_host_ms, GPUs only);
- the time on the device alone (runtime.device_ms, GPUs only), every `--device-every` rounds;
- the machine's CPU time stolen by the hypervisor over the round (/proc/stat "steal"), the
  process's CPU time over its wall time, and the clock of the CPU the process ran on
  (/proc/cpuinfo), where Linux tells them.
It prints the spread of each over the run (min, quartiles, max) and, per configuration, how
its time per run moved with the host's enqueueing and with steal. On the CPU backend it
runs too (the time is the host's work itself), which the tests use.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from algorithms.problem import ConvProblem
from algorithms.registry import get_algorithm
from algorithms.runtime import Runtime, TimingPolicy, batch_size, random_operands
from benchmarks.bench_host_path import SMALL, layer_problem
from tuner.devices import backend_of, get_runtime, parse_device
from tuner.env import timing_policy


def steal_jiffies(stat: str = "/proc/stat") -> int | None:
    """The machine's stolen CPU time so far (the "cpu" line's eighth value), or None."""
    try:
        with open(stat) as lines:
            fields = lines.readline().split()
    except OSError:
        return None
    return int(fields[8]) if len(fields) > 8 and fields[0] == "cpu" else None


def cpu_mhz(cpu: int, info: str = "/proc/cpuinfo") -> float | None:
    """The clock /proc/cpuinfo reports for CPU `cpu`, or None."""
    try:
        with open(info) as lines:
            current = -1
            for line in lines:
                name, _, value = line.partition(":")
                name = name.strip()
                if name == "processor":
                    current = int(value)
                elif name == "cpu MHz" and current == cpu:
                    return float(value)
    except (OSError, ValueError):
        return None
    return None


def _current_cpu() -> int:
    getcpu = getattr(os, "sched_getcpu", None)
    return int(getcpu()) if getcpu is not None else -1


def runner(runtime: Runtime, problem: ConvProblem, name: str, operands: tuple[Any, Any, Any]
           ) -> Callable[[], None]:
    """One run of configuration `name` ("algorithm/config") with its own workspace."""
    algorithm_name, _, config = name.partition("/")
    algorithm = get_algorithm(runtime.backend, algorithm_name)
    if not algorithm.supports(problem) or config not in algorithm.configs(problem):
        raise ValueError(f"{name} does not run {problem.describe()}")
    workspace = runtime.workspace(algorithm.workspace_bytes(problem, config))
    x, w, y = operands

    def run() -> None:
        algorithm.run(x, w, y, workspace, problem, config)

    return run


def drift(runtime: Runtime, problem: ConvProblem, names: list[str], seconds: float,
          interval: float, device_every: int, policy: TimingPolicy,
          clock: Callable[[], float] = time.perf_counter) -> list[dict[str, Any]]:
    """One row per round: each configuration's sample, and the machine's state over it."""
    operands = random_operands(runtime, problem, np.random.default_rng(0))
    rounds: list[dict[str, Any]] = []
    with runtime.activate():
        runs = {name: runner(runtime, problem, name, operands) for name in names}
        runtime.warm_up()
        # Batched as the tuner batches: by the fastest of its warm-up probes.
        batches = {name: batch_size(min(runtime.sample_ms(run, 1) for _ in range(2)), policy)
                   for name, run in runs.items()}
        device_ms = getattr(runtime, "device_ms", None)
        began = clock()
        while not rounds or clock() - began < seconds:
            start, stolen, cpu_began = clock(), steal_jiffies(), time.process_time()
            row: dict[str, Any] = {"t_s": start - began, "cpu": _current_cpu(), "configs": {}}
            for name, run in runs.items():
                ms = runtime.sample_ms(run, batches[name])
                found = {"ms": ms, "batch": batches[name],
                         "host_ms": runtime.last_host_ms}
                if device_ms is not None and len(rounds) % device_every == 0:
                    found["device_ms"] = float(device_ms(run, max(1, batches[name] // 4)))
                row["configs"][name] = found
            wall = clock() - start
            after = steal_jiffies()
            row |= {"steal_jiffies": None if stolen is None or after is None else after - stolen,
                    "cpu_share": (time.process_time() - cpu_began) / wall if wall > 0 else None,
                    "mhz": cpu_mhz(row["cpu"])}
            rounds.append(row)
            time.sleep(max(0.0, interval - (clock() - start)))
    return rounds


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) < 4:
        return f"{min(values):.4g}-{max(values):.4g}"
    q = statistics.quantiles(values, n=4)
    return f"{min(values):.4g} / {q[0]:.4g} / {q[1]:.4g} / {q[2]:.4g} / {max(values):.4g}"


def report(meta: dict[str, Any], rounds: list[dict[str, Any]]) -> str:
    """Markdown: each measure's spread over the rounds."""
    lines = [f"{meta['date']}, {meta['device']}, commit {meta['commit']}; {meta['problem']}; "
             f"{len(rounds)} rounds over {rounds[-1]['t_s']:.0f} s", "",
             "| measure | min / q1 / median / q3 / max |", "|---|---|"]
    for name in rounds[0]["configs"]:
        got = [r["configs"][name] for r in rounds]
        lines.append(f"| {name}: ms per run ({got[0]['batch']} a sample) | "
                     f"{_spread([g['ms'] for g in got])} |")
        lines.append(f"| {name}: host ms per run | "
                     f"{_spread([g['host_ms'] for g in got if g['host_ms'] is not None])} |")
        lines.append(f"| {name}: device ms per run | "
                     f"{_spread([g['device_ms'] for g in got if 'device_ms' in g])} |")
    for key, label in (("steal_jiffies", "stolen jiffies per round"),
                       ("cpu_share", "process CPU time over wall time"), ("mhz", "CPU MHz")):
        lines.append(f"| {label} | {_spread([r[key] for r in rounds if r[key] is not None])} |")
    return "\n".join(lines)


def main() -> None:
    """Run the rounds; print Markdown, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N")
    parser.add_argument("--layer", default="mobilenet_v2:block6.2.expand",
                        help="network:layer, or 'small' for issue 9's small problem")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--configs", default=None,
                        help="algorithm/config,... (default: im2col_gemm/chunk=all and "
                             "implicit_gemm_tc/64x64 on a GPU, im2col_gemm/default and "
                             "direct/default on the CPU)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--device-every", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.seconds < 0 or args.interval < 0 or args.device_every < 1:
        parser.error("--seconds and --interval must be non-negative, --device-every positive")
    device = parse_device(args.device)
    runtime = get_runtime(device)
    problem = (ConvProblem(**SMALL) if args.layer == "small"  # type: ignore[arg-type]
               else layer_problem(args.layer, args.batch, "float32", "fp32"))
    default = ("im2col_gemm/chunk=all,implicit_gemm_tc/64x64" if backend_of(device) == "cuda"
               else "im2col_gemm/default,direct/default")
    names = [n for n in (args.configs or default).split(",") if n]
    rounds = drift(runtime, problem, names, args.seconds, args.interval, args.device_every,
                   timing_policy())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    meta = {"date": date.today().isoformat(), "device": runtime.fingerprint()["name"],
            "commit": commit, "problem": problem.describe()}
    print(report(meta, rounds))
    if args.out:
        args.out.write_text(json.dumps({**meta, "rounds": rounds}, indent=2))


if __name__ == "__main__":
    main()
