"""Tuner regret benchmark: how good are the tuner's picks, and what does tuning cost?

Usage: python benchmarks/bench_tuner.py --device cpu --model resnet50 --batch 8 [--out r.json]
       [--mode fast --train-on vgg16:16,googlenet:32,mobilenet_v2:32 [--saved-model]]

1. Tunes every distinct convolution of the network into a fresh SQLite store, as
   `convtune tune` does (the timing policy from $CONVTUNE_*), and records the wall time.
   With --train-on, the store first gets those networks tuned exhaustively (untimed, and
   never the measured network: leave-one-network-out), so that --mode fast has a cost model
   to rank candidates with. Fast mode fits that model during the timed tuning, as a process
   does whose store has no kept fit; with --saved-model, a separate process fits it first
   (timed on its own) and the timed tuning loads that fit (tuner.model_files), as a process
   does once any earlier one has fitted the same store. Models are kept in a temporary
   directory either way.
2. In separate processes, re-measures every usable stored configuration in isolation: each
   alone (each sample primed as the tuner's are: on the CPU, an untimed run), a layer's
   configurations taking turns so that a drift of the machine's speed hits them alike, on
   fresh inputs, after a device warm-up, with a longer timing budget and no racing or
   confirmation; each pass in a process of its own, because a host-bound configuration's
   time (a run that takes longer to enqueue than to execute) differs between processes on
   one machine by up to 2x, where a device-bound one's agrees within about 1% (BENCHMARKS.md,
   "Three measurements of the same configurations"): the spread between passes, the
   `noise`, then includes that. The processes take each layer in turn, so that a layer's
   passes run close together in time.
3. Reports per layer the regret of the tuner's pick: its isolated time over the isolated
   best, minus one.
4. With --profile PATH, tunes the network once more under cProfile, into a copy of the
   store as it was before the timed tuning (so it finds what that one found), and writes
   the functions that took the most time to PATH: where a fast find's seconds go (with
   --saved-model, the copy's cost model is fitted first, outside the profile). The timed
   tuning itself runs without the profiler, whose overhead inflates Python's share. The
   wall time covers the tuner's finds only: the read of every layer's stored times that
   tells a miss's cause comes after it.
5. With --iso-here, re-measures every configuration once more in this process, after the
   child: if those times agree with the tuner's where the child's do not, the two differ
   by process (its host's speed), not by the order or the company of the timing.
6. With --iso-device, the children also time each configuration on the device alone (the
   runs queued behind a spin, as bench_gpu.py's device column): a configuration whose
   wall time alone exceeds that is host-bound, and the report names the layers whose pick
   or best is.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.cuda.runtime import runs_spanning
from algorithms.problem import ConvProblem
from algorithms.runtime import Runtime, TimingPolicy, batch_size, random_operands
from db.engine import open_store
from tuner.candidates import Candidate
from tuner.devices import backend_of, get_runtime, identify
from tuner.model import model_cache
from tuner.networks import network_problems
from tuner.tuning import Tuner

#: Regret above this counts as a miss (issue 11's target: worst <= 5%).
MISS = 0.05


def tune(url: str, device: str, model: str, batch: int,
         mode: str = "exhaustive") -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Tune each distinct layer into the store at `url`: its pick, and what the tuning
    cost: its wall time, the seconds spent fitting the cost model and how many fits were
    loaded."""
    tuner = Tuner(open_store(url))
    began = time.perf_counter()
    picks = []
    for layer, problem in network_problems(model, batch):
        start = time.perf_counter()
        best = tuner.best(problem, device, mode=mode)
        picks.append((layer, problem, best, time.perf_counter() - start))
    tune_s = time.perf_counter() - began
    rows = []
    for layer, problem, best, layer_s in picks:
        # What the tuner measured of each configuration, to tell a miss's cause: the true
        # best measured slow, or never measured (fast mode). Read after the timed tuning:
        # in fast mode this read predicts every unmeasured configuration, 2.2 of the 6.4 s
        # that were reported for ResNet-50 on the H200 (2026-11-27) while it ran per layer.
        stored = tuner.find_candidates(problem, device, mode="cached")
        rows.append({"layer": layer.name, "problem": problem.describe(), "key": problem.key(),
                     "pick": f"{best.algorithm}/{best.config}", "tuned_ms": best.time_ms,
                     "note": best.note, "tune_s": layer_s,
                     "tuned_all_ms": {f"{r.algorithm}/{r.config}": r.time_ms
                                      for r in stored if r.usable}})
    cache = model_cache(tuner.store)
    return rows, {"tune_s": tune_s, "fit_s": cache.fit_s, "model_fits": cache.fits,
                  "model_loads": cache.loads}


