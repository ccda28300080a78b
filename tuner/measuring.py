"""Measuring candidates on one device: verify each against the float64 reference, then time it.

The runtime is passed in (Triton-style: the benchmarker is a parameter), so tests give a
fake one instead of patching globals. A failing candidate is data, not a crash: its row
says `failed` or `wrong_result` with the reason.

A pass warms the device first and verifies every candidate. Then it times the verified
ones together, interleaved (A B C A B C ...): a burst of interference or a drifting clock
hits them alike. Timed one after the other, a burst that lasted one candidate's turn
(0.1-0.5 s) inflated even its fastest run, and a true best could be screened out
(ResNet-50 res5.1x1a.s2 on the CPU: 52% regret in one run of bench_tuner, right in 30
re-tunings). Candidates race: one whose fastest run is clearly slower than the leader's
median stops after min_reps. Each sample is primed first (on the CPU, an untimed run of
a short candidate), so that it starts from its own caches, not the previous candidate's.
A confirmation round then re-times the top few, interleaved
again, up to `confirm_reps` samples each within one budget shared by the round, and their
rows carry those times. Since the round decides, the first pass only screens: it takes at most
`screen_reps` samples of a candidate (the policy's max_reps where no round follows). Every
timed region holds the tuner.quiet gate, so none of our background threads runs inside one.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from algorithms.problem import ConvProblem
from algorithms.reference import tolerance
from algorithms.reference_gemm import fill_nan
from algorithms.runtime import Runtime, Timing, TimingPolicy, batch_size, random_operands
from db.rows import ERROR_TEXT_LIMIT, MeasurementRow, utcnow
from tuner import results as R
from tuner.candidates import Candidate
from tuner.quiet import timed_region
from tuner.racing import RacePolicy, challengers, contenders
from tuner.version import TUNER_VERSION

log = logging.getLogger("convtune.measuring")

@dataclass(frozen=True)
class Measured:
    """The rows of one measuring pass; `fault` says why it stopped early, if it did."""

    rows: list[MeasurementRow]
    fault: str | None = None


class Lane:
    """One candidate's samples in an interleaved pass (bookkeeping, not a value)."""

    def __init__(self, run: Callable[[], None]) -> None:
        self.run = run
        self.batch = 1  # back-to-back runs per sample
        self.last_ms = 0.0  # its latest time per run (the fastest warm-up's at first)
        self.times: list[float] = []
        self.host_ms: list[float] = []  # the host's enqueueing per run, where the runtime tells
        self.spent_s = 0.0  # wall time of this lane's samples
        self.done = False
        self.error: str | None = None
        self.fatal = False  # its failure left the device unable to run work

    @property
    def active(self) -> bool:
        """Still sampling."""
        return self.error is None and not self.done

    def review(self, policy: TimingPolicy, cutoff: float | None) -> None:
        """Stop after min_reps at max_reps, the budget, or a fastest sample past `cutoff`."""
        if len(self.times) < policy.min_reps:
            return
        self.done = (len(self.times) >= policy.max_reps or self.spent_s >= policy.budget_s
                     or (cutoff is not None and min(self.times) > cutoff))

    def settle(self, row: MeasurementRow) -> MeasurementRow:
        """`row` with this lane's times, or failed with its error."""
        if self.error is not None:
            return replace(row, status=R.FAILED, error=self.error)
        timing = Timing(tuple(self.times), self.batch)
        return replace(row, time_ms=timing.median_ms, spread_ms=timing.spread_ms,
                       min_ms=timing.min_ms, reps=len(self.times), measured_at=utcnow())


