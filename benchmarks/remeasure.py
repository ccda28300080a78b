"""The tuner regret benchmark's isolated re-measurement (bench_tuner.py step 2).

Every usable stored configuration of a layer, timed alone: each sample primed as the
tuner's are (runtime.prime: on the CPU an untimed run), the layer's configurations taking
turns so that a drift of the machine's speed hits them alike, on fresh inputs, after a
device warm-up, with a longer timing budget and no racing or confirmation. Each pass runs in
a child process of its own (this file run as a script: `python benchmarks/remeasure.py URL
--device D ...`, which answers problem keys on stdin), the children taking each layer in
turn.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from algorithms.cuda.event_timing import runs_spanning
from algorithms.problem import ConvProblem
from algorithms.runtime import Runtime, TimingPolicy, batch_size, random_operands
from benchmarks.children import LineChild
from db.engine import open_store
from tuner.candidates import Candidate
from tuner.devices import backend_of, get_runtime
from tuner.env import timing_policy
from tuner.measuring import candidate_run, prepare_run
from tuner.tuning import Tuner


def iso_policy(budget_s: float, min_reps: int) -> TimingPolicy:
    """The re-measurement's timing policy: the environment's, like the tuner's own
    ($CONVTUNE_BATCH_BELOW_MS, ...), so that both sides time a candidate the same way, with
    two warm-ups, the longer budget, and up to 100 samples."""
    return replace(timing_policy(), warmup=2, budget_s=budget_s, min_reps=min_reps,
                   max_reps=max(100, min_reps))


def isolated_ms(runtime: Runtime, cands: list[Candidate], problem: ConvProblem,
                policy: TimingPolicy, rng: np.random.Generator, device_time: bool = False
                ) -> list[tuple[float, float | None, float | None]]:
    """Per configuration (wall, device, host): its median time alone, on one set of fresh
    random inputs; with `device_time`, also its time on the device alone (the host's
    enqueueing left out, as bench_gpu.py's device column), where the runtime can tell (a
    GPU's), else None; and the median of its samples' host enqueueing per run where the
    runtime tells it (Runtime.last_host_ms), else None.

    The configurations take turns, one sample each (A B C A B C ...), until each has its
    min_reps and its budget or max_reps, each sample primed as the tuner's are
    (runtime.prime: on the CPU an untimed run, which the budget counts), so that the
    caches hold its data as if it ran alone. Timed one after the other, a configuration's
    whole budget fell into one stretch of a machine whose speed drifts: this project's CPU
    VM's memory-bound work changed speed by 50% within a minute (BENCHMARKS.md, "Primed
    samples, and the re-measurement in turns"), which can decide close calls.
    """
    x, w, y = random_operands(runtime, problem, rng)
    workspace = runtime.workspace(max(c.workspace_bytes for c in cands))
    sample = runtime.sample_ms
    with runtime.activate():
        # Each run as the tuner times it: as plans make it (a GPU algorithm's replayed).
        runs = [candidate_run(runtime, problem, c, (x, w, y), workspace) for c in cands]
        for run in runs:  # replays worked out untimed, as the tuner's are
            prepare_run(run)
        runtime.warm_up()
        # A configuration that raises (out of memory, a launch failure) is NaN, and the
        # others go on: one such once ended the child and with it the whole run (a review
        # of the benchmarks, 2026-11-30).
        failed = [False for _ in runs]
        last = [0.0 for _ in runs]  # its latest time per run: the fastest warm-up's at first
        for i, run in enumerate(runs):
            try:
                last[i] = min((sample(run, 1) for _ in range(policy.warmup)), default=0.0)
            except Exception as exc:
                failed[i] = _failed(cands[i], exc)
        batches = [batch_size(ms or None, policy) for ms in last]
        times: list[list[float]] = [[] for _ in runs]
        hosts: list[list[float]] = [[] for _ in runs]
        spent = [0.0 for _ in runs]

        def wanted(i: int) -> bool:
            return not failed[i] and (len(times[i]) < policy.min_reps or (
                spent[i] < policy.budget_s and len(times[i]) < policy.max_reps))

        while active := [i for i in range(len(runs)) if wanted(i)]:
            for i in active:
                began = time.perf_counter()
                try:
                    if len(active) > 1:  # another configuration ran last
                        runtime.prime(runs[i], last[i])
                    last[i] = sample(runs[i], batches[i])
                except Exception as exc:
                    failed[i] = _failed(cands[i], exc)
                    continue
                times[i].append(last[i])
                if (host := runtime.last_host_ms) is not None:
                    hosts[i].append(host)
                spent[i] += time.perf_counter() - began
        walls = [math.nan if failed[i] else statistics.median(t) for i, t in enumerate(times)]
        host_ms = [statistics.median(h) if h else None for h in hosts]
        device_ms = getattr(runtime, "device_ms", None)
        if not device_time or device_ms is None:
            return [(wall, None, host) for wall, host in zip(walls, host_ms, strict=True)]
        return [(wall, math.nan if math.isnan(wall) else float(device_ms(run, runs_spanning(wall))),
                 host) for run, wall, host in zip(runs, walls, host_ms, strict=True)]


def _failed(cand: Candidate, exc: Exception) -> bool:
    """Say on stderr that `cand` failed (its times are NaN); True."""
    print(f"remeasure: {cand.algorithm.name}/{cand.config} failed: {type(exc).__name__}: "
          f"{exc}", file=sys.stderr, flush=True)
    return True


#: Per problem key, each configuration's medians, one per pass.
Passes = list[dict[str, list[float]]]


class Remeasurer:
    """One process's isolated re-measurement: the store's tuner, the runtime, the random
    inputs' generator, kept from layer to layer."""

    def __init__(self, url: str, device: str, policy: TimingPolicy,
                 device_time: bool = False) -> None:
        self.tuner = Tuner(open_store(url))
        self.device = device
        self.runtime = get_runtime(device)
        self.policy = policy
        self.device_time = device_time
        self.rng = np.random.default_rng(20261123)

    def layer(self, key: dict[str, Any]) -> tuple[dict[str, list[float]], ...]:
        """(wall, device, host): every usable stored configuration of the problem `key`, its
        isolated median in a list of one (a pass), and its device time and its host's
        enqueueing per run likewise where the runtime tells them (else an empty list)."""
        problem = ConvProblem.from_key(key)
        stored = self.tuner.find_candidates(problem, self.device, mode="cached")
        usable = {(r.algorithm, r.config) for r in stored if r.usable}
        candidates, _ = self.tuner.candidates(problem, backend_of(self.device))
        chosen = [c for c in candidates if c.key in usable]
        times: dict[str, list[float]] = {}
        device_times: dict[str, list[float]] = {}
        host_times: dict[str, list[float]] = {}
        if not chosen:
            return times, device_times, host_times
        found = isolated_ms(self.runtime, chosen, problem, self.policy, self.rng,
                            self.device_time)
        for c, (ms, device_ms, host_ms) in zip(chosen, found, strict=True):
            name = f"{c.algorithm.name}/{c.config}"
            times[name] = [ms]
            device_times[name] = [] if device_ms is None else [device_ms]
            host_times[name] = [] if host_ms is None else [host_ms]
        return times, device_times, host_times


def serve_remeasure(url: str, device: str, policy: TimingPolicy, device_time: bool) -> None:
    """A re-measuring child: says "ready" once set up, then answers each problem key read
    as a JSON line on stdin with one JSON line [wall, device, host] (one pass), until stdin
    ends."""
    remeasurer = Remeasurer(url, device, policy, device_time)
    print("ready", flush=True)
    for line in sys.stdin:
        print(json.dumps(remeasurer.layer(json.loads(line))), flush=True)


def remeasure_apart(url: str, args: argparse.Namespace, keys: list[dict[str, Any]]
                    ) -> tuple[Passes, Passes, Passes]:
    """`args.iso_passes` passes (wall and device times, and the host's enqueueing per run),
    each in a child process of its own, the children taking each layer in turn (A B A B ...).

    Why in turn: a layer's passes then run seconds apart, not minutes, so that a machine
    whose speed drifts (this project's CPU machine does) moves them alike, while the
    processes still differ (which on a GPU host decides host-bound configurations' times).
    Passes run one after the other (sequential child processes) showed the drift as noise:
    a median pass-to-pass spread of 29% on this CPU against 2% within one process.
    """
    merged: tuple[Passes, Passes, Passes] = ([{} for _ in keys], [{} for _ in keys],
                                             [{} for _ in keys])
    children: list[LineChild] = []
    try:
        for _ in range(args.iso_passes):  # one at a time: no child starts while one times
            children.append(LineChild(
                [__file__, url, "--device", args.device,
                 "--iso-budget-s", str(args.iso_budget_s),
                 "--iso-min-reps", str(args.iso_min_reps),
                 *(["--iso-device"] if args.iso_device else [])],
                "a re-measuring child"))
        for layer, key in enumerate(keys):
            for child in children:
                for into, found in zip(merged, json.loads(child.ask(json.dumps(key))),
                                       strict=True):
                    for name, values in found.items():
                        into[layer].setdefault(name, []).extend(values)
    finally:
        for child in children:
            child.close()
    return merged


def main() -> None:
    """A re-measuring child of bench_tuner.py (see serve_remeasure)."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", help="the tuned store's URL")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iso-budget-s", type=float, default=0.5)
    parser.add_argument("--iso-min-reps", type=int, default=5)
    parser.add_argument("--iso-device", action="store_true")
    args = parser.parse_args()
    serve_remeasure(args.url, args.device, iso_policy(args.iso_budget_s, args.iso_min_reps),
                    args.iso_device)


if __name__ == "__main__":
    main()