def write_profile(path: Path, work: Callable[[], object], top: int = 40) -> None:
    """Run `work` under cProfile; write its `top` functions by cumulative time, then by
    own time, to `path`."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        work()
    finally:
        profiler.disable()
    with path.open("w") as out:
        stats = pstats.Stats(profiler, stream=out).strip_dirs()
        stats.sort_stats("cumulative").print_stats(top)
        stats.sort_stats("tottime").print_stats(top)


def fit_model(url: str, device: str) -> dict[str, float]:
    """Fit (and keep, in $CONVTUNE_MODEL_DIR) the cost model of `device`'s kind on the store
    at `url`, as the first fast-mode find of a process would (child process)."""
    cache = model_cache(open_store(url))
    began = time.perf_counter()
    model = cache.model(str(identify(device).info.get("kind", "")))
    return {"prefit_s": time.perf_counter() - began, "prefit_rows": model.rows if model else 0}


def isolated_ms(runtime: Runtime, cands: list[Candidate], problem: ConvProblem,
                policy: TimingPolicy, rng: np.random.Generator, device_time: bool = False
                ) -> list[tuple[float, float | None]]:
    """Per configuration (wall, device): its median time alone, on one set of fresh random
    inputs; with `device_time`, also its time on the device alone (the host's enqueueing
    left out, as bench_gpu.py's device column), where the runtime can tell (a GPU's), else
    None.

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
    runs = [_runner(c, (x, w, y), workspace, problem) for c in cands]
    sample = runtime.sample_ms
    with runtime.activate():
        runtime.warm_up()
        # Per configuration its latest time per run: the fastest warm-up's at first.
        last = [min((sample(run, 1) for _ in range(policy.warmup)), default=0.0)
                for run in runs]
        batches = [batch_size(ms or None, policy) for ms in last]
        times: list[list[float]] = [[] for _ in runs]
        spent = [0.0 for _ in runs]

        def wanted(i: int) -> bool:
            return len(times[i]) < policy.min_reps or (
                spent[i] < policy.budget_s and len(times[i]) < policy.max_reps)

        while active := [i for i in range(len(runs)) if wanted(i)]:
            for i in active:
                began = time.perf_counter()
                if len(runs) > 1:  # another configuration ran last
                    runtime.prime(runs[i], last[i])
                last[i] = sample(runs[i], batches[i])
                times[i].append(last[i])
                spent[i] += time.perf_counter() - began
        walls = [statistics.median(t) for t in times]
        device_ms = getattr(runtime, "device_ms", None)
        if not device_time or device_ms is None:
            return [(wall, None) for wall in walls]
        return [(wall, float(device_ms(run, runs_spanning(wall))))
                for run, wall in zip(runs, walls, strict=True)]