class Measurer:
    """Verifies and times candidates of one problem on one runtime."""

    def __init__(self, runtime: Runtime, policy: TimingPolicy, rng: np.random.Generator,
                 race: RacePolicy | None = None) -> None:
        self.runtime = runtime
        self.policy = policy
        self.rng = rng
        self.race = race or RacePolicy.from_env()

    def measure(self, problem: ConvProblem, candidates: Sequence[Candidate]) -> Measured:
        """One row per candidate, in order; stops after a candidate that kills the device
        (its row last).

        Inputs are fresh random values (never zeros); each candidate's output is compared
        with the float64 reference (computed and compared where the runtime keeps its
        arrays) before anything is timed. Then the verified candidates are timed together,
        interleaved, and the best few are confirmed.
        """
        if not candidates:
            return Measured([])
        runtime = self.runtime
        # The operands of the problem's direction: (x, w) -> y, (dy, w) -> dx, (x, dy) -> dw.
        with _fits_in_memory(problem):
            operands = random_operands(runtime, problem, self.rng)
        rows: list[MeasurementRow] = []
        with runtime.activate():  # run() enqueues on the current device's stream
            # Kernels built before the first run, several at once, rather than one by one
            # inside each candidate's first run.
            runtime.prepare(problem, [(cand.algorithm, cand.config) for cand in candidates])
            with _fits_in_memory(problem):
                ref = runtime.reference(operands[0], operands[1], problem)
            with timed_region():
                runtime.warm_up()
            for cand in candidates:
                rows.append(self._verify(problem, cand, operands, ref))
                fault = runtime.fault() if rows[-1].status == R.FAILED else None
                if fault is not None:  # verified rows are no results until timed
                    return Measured([r for r in rows if r.status != R.OK], fault)
            verified = [i for i, row in enumerate(rows) if row.status == R.OK]
            if not verified:
                return Measured(rows)
            # One workspace, the largest needed, serves all: they run one after the other.
            workspace = runtime.workspace(max(candidates[i].workspace_bytes for i in verified))
            runs = [candidate_run(runtime, problem, candidates[i], operands, workspace)
                    for i in verified]
            lanes = self._interleaved(runs, self.race.first_pass(self.policy, len(verified)),
                                      self.race.factor,
                                      [candidates[i].workspace_bytes for i in verified])
            fatal = next((j for j, lane in enumerate(lanes) if lane.fatal), None)
            if fatal is not None:  # partly timed rows are no results either
                culprit = lanes[fatal].settle(rows[verified[fatal]])
                return Measured([*(r for r in rows if r.status != R.OK), culprit],
                                runtime.fault())
            for i, lane in zip(verified, lanes, strict=True):
                rows[i] = lane.settle(rows[i])
            log_lanes(problem, [rows[i] for i in verified], lanes, "screen")
            top = contenders(rows, self.race)
            confirmed: set[int] = set()
            while len(top) >= 2:  # each round confirms rows never confirmed before
                runs = [candidate_run(runtime, problem, candidates[i], operands, workspace)
                        for i in top]
                confirm = self.race.confirm_round(self.policy, len(top))
                measured = self._confirm(problem, rows, top, self._interleaved(runs, confirm))
                if measured.fault is not None:
                    return measured
                confirmed.update(top)
                top = challengers(rows, confirmed, self.race)
            return Measured(rows)

    def _verify(self, problem: ConvProblem, cand: Candidate, operands: tuple[Any, Any, Any],
                ref: Any) -> MeasurementRow:
        """The candidate's row after one checked run: `ok` (untimed), wrong or failed."""
        runtime = self.runtime
        algorithm = cand.algorithm
        row: dict[str, Any] = {
            "algorithm": algorithm.name, "config": cand.config, "impl_hash": cand.impl_hash,
            "status": R.OK, "time_ms": None, "spread_ms": None, "min_ms": None, "reps": 0,
            "workspace_bytes": cand.workspace_bytes, "max_error": None, "rel_error": None,
            "error": None, "measured_at": utcnow(), "tuner_version": TUNER_VERSION,
        }
        y = operands[2]
        try:
            workspace = runtime.workspace(cand.workspace_bytes)
            if workspace is not None:
                workspace.fill(0xFF)  # reads of unwritten workspace show up as NaN
            fill_nan(y)  # unwritten outputs show up as NaN (bfloat16 bits included)
            candidate_run(runtime, problem, cand, operands, workspace)()
            runtime.synchronize()
            max_error, rel = runtime.compare(y, ref, problem.dtype)
            row["max_error"] = max_error
            row["rel_error"] = rel
            limit = tolerance(problem.dtype, algorithm.name, problem.math)
            if not R.within(rel, limit):
                row["status"] = R.WRONG_RESULT
                row["error"] = f"relative error {rel:.3g} exceeds {limit:g}"
        except Exception as exc:
            row["status"] = R.FAILED
            row["error"] = failure_text(exc)
        return MeasurementRow(**row)

    def _interleaved(self, runs: list[Callable[[], None]], policy: TimingPolicy,
                     factor: float | None = None,
                     workspaces: Sequence[int] | None = None) -> list[Lane]:
        """Time `runs` interleaved, A B C A B C ...: a burst of interference or a drifting
        clock then hits them alike, where timing one after the other let it decide between
        them. Each first takes its untimed warm-ups (the fastest decides its batch); each
        sample is primed (runtime.prime), so that it does not start from the previous
        candidate's caches. With a race `factor`, a run stops after min_reps once its
        fastest sample is past `factor` x the median of the leader among the runs needing no
        more workspace than it (`workspaces`; default all alike). Stops at the first failure
        that leaves the device unable to run work.

        Why per workspace: a run stopped after min_reps is stored like any, and under a
        workspace limit that excludes the overall leader the stored answer was decided
        between such short, noisy runs (a review of the tuner, 2026-11-30). Raced only
        against what fits wherever it fits, a stopped run is clearly worse than something
        every limit that allows it allows too."""
        lanes = [Lane(run) for run in runs]
        sizes = list(workspaces) if workspaces is not None else [0] * len(runs)
        sample = self.runtime.sample_ms
        for lane in lanes:
            try:
                prepare_run(lane.run)
                with timed_region():
                    probes = [_checked(sample(lane.run, 1), probe=True)
                              for _ in range(policy.warmup)]
            except Exception as exc:
                if self._fail(lane, exc):
                    return lanes
                continue
            lane.batch = batch_size(min(probes, default=None), policy)
            lane.last_ms = min(probes, default=0.0)
        while active := [lane for lane in lanes if lane.active]:
            with timed_region():  # one round at a time: chores may run between rounds
                for lane in active:
                    began = time.perf_counter()
                    try:
                        if len(active) > 1:  # another candidate ran last
                            self.runtime.prime(lane.run, lane.last_ms)
                        lane.times.append(_checked(sample(lane.run, lane.batch)))
                        lane.last_ms = lane.times[-1]
                        if (host := self.runtime.last_host_ms) is not None:
                            lane.host_ms.append(host)
                    except Exception as exc:
                        if self._fail(lane, exc):
                            return lanes
                    lane.spent_s += time.perf_counter() - began
            medians = [(sizes[j], statistics.median(lane.times)) for j, lane in enumerate(lanes)
                       if lane.error is None and len(lane.times) >= policy.min_reps]
            for j, lane in enumerate(lanes):
                if not lane.active:
                    continue
                fits = [ms for size, ms in medians if size <= sizes[j]]
                lane.review(policy, min(fits) * factor if factor is not None and fits else None)
        return lanes

    def _fail(self, lane: Lane, exc: Exception) -> bool:
        """Record a lane's failure; whether it left the device unable to run work."""
        lane.error = failure_text(exc)
        lane.fatal = self.runtime.fault() is not None
        return lane.fatal

    def _confirm(self, problem: ConvProblem, rows: list[MeasurementRow], top: list[int],
                 lanes: list[Lane]) -> Measured:
        """The rows, the confirmed ones (`top`) with their round's times. A candidate that
        fails in the round is failed; the others then keep the first pass's times."""
        if not any(lane.error for lane in lanes):
            for i, lane in zip(top, lanes, strict=True):
                rows[i] = lane.settle(rows[i])
            log_lanes(problem, [rows[i] for i in top], lanes, "confirm")
            return Measured(rows)
        log.warning("confirmation round of %s failed; keeping the first pass's times",
                    problem.describe())
        for i, lane in zip(top, lanes, strict=True):
            if lane.error is not None:
                rows[i] = lane.settle(rows[i])
        culprit = next((i for i, lane in zip(top, lanes, strict=True) if lane.fatal), None)
        if culprit is None:
            return Measured(rows)
        return Measured([r for i, r in enumerate(rows) if i != culprit] + [rows[culprit]],
                        self.runtime.fault())


