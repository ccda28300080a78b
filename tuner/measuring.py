"""Measuring candidates on one device: verify each against the float64 reference, then time it.

The runtime is passed in (Triton-style: the benchmarker is a parameter), so tests give a
fake one instead of patching globals. A failing candidate is data, not a crash: its row
says `failed` or `wrong_result` with the reason.

A pass warms the device first, races the candidates (one whose fastest run is clearly
slower than the leader's median stops after min_reps), and ends with a confirmation round:
the top few are re-timed interleaved (A B C A B C ...), so drifting clocks and bursts of
interference hit them alike, and their rows carry those times. Since the round decides,
the first pass only screens: it takes at most `screen_reps` samples of a candidate (the
policy's max_reps where no round follows). Every timed region holds the tuner.quiet gate,
so none of our background threads runs inside one.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from algorithms.problem import ConvProblem
from algorithms.reference import tolerance
from algorithms.runtime import Runtime, Timing, TimingPolicy, random_operands
from db.rows import MeasurementRow, utcnow
from tuner import results as R
from tuner.candidates import Candidate
from tuner.env import env_number
from tuner.quiet import timed_region
from tuner.version import TUNER_VERSION

log = logging.getLogger("convtune.measuring")

#: Default race factor ($CONVTUNE_RACE_FACTOR), confirmation size ($CONVTUNE_CONFIRM_TOP)
#: and most samples of the screening pass ($CONVTUNE_SCREEN_REPS).
RACE_FACTOR = 1.5
CONFIRM_TOP = 3
# On an H100 (2026-11-23) tuning a ResNet-50 layer took about 30 ms per candidate (17-19 of
# them), for kernels of 0.06-0.3 ms: by the policy's arithmetic mostly the max_reps samples
# of the candidates near the leader, whose best the confirmation round re-times anyway.
SCREEN_REPS = 10


@dataclass(frozen=True)
class RacePolicy:
    """How candidates race, and how many of the best are confirmed at the end."""

    # "Clearly worse": a fastest run beyond factor x the leader's median. The same factor
    # bounds who enters the confirmation round.
    factor: float = RACE_FACTOR
    confirm_top: int = CONFIRM_TOP  # fewer than 2: no confirmation round
    # Most samples per candidate in a first pass that a confirmation round follows (never
    # fewer than the timing policy's min_reps).
    screen_reps: int = SCREEN_REPS

    @classmethod
    def from_env(cls) -> RacePolicy:
        """Defaults, overridden by $CONVTUNE_RACE_FACTOR, $CONVTUNE_CONFIRM_TOP and
        $CONVTUNE_SCREEN_REPS."""
        return cls(factor=env_number("CONVTUNE_RACE_FACTOR", RACE_FACTOR, float, positive=True),
                   confirm_top=env_number("CONVTUNE_CONFIRM_TOP", CONFIRM_TOP, int),
                   screen_reps=env_number("CONVTUNE_SCREEN_REPS", SCREEN_REPS, int,
                                          positive=True))

    def __post_init__(self) -> None:
        if not self.factor >= 1:
            raise ValueError(f"race factor must be at least 1, got {self.factor}")
        if self.confirm_top < 0:
            raise ValueError(f"confirm_top must be non-negative, got {self.confirm_top}")
        if self.screen_reps < 1:
            raise ValueError(f"screen_reps must be at least 1, got {self.screen_reps}")

    def first_pass(self, policy: TimingPolicy, candidates: int) -> TimingPolicy:
        """`policy` for the first pass over `candidates`: capped at screen_reps samples
        when a confirmation round will follow, unchanged when the pass is final."""
        if self.confirm_top < 2 or candidates < 2:
            return policy
        reps = max(policy.min_reps, min(policy.max_reps, self.screen_reps))
        return replace(policy, max_reps=reps)


@dataclass(frozen=True)
class Measured:
    """The rows of one measuring pass; `fault` says why it stopped early, if it did."""

    rows: list[MeasurementRow]
    fault: str | None = None


class Measurer:
    """Verifies and times candidates of one problem on one runtime."""

    def __init__(self, runtime: Runtime, policy: TimingPolicy, rng: np.random.Generator,
                 race: RacePolicy | None = None) -> None:
        self.runtime = runtime
        self.policy = policy
        self.rng = rng
        self.race = race or RacePolicy.from_env()

    def measure(self, problem: ConvProblem, candidates: Sequence[Candidate]) -> Measured:
        """One row per candidate, in order; stops after a candidate that kills the device.

        Inputs are fresh random values (never zeros); outputs are compared with the float64
        reference (computed and compared where the runtime keeps its arrays) before
        anything is timed.
        """
        if not candidates:
            return Measured([])
        runtime = self.runtime
        # The operands of the problem's direction: (x, w) -> y, (dy, w) -> dx, (x, dy) -> dw.
        x, w, y = random_operands(runtime, problem, self.rng)
        rows: list[MeasurementRow] = []
        timings: list[Timing | None] = []
        with runtime.activate():  # run() enqueues on the current device's stream
            ref = runtime.reference(x, w, problem)
            with timed_region():
                runtime.warm_up()
            screening = self.race.first_pass(self.policy, len(candidates))
            for cand in candidates:
                row, timing = self._one(problem, cand, x, w, y, ref, screening,
                                        self._cutoff(rows))
                rows.append(row)
                timings.append(timing)
                fault = runtime.fault() if row.status == R.FAILED else None
                if fault is not None:
                    return Measured(rows, fault)
            try:
                self._confirm(problem, candidates, rows, timings, (x, w, y))
            except Exception:  # keep the first pass's times; the fault probe decides
                log.warning("confirmation round of %s failed; keeping the first pass's "
                            "times", problem.describe(), exc_info=True)
                fault = runtime.fault()
                if fault is not None:
                    return Measured(rows, fault)
        return Measured(rows)

    def _cutoff(self, rows: list[MeasurementRow]) -> float | None:
        """The race cutoff: the leader's median times the factor (None before a leader)."""
        medians = [r.time_ms for r in rows if r.status == R.OK and r.time_ms is not None]
        return min(medians) * self.race.factor if medians else None

    def _run(self, problem: ConvProblem, cand: Candidate, operands: tuple[Any, Any, Any],
             workspace: Any) -> Callable[[], None]:
        x, w, y = operands

        def run() -> None:
            cand.algorithm.run(x, w, y, workspace, problem, cand.config)

        return run

    def _one(
        self, problem: ConvProblem, cand: Candidate, x: Any, w: Any, y: Any, ref: Any,
        policy: TimingPolicy, cutoff: float | None,
    ) -> tuple[MeasurementRow, Timing | None]:
        runtime = self.runtime
        algorithm, config = cand.algorithm, cand.config
        row: dict[str, Any] = {
            "algorithm": algorithm.name, "config": config, "impl_hash": cand.impl_hash,
            "time_ms": None, "spread_ms": None, "min_ms": None, "reps": 0,
            "workspace_bytes": cand.workspace_bytes, "max_error": None, "rel_error": None,
            "error": None, "measured_at": utcnow(), "tuner_version": TUNER_VERSION,
        }
        timing = None
        try:
            workspace = runtime.workspace(cand.workspace_bytes)
            if workspace is not None:
                workspace.fill(0xFF)  # reads of unwritten workspace show up as NaN
            y.fill(np.nan)  # unwritten outputs show up as NaN
            run = self._run(problem, cand, (x, w, y), workspace)
            run()
            runtime.synchronize()
            max_error, rel = runtime.compare(y, ref, problem.dtype)
            row["max_error"] = max_error
            row["rel_error"] = rel
            limit = tolerance(problem.dtype, algorithm.name, problem.math)
            if not np.isfinite(rel) or rel > limit:
                row["status"] = R.WRONG_RESULT
                row["error"] = f"relative error {rel:.3g} exceeds {limit:g}"
                return MeasurementRow(**row), None
            with timed_region():
                timing = runtime.time(run, replace(policy, cutoff_ms=cutoff))
            row.update(
                status=R.OK, time_ms=timing.median_ms, spread_ms=timing.spread_ms,
                min_ms=timing.min_ms, reps=len(timing.times_ms),
            )
        except Exception as exc:
            row["status"] = R.FAILED
            last = traceback.extract_tb(exc.__traceback__)[-1:]
            where = f" at {last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno}" if last else ""
            row["error"] = f"{type(exc).__name__}: {exc}{where}"[:2000]
            timing = None
        return MeasurementRow(**row), timing

    def _confirm(
        self, problem: ConvProblem, candidates: Sequence[Candidate],
        rows: list[MeasurementRow], timings: list[Timing | None],
        operands: tuple[Any, Any, Any],
    ) -> None:
        """Re-time the top candidates interleaved; their rows take the round's times."""
        top = contenders(rows, self.race)
        if len(top) < 2:
            return
        # One workspace, the largest needed, serves all: they run one after the other.
        workspace = self.runtime.workspace(max(candidates[i].workspace_bytes for i in top))
        runs = [self._run(problem, candidates[i], operands, workspace) for i in top]
        batches = [t.runs_per_sample if (t := timings[i]) is not None else 1 for i in top]
        for i, batch, times in zip(top, batches, self._rounds(runs, batches), strict=True):
            confirmed = Timing(tuple(times), batch)
            rows[i] = replace(
                rows[i], time_ms=confirmed.median_ms, spread_ms=confirmed.spread_ms,
                min_ms=confirmed.min_ms, reps=len(times), measured_at=utcnow(),
            )

    def _rounds(self, runs: list[Callable[[], None]], batches: list[int]) -> list[list[float]]:
        """Samples of each run, taken A B C A B C ...: rounds as the policy allows for one."""
        policy, sample = self.policy, self.runtime.sample_ms
        for _ in range(policy.warmup):
            with timed_region():
                for run, batch in zip(runs, batches, strict=True):
                    sample(run, batch)
        times: list[list[float]] = [[] for _ in runs]
        began = time.perf_counter()
        while len(times[0]) < policy.min_reps or (
            time.perf_counter() - began < policy.budget_s and len(times[0]) < policy.max_reps
        ):
            with timed_region():  # one round at a time: chores may run between rounds
                for slot, run, batch in zip(times, runs, batches, strict=True):
                    slot.append(sample(run, batch))
        return times


def contenders(rows: list[MeasurementRow], race: RacePolicy) -> list[int]:
    """Indices of the rows to confirm: the fastest few within the race factor of the leader.

    Ordered by fastest run, not median: interference only adds time, so a noisy
    candidate's fastest run still says what it can do.
    """
    ok = [i for i, r in enumerate(rows)
          if r.status == R.OK and r.time_ms is not None and r.min_ms is not None]
    if len(ok) < 2 or race.confirm_top < 2:
        return []
    leader = min(rows[i].time_ms or 0.0 for i in ok)
    near = [i for i in ok if (rows[i].min_ms or 0.0) <= leader * race.factor]
    return sorted(near, key=lambda i: rows[i].min_ms or 0.0)[: race.confirm_top]