def _runner(cand: Candidate, operands: tuple[Any, Any, Any], workspace: Any,
            problem: ConvProblem) -> Callable[[], None]:
    """One run of `cand` on `operands`."""
    x, w, y = operands

    def run() -> None:
        cand.algorithm.run(x, w, y, workspace, problem, cand.config)

    return run


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

    def layer(self, key: dict[str, Any]
              ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        """(wall, device): every usable stored configuration of the problem `key`, its
        isolated median in a list of one (a pass), and its device time likewise where
        `device_time` and the runtime tell it (else an empty list)."""
        problem = ConvProblem.from_key(key)
        stored = self.tuner.find_candidates(problem, self.device, mode="cached")
        usable = {(r.algorithm, r.config) for r in stored if r.usable}
        candidates, _ = self.tuner.candidates(problem, backend_of(self.device))
        chosen = [c for c in candidates if c.key in usable]
        times: dict[str, list[float]] = {}
        device_times: dict[str, list[float]] = {}
        if not chosen:
            return times, device_times
        found = isolated_ms(self.runtime, chosen, problem, self.policy, self.rng,
                            self.device_time)
        for c, (ms, device_ms) in zip(chosen, found, strict=True):
            name = f"{c.algorithm.name}/{c.config}"
            times[name] = [ms]
            device_times[name] = [] if device_ms is None else [device_ms]
        return times, device_times


def serve_remeasure(url: str, device: str, policy: TimingPolicy, device_time: bool) -> None:
    """A re-measuring child: says "ready" once set up, then answers each problem key read
    as a JSON line on stdin with one JSON line [wall, device] (one pass), until stdin ends."""
    remeasurer = Remeasurer(url, device, policy, device_time)
    print("ready", flush=True)
    for line in sys.stdin:
        print(json.dumps(remeasurer.layer(json.loads(line))), flush=True)


def remeasure_apart(url: str, args: argparse.Namespace, keys: list[dict[str, Any]]
                    ) -> tuple[Passes, Passes]:
    """`args.iso_passes` passes (wall and device times), each in a child process of its
    own, the children taking each layer in turn (A B A B ...).

    Why in turn: a layer's passes then run seconds apart, not minutes, so that a machine
    whose speed drifts (this project's CPU machine does) moves them alike, while the
    processes still differ (which on a GPU host decides host-bound configurations' times).
    Passes run one after the other (sequential child processes) showed the drift as noise:
    a median pass-to-pass spread of 29% on this CPU against 2% within one process.
    """
    merged: tuple[Passes, Passes] = ([{} for _ in keys], [{} for _ in keys])
    children: list[subprocess.Popen[str]] = []
    try:
        for _ in range(args.iso_passes):  # one at a time: no child starts while one times
            child = subprocess.Popen(
                [sys.executable, __file__, "--remeasure", url, "--device", args.device,
                 "--iso-budget-s", str(args.iso_budget_s),
                 "--iso-min-reps", str(args.iso_min_reps),
                 *(["--iso-device"] if args.iso_device else [])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            children.append(child)
            if _line(child) != "ready":
                raise RuntimeError("a re-measuring child did not start")
        for layer, key in enumerate(keys):
            for child in children:
                assert child.stdin is not None
                child.stdin.write(json.dumps(key) + "\n")
                child.stdin.flush()
                for into, found in zip(merged, json.loads(_line(child)), strict=True):
                    for name, values in found.items():
                        into[layer].setdefault(name, []).extend(values)
    finally:
        for child in children:
            if child.stdin is not None:
                child.stdin.close()
            child.wait()
    return merged


def _line(child: subprocess.Popen[str]) -> str:
    """The child's next line of output; RuntimeError where it ended instead."""
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        raise RuntimeError(f"a re-measuring child ended early (exit {child.wait()})")
    return line.strip()


def spread(times: list[float]) -> float:
    """How far apart one configuration's passes are: slowest over fastest, minus one."""
    return max(times) / min(times) - 1


def regret_rows(tuned: list[dict[str, Any]], isolated: list[dict[str, Any]],
                on_device: Passes | None = None) -> list[dict[str, Any]]:
    """Each tuned layer with its pick's isolated time, the isolated best and the regret.

    An isolated time is one number or a list of passes (their median counts); `noise` is
    the larger pass-to-pass spread of the pick and the best (0 with one pass). With
    `on_device`, each configuration's median device time too (`isolated_device_ms`).
    """
    rows = []
    for layer, (row, given) in enumerate(zip(tuned, isolated, strict=True)):
        passes = {name: v if isinstance(v, list) else [v] for name, v in given.items()}
        times = {name: statistics.median(v) for name, v in passes.items()}
        best = min(times, key=lambda name: times[name])
        pick_ms = times[row["pick"]]
        rows.append({**row, "pick_iso_ms": pick_ms, "best": best, "best_iso_ms": times[best],
                     "regret": pick_ms / times[best] - 1, "isolated_ms": times,
                     "isolated_passes_ms": passes,
                     "noise": max(spread(passes[row["pick"]]), spread(passes[best]))})
        if on_device and on_device[layer]:
            rows[-1]["isolated_device_ms"] = {
                name: statistics.median(v) for name, v in on_device[layer].items() if v}
    return rows


def _model_share(meta: dict[str, Any]) -> str:
    """What the timed tuning spent fitting the cost model, and whether it loaded a fit."""
    fitting = f"fitting the cost model: {meta.get('fit_s', 0.0):.1f} s"
    if "model_fits" in meta:  # absent from results before 2026-11-25
        fitting += f" in {meta['model_fits']} fits as the store grew"
    if meta.get("model_loads"):
        fitting += (f", after loading the fit of an earlier process (which took "
                    f"{meta.get('prefit_s', 0.0):.1f} s)")
    return fitting


def report(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The Markdown table and summary."""
    lines = [
        f"{meta['model']} batch {meta['batch']} on {meta['device']} ({meta['device_name']}), "
        f"{meta['date']}, commit {meta['commit']}", "",
        "| layer | problem | tuner's pick | tuned ms | pick alone ms | best alone | "
        "best alone ms | regret | noise |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['layer']} | {r['problem']} | {r['pick']} | {r['tuned_ms']:.3f} | "
            f"{r['pick_iso_ms']:.3f} | {r['best']} | {r['best_iso_ms']:.3f} | "
            f"{100 * r['regret']:.1f}% | {100 * r.get('noise', 0.0):.1f}% |"
        )
    regrets = [r["regret"] for r in rows]
    misses = sum(r > MISS for r in regrets)
    # A miss smaller than the re-measurement's own pass-to-pass spread is not evidence.
    beyond = sum(r["regret"] > max(MISS, r.get("noise", 0.0)) for r in rows)
    spreads = [spread(v) for r in rows for v in r.get("isolated_passes_ms", {}).values()
               if len(v) > 1]
    lines += [
        "",
        f"regret over {len(rows)} layers: median {100 * statistics.median(regrets):.1f}%, "
        f"worst {100 * max(regrets):.1f}%, {misses} above {100 * MISS:.0f}%, "
        f"{beyond} above both {100 * MISS:.0f}% and their noise",
        f"tuning wall time ({meta.get('mode', 'exhaustive')}): {meta['tune_s']:.1f} s "
        f"({_model_share(meta)}); isolated re-measurement: {meta['remeasure_s']:.1f} s",
    ]
    for r in rows:
        if r["regret"] > MISS:
            tuned = r.get("tuned_all_ms", {})
            seen = (f"the tuner measured it at {tuned[r['best']]:.3f} ms"
                    if tuned.get(r["best"]) is not None else "the tuner did not measure it")
            device = r.get("isolated_device_ms", {})
            on_device = (f"; on the device alone the pick takes {device[r['pick']]:.3f} ms, "
                         f"the best {device[r['best']]:.3f}"
                         if r["pick"] in device and r["best"] in device else "")
            lines.append(f"miss {r['layer']}: best alone {r['best']}; {seen}, its pick at "
                         f"{r['tuned_ms']:.3f} ms ({r['tuned_ms'] / r['pick_iso_ms']:.2f}x its "
                         f"time alone){on_device}")
    missed = [r for r in rows if r["regret"] > MISS]
    if missed:
        # A pick the tuner timed far from its time alone was timed on another machine state
        # or process (a drifting CPU VM, a host-bound GPU run): its miss says little of how
        # the tuner ranks.
        steady = sum(abs(r["tuned_ms"] / r["pick_iso_ms"] - 1) <= 0.1 for r in missed)
        lines.append(f"misses whose pick the tuner timed within 10% of its time alone: "
                     f"{steady} of {len(missed)}")
    lines += _host_bound_lines(rows)
    if meta.get("train_on"):
        lines.append(f"store first filled with {meta['train_on']} (exhaustive, untimed: "
                     f"{meta['train_s']:.1f} s)")
    if spreads:
        middle = 100 * statistics.median(spreads)
        lines.append(f"re-measurement noise (pass-to-pass spread of one configuration, "
                     f"{len(spreads)} configurations): median {middle:.1f}%, "
                     f"worst {100 * max(spreads):.1f}%")
    ratios = [ms / r["isolated_ms"][name] for r in rows
              for name, ms in r.get("tuned_all_ms", {}).items()
              if ms and r["isolated_ms"].get(name)]
    if len(ratios) >= 4:
        # Far from 1, the tuner times a configuration otherwise than it runs alone (order,
        # caches, clocks): its picks can then be wrong however quiet the machine.
        q = statistics.quantiles(ratios, n=4)
        lines.append(f"tuner's time over the isolated time ({len(ratios)} configurations): "
                     f"median {q[1]:.2f}, quartiles {q[0]:.2f}-{q[2]:.2f}")
    lines += _here_lines(rows)
    return "\n".join(lines)


#: Alone, a configuration whose wall time is at least this times its device time is
#: host-bound: the device waits for the host to enqueue its runs.
HOST_BOUND = 1.1


def _host_bound_lines(rows: list[dict[str, Any]]) -> list[str]:
    """With --iso-device: how many configurations were host-bound alone, and the layers
    whose pick or best was (where the wall times of two processes can disagree)."""
    timed = [(r, name, r["isolated_ms"][name] / device)
             for r in rows for name, device in r.get("isolated_device_ms", {}).items()
             if device and r["isolated_ms"].get(name)]
    if not timed:
        return []
    bound = [(r, name) for r, name, ratio in timed if ratio >= HOST_BOUND]
    layers = sorted({r["layer"] for r, name in bound if name in (r["pick"], r["best"])})
    return [f"host-bound alone (wall >= {HOST_BOUND}x device time): {len(bound)} of "
            f"{len(timed)} configurations; the pick or the best of "
            f"{', '.join(layers) or 'no layer'}"]


def _here_lines(rows: list[dict[str, Any]]) -> list[str]:
    """With --iso-here: the in-process isolated times over the child's, for every
    configuration and for those the tuner timed 10% faster than the child."""
    pairs = [(r["tuned_all_ms"].get(name), r["isolated_ms"][name], here)
             for r in rows for name, here in r.get("isolated_here_ms", {}).items()
             if here and r["isolated_ms"].get(name)]
    lines = []
    for label, chosen in (("all", pairs),
                          ("the tuner 10% faster", [p for p in pairs
                                                    if p[0] and p[0] < 0.9 * p[1]])):
        if len(chosen) < 4:
            continue
        child = statistics.quantiles([here / iso for _, iso, here in chosen], n=4)
        lines.append(f"in-process isolated time over the child's, {label} "
                     f"({len(chosen)} configurations): median {child[1]:.2f}, quartiles "
                     f"{child[0]:.2f}-{child[2]:.2f}")
    return lines


def main() -> None:
    """Tune, re-measure in a child process, print the regret table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--iso-budget-s", type=float, default=0.5,
                        help="timing budget per configuration in the isolated re-measurement")
    parser.add_argument("--mode", default="exhaustive", choices=["exhaustive", "fast"],
                        help="the find mode the network is tuned with")
    parser.add_argument("--train-on", default="",
                        help="network:batch,... tuned first (untimed) into the same store")
    parser.add_argument("--saved-model", action="store_true",
                        help="fit the cost model in a separate process before the timed "
                             "tuning, which then loads it")
    parser.add_argument("--iso-min-reps", type=int, default=5)
    parser.add_argument("--iso-passes", type=int, default=2,
                        help="isolated measurements of each configuration, each pass in a "
                             "process of its own (their spread is the noise)")
    parser.add_argument("--iso-here", action="store_true",
                        help="also re-measure once in this process after the child: whether "
                             "the tuner's and the child's times differ by process or by order")
    parser.add_argument("--iso-device", action="store_true",
                        help="the re-measurement also times each configuration on the device "
                             "alone (a GPU's): which configurations are host-bound there")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    parser.add_argument("--profile", type=Path, default=None,
                        help="tune again under cProfile (a copy of the store from before the "
                             "timed tuning) and write where the time went here")
    parser.add_argument("--remeasure", default=None, help=argparse.SUPPRESS)  # child: store URL
    parser.add_argument("--fit-model", default=None, help=argparse.SUPPRESS)  # child: store URL
    args = parser.parse_args()
    if args.saved_model and not (args.mode == "fast" and args.train_on):
        parser.error("--saved-model needs --mode fast and --train-on")
    # From the environment like the tuner's own policy ($CONVTUNE_BATCH_BELOW_MS, ...), so
    # that both sides time a candidate the same way.
    policy = replace(TimingPolicy.from_env(), warmup=2, budget_s=args.iso_budget_s,
                     min_reps=args.iso_min_reps, max_reps=max(100, args.iso_min_reps))
    if args.remeasure:
        serve_remeasure(args.remeasure, args.device, policy, args.iso_device)
        return
    if args.fit_model:
        print(json.dumps(fit_model(args.fit_model, args.device)))
        return

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench_tuner.db"
        # Kept fits go with the store (the children inherit it), never into the user's cache.
        os.environ["CONVTUNE_MODEL_DIR"] = f"{tmp}/models"
        began = time.perf_counter()
        for other in filter(None, args.train_on.split(",")):
            name, _, other_batch = other.partition(":")
            if name == args.model:
                raise SystemExit(f"--train-on must leave out the measured network {name}")
            tune(url, args.device, name, int(other_batch or args.batch))
        train_s = time.perf_counter() - began
        prefit: dict[str, float] = {}
        if args.saved_model:
            prefit = json.loads(subprocess.run(
                [sys.executable, __file__, "--fit-model", url, "--device", args.device],
                capture_output=True, text=True, check=True).stdout)
        if args.profile and Path(f"{tmp}/bench_tuner.db").exists():  # none: an empty store
            shutil.copyfile(f"{tmp}/bench_tuner.db", f"{tmp}/profiled.db")
        tuned, cost = tune(url, args.device, args.model, args.batch, args.mode)
        began = time.perf_counter()
        isolated = remeasure_apart(url, args, [row["key"] for row in tuned])
        remeasure_s = time.perf_counter() - began
        here = None
        if args.iso_here:  # the same re-measurement once more, in this process
            remeasurer = Remeasurer(url, args.device, policy)
            here = [remeasurer.layer(row["key"])[0] for row in tuned]
        if args.profile:
            profiled = f"sqlite:///{tmp}/profiled.db"
            if args.mode != "exhaustive" and args.saved_model:
                # The timed tuning loaded a kept fit; this copy's URL finds none, so fit it
                # here, outside the profile, as the timed tuning's store had been.
                fit_model(profiled, args.device)
            write_profile(args.profile, lambda: tune(
                profiled, args.device, args.model, args.batch, args.mode))
    rows = regret_rows(tuned, *isolated)
    for row, times in zip(rows, here or (), strict=False):
        row["isolated_here_ms"] = {name: v[0] for name, v in times.items()}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    info = identify(args.device).info
    meta = {"model": args.model, "batch": args.batch, "device": args.device,
            "device_name": info.get("name", "?"), "date": date.today().isoformat(),
            "commit": commit, **cost, **prefit,
            "remeasure_s": remeasure_s, "mode": args.mode, "train_on": args.train_on,
            "train_s": train_s}
    if args.out:
        args.out.write_text(json.dumps({**meta, "device_info": info, "rows": rows}, indent=2))
    print(report(rows, meta))


if __name__ == "__main__":
    main()