def _checked(ms: float, probe: bool = False) -> float:
    """A timer's sample, or RuntimeError (the lane fails) unless finite and positive (zero
    allowed for a warm-up probe, whose batch it does not set): a NaN stopped the whole
    find, a zero won and raced out every other candidate, a negative time was stored and
    then broke every ranking of the problem (a review of the tuner, 2026-11-30)."""
    if not math.isfinite(ms) or ms < 0 or (ms == 0 and not probe):
        raise RuntimeError(f"the timer gave {ms!r} ms for a sample")
    return ms


@contextmanager
def _fits_in_memory(problem: ConvProblem) -> Iterator[None]:
    """A MemoryError (NumPy's, CuPy's) as a one-line ValueError: a valid problem may still
    be too large here for its operands or float64 reference, bad input, not a crash."""
    try:
        yield
    except MemoryError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "out of memory"
        raise ValueError(f"{problem.describe()} does not fit in this machine's memory for "
                         f"tuning: {reason}") from None


def candidate_run(runtime: Runtime, problem: ConvProblem, cand: Candidate,
                  operands: tuple[Any, Any, Any], workspace: Any) -> Callable[[], None]:
    """One run of `cand` on `operands` (on the runtime's current lane) as a plan's direct
    path makes it: through the algorithm's direct runner where it has one (a GPU algorithm's
    calls replayed, algorithms.cuda._replay), else its `run`. So what is verified against
    the reference is what plans run, and a launch-bound candidate's host time is timed as
    plans pay it (issue 11: timed as they would really run); benchmarks/remeasure.py times
    the same."""
    x, w, y = operands
    runner = getattr(cand.algorithm, "direct_runner", None)
    if runner is None:
        return partial(cand.algorithm.run, x, w, y, workspace, problem, cand.config)
    direct = runner(problem, cand.config, lambda _lane: workspace)
    return partial(direct, runtime.lane(), x, w, y)


