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
2. In separate processes, re-measures every usable stored configuration in isolation
   (benchmarks/remeasure.py): each alone (each sample primed as the tuner's are: on the
   CPU, an untimed run), a layer's configurations taking turns so that a drift of the
   machine's speed hits them alike, on fresh inputs, after a device warm-up, with a longer
   timing budget and no racing or confirmation; each pass in a process of its own,
   because a host-bound configuration's time (a run that takes longer to enqueue than to
   execute) differs between processes on one machine by up to 2x, where a device-bound
   one's agrees within about 1% (BENCHMARKS.md, "Three measurements of the same
   configurations"): the spread between passes, the `noise`, then includes that. The
   processes take each layer in turn, so that a layer's passes run close together in time.
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
import logging
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms.runtime import Prepared
from benchmarks.remeasure import Remeasurer, iso_policy, remeasure_apart
from benchmarks.tuner_report import regret_rows, report
from db.engine import open_store
from tuner.devices import get_runtime, identify
from tuner.model import model_cache
from tuner.networks import network_problems
from tuner.results import FRESH, MEASURED_HERE
from tuner.tuning import Tuner

#: The sources of a result this device measured (not predicted, not another device's).
MEASURED = (FRESH, MEASURED_HERE)


class TimingRecords(logging.Handler):
    """The tuner's per-configuration timing records (tuner.measuring.log_lanes): runs per
    sample and the host's enqueueing per run, the confirmation round's over the screening's."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.found: dict[str, dict[str, dict[str, Any]]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the record's `timing` field by problem key and configuration."""
        timing = getattr(record, "timing", None)
        if timing is not None:
            key = json.dumps(timing["key"], sort_keys=True)
            self.found.setdefault(key, {})[timing["config"]] = timing

    @contextmanager
    def listening(self) -> Iterator[None]:
        """Collect the measuring log's debug records while the block runs."""
        logger = logging.getLogger("convtune.measuring")
        level = logger.level
        logger.addHandler(self)
        logger.setLevel(logging.DEBUG)
        try:
            yield
        finally:
            logger.removeHandler(self)
            logger.setLevel(level)

    def of(self, key: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """A layer's "tuned_batch" and "tuned_host_ms" per configuration (empty where the
        tuner timed nothing, or its runtime does not tell the host's time)."""
        found = self.found.get(json.dumps(key, sort_keys=True), {})
        return {"tuned_batch": {name: t["batch"] for name, t in found.items()},
                "tuned_host_ms": {name: t["host_ms"] for name, t in found.items()
                                  if t["host_ms"] is not None}}


@contextmanager
def counting_prepare(device: str) -> Iterator[list[Prepared]]:
    """What the device's runtime builds before candidates' first runs while the block runs
    (each Runtime.prepare's answer: kernels compiled ahead on a GPU, nothing on the CPU)."""
    runtime = get_runtime(device)
    found: list[Prepared] = []
    prepare = runtime.prepare

    def counted(problem: Any, candidates: Any) -> Prepared:
        done = prepare(problem, candidates)
        found.append(done)
        return done

    runtime.prepare = counted  # type: ignore[method-assign]
    try:
        yield found
    finally:
        del runtime.prepare  # the class's method again


def tune(url: str, device: str, model: str, batch: int,
         mode: str = "exhaustive") -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Tune each distinct layer into the store at `url`: its pick, and what the tuning
    cost: its wall time, the seconds spent fitting the cost model and how many fits were
    loaded, and the kernels built ahead of the candidates' first runs (how many, in how
    many seconds, how many failed, by how many threads at most)."""
    tuner = Tuner(open_store(url))
    timings = TimingRecords()
    began = time.perf_counter()
    picks = []
    with timings.listening(), counting_prepare(device) as built:
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
        # "heuristic" answers with this device's measurements where there are any (the
        # predictions are left out); "cached" gave only predictions for a layer whose
        # store was incomplete, as fast mode leaves every one.
        stored = tuner.find_candidates(problem, device, mode="heuristic")
        rows.append({"layer": layer.name, "problem": problem.describe(), "key": problem.key(),
                     "pick": f"{best.algorithm}/{best.config}", "tuned_ms": best.time_ms,
                     "note": best.note, "tune_s": layer_s,
                     "tuned_all_ms": {f"{r.algorithm}/{r.config}": r.time_ms
                                      for r in stored if r.usable and r.source in MEASURED},
                     **timings.of(problem.key())})
    cache = model_cache(tuner.store)
    return rows, {"tune_s": tune_s, "fit_s": cache.fit_s, "model_fits": cache.fits,
                  "model_loads": cache.loads, "built": sum(b.built for b in built),
                  "build_s": sum(b.seconds for b in built),
                  "build_failed": sum(len(b.failed) for b in built),
                  "build_threads": max((b.threads for b in built), default=0)}


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
    parser.add_argument("--fit-model", default=None, help=argparse.SUPPRESS)  # child: store URL
    args = parser.parse_args()
    if args.saved_model and not (args.mode == "fast" and args.train_on):
        parser.error("--saved-model needs --mode fast and --train-on")
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
        if args.out:  # the timed tuning kept even if a later phase is cut off or fails
            args.out.write_text(json.dumps({**cost, **prefit, "mode": args.mode,
                                            "partial": "before the re-measurement",
                                            "tuned": tuned}, indent=2, default=str))
        began = time.perf_counter()
        isolated = remeasure_apart(url, args, [row["key"] for row in tuned])
        remeasure_s = time.perf_counter() - began
        here = None
        if args.iso_here:  # the same re-measurement once more, in this process
            remeasurer = Remeasurer(url, args.device,
                                    iso_policy(args.iso_budget_s, args.iso_min_reps))
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