def prepare_run(run: Callable[[], None]) -> None:
    """Do, untimed, what a candidate_run's first call would do before its work: a replay
    worked out from two dry runs (algorithms.cuda._replay), which the warm-up probe that
    sizes every sample's batch would otherwise time, so that a launch-bound candidate was
    timed in samples of a few runs instead of about 30."""
    prepare = getattr(getattr(run, "func", None), "prepare", None)
    if prepare is not None:
        prepare(*run.args)  # type: ignore[attr-defined]  # a partial, as candidate_run's


def log_lanes(problem: ConvProblem, rows: list[MeasurementRow], lanes: list[Lane],
              stage: str) -> None:
    """One debug record per timed lane: its runs per sample and the host's enqueueing per
    run, the record's `timing` field holding them (benchmarks/bench_tuner.py reads it to
    tell whether a host-bound pick was timed with its host's cost)."""
    if not log.isEnabledFor(logging.DEBUG):
        return
    for row, lane in zip(rows, lanes, strict=True):
        host = statistics.median(lane.host_ms) if lane.host_ms else None
        log.debug("%s %s %s/%s: %d samples of %d runs, host %s ms per run", stage,
                  problem.describe(), row.algorithm, row.config, len(lane.times), lane.batch,
                  "?" if host is None else f"{host:.4g}",
                  extra={"timing": {"key": problem.key(), "config": f"{row.algorithm}/"
                                    f"{row.config}", "stage": stage, "batch": lane.batch,
                                    "host_ms": host}})


#: What a failure for want of memory says (NumPy's and CuPy's MemoryError, torch's
#: OutOfMemoryError, the CUDA libraries' allocation statuses): memory another process held
#: for a while, not a property of the candidate.
_OUT_OF_MEMORY = ("MemoryError:", "OutOfMemoryError:", "out of memory",
                  "cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY",
                  "CUBLAS_STATUS_ALLOC_FAILED", "CUFFT_ALLOC_FAILED")


def out_of_memory(row: MeasurementRow) -> bool:
    """Whether `row` failed for want of memory: reported, but not stored, so that the next
    find measures the candidate again (stored, it was never run again in auto mode, and a
    3x slower candidate won for good; a review of the tuner, 2026-11-30)."""
    return row.status == R.FAILED and any(mark in (row.error or "") for mark in _OUT_OF_MEMORY)


def failure_text(exc: BaseException) -> str:
    """A failed candidate's error: type, message and where it was raised, bounded, with
    any NUL spelled out (PostgreSQL refuses NUL in text: the whole tuning's save failed)."""
    last = traceback.extract_tb(exc.__traceback__)[-1:]
    where = f" at {last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno}" if last else ""
    return f"{type(exc).__name__}: {exc}{where}".replace("\x00", "\\x00")[:ERROR_TEXT_LIMIT]
