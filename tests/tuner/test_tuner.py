"""The tuner's selection, workspace semantics, failure recording and database answers."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from algorithms.cpu.runtime import CpuRuntime
from algorithms.problem import ConvProblem
from algorithms.reference import reference_conv, tolerance
from algorithms.runtime import TimingPolicy
from db.engine import open_store
from tests.tuner.fakes import Fake, Lazy, Raises, Refuses, Wrong, small_problem
from tests.tuner.test_timing import Clocked, FailsFrom, Scripted, steady, tuner_for
from tuner import results as R
from tuner.candidates import validate_workspace_limit
from tuner.errors import DeviceFault, NotInDatabase, NoUsableAlgorithm
from tuner.results import within_noise
from tuner.tuning import Tuner

QUICK = TimingPolicy(warmup=1, budget_s=0.0, min_reps=2, max_reps=2)


def make(db_url: str, *algos: Fake, **kwargs: Any) -> Tuner:
    return Tuner(open_store(db_url), policy=QUICK, algorithms=algos, **kwargs)  # type: ignore[arg-type]


def test_every_algorithm_once_usable_first(db_url: str) -> None:
    algos = (Fake("a"), Raises("b"), Wrong("c"), Refuses("d"), Lazy("e"), Fake("f", ws=64))
    results = make(db_url, *algos).find(small_problem(), "cpu")
    assert sorted(r.algorithm for r in results) == list("abcdef")
    assert [r.status for r in results[:2]] == [R.OK, R.OK]
    # Fastest first, unless the runner-up is within noise and needs less workspace.
    assert results[0].time_ms is not None and results[1].time_ms is not None
    assert results[0].time_ms <= results[1].time_ms or (
        within_noise(results[1], results[0])
        and results[0].workspace_bytes < results[1].workspace_bytes
    )
    by = {r.algorithm: r for r in results}
    assert by["b"].status == R.FAILED and "too many resources" in (by["b"].error or "")
    assert by["c"].status == R.WRONG_RESULT and by["c"].rel_error == pytest.approx(0.01, rel=1e-3)
    assert by["d"].status == R.UNSUPPORTED and by["d"].error == "only 1x1 filters"
    assert by["e"].status == R.WRONG_RESULT  # unwritten (NaN-poisoned) outputs are caught
    assert all(r.source == R.FRESH for r in results if r.status != R.UNSUPPORTED)


class _Off(Fake):
    """Correct but for a relative error of `off` on every output."""

    def __init__(self, name: str, off: float) -> None:
        super().__init__(name)
        self.off = off

    def run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        self.runs += 1
        y[...] = reference_conv(x, w, problem) * (1 + self.off)


def test_the_verdict_is_the_dtype_s_own_tolerance(db_url: str) -> None:
    # Pins measuring's verdict: a relative error a third of the tolerance (float32's 1e-5
    # for these) is ok, three times it wrong_result, whatever the inputs.
    limit = tolerance("float32", "near")
    tuner = make(db_url, _Off("near", limit / 3), _Off("far", 3 * limit))
    by = {r.algorithm: r for r in tuner.find(small_problem(), "cpu")}
    assert by["near"].status == R.OK and by["far"].status == R.WRONG_RESULT
    assert by["far"].rel_error == pytest.approx(3 * limit, rel=0.05)


class _Direct(Fake):
    """A candidate whose plans run through its direct runner (as a GPU algorithm's runs are
    replayed): `run` itself is never to be called."""

    def __init__(self, name: str) -> None:
        super().__init__(name, ws=64)
        self.lanes: list[Any] = []

    def direct_runner(self, problem: ConvProblem, config: str, workspace: Any) -> Any:
        def direct(lane: Any, x: Any, w: Any, y: Any) -> None:
            self.lanes.append(lane)
            Fake.run(self, x, w, y, workspace(lane), problem, config)

        return direct

    def run(self, *args: Any) -> None:
        raise AssertionError("the tuner ran the algorithm as no plan runs it")


class _Recording(_Direct):
    """A direct runner whose first call for its operands works something out first (as a
    replay's two dry runs), unless `prepare` did so ahead."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.probe_calls: list[bool] = []  # each call: whether it had to work it out

    def direct_runner(self, problem: ConvProblem, config: str, workspace: Any) -> Any:
        inner = super().direct_runner(problem, config, workspace)
        outer = self
        ready: list[bool] = []

        class Runner:
            def prepare(self, lane: Any, x: Any, w: Any, y: Any) -> None:
                ready.append(True)

            def __call__(self, lane: Any, x: Any, w: Any, y: Any) -> None:
                outer.probe_calls.append(not ready)
                if not ready:
                    time.sleep(0.02)  # tenths of a millisecond on a GPU host; larger here
                    ready.append(True)
                inner(lane, x, w, y)

        return Runner()


# Bug: the warm-up probe that sizes each sample's batch timed a new runner's first call,
# which works its replay out (two dry runs): launch-bound GPU candidates were timed in
# samples of 2-4 runs instead of about 30, unlike the re-measurement they are judged by.
def test_a_runners_first_call_is_worked_out_before_its_probe(db_url: str) -> None:
    recording = _Recording("recording")
    make(db_url, recording, Fake("a")).find(small_problem(), "cpu")
    # The verifying run works it out itself; every timing pass prepares its runner first.
    assert recording.probe_calls[0] is True and not any(recording.probe_calls[1:])
    assert len(recording.probe_calls) > 1 + 1 + 2 * 2  # the samples hold several runs


def test_candidates_are_verified_and_timed_as_plans_run_them(db_url: str) -> None:
    direct = _Direct("direct")
    results = {r.algorithm: r for r in make(db_url, direct, Fake("a")).find(small_problem(),
                                                                               "cpu")}
    assert results["direct"].status == R.OK and results["direct"].time_ms is not None
    # The verifying run and at least QUICK's warm-up and two timed runs, on the lane.
    assert len(direct.lanes) >= 4 and set(direct.lanes) == {CpuRuntime().lane()}


def test_wrong_or_failing_candidate_is_never_best(db_url: str) -> None:
    tuner = make(db_url, Wrong("fast_but_wrong"), Raises("broken"), Fake("slow_but_right"))
    assert tuner.best(small_problem(), "cpu").algorithm == "slow_but_right"
    with pytest.raises(NoUsableAlgorithm, match="fast_but_wrong/default: wrong_result"):
        make(db_url, Wrong("fast_but_wrong")).best(small_problem(n=1), "cpu")


def test_workspace_limit_zero_never_returns_workspace(db_url: str) -> None:
    tuner = make(db_url, Fake("needs_ws", ws=1024), Fake("none", ws=0))
    for _ in range(3):
        best = tuner.best(small_problem(), "cpu", workspace_limit=0)
        assert best.algorithm == "none" and best.workspace_bytes == 0
    results = tuner.find(small_problem(), "cpu", workspace_limit=1023)
    by = {r.algorithm: r for r in results}
    assert by["needs_ws"].status == R.OVER_WORKSPACE_LIMIT
    assert "1024" in (by["needs_ws"].error or "")
    with pytest.raises(NoUsableAlgorithm):
        make(db_url, Fake("needs_ws", ws=1024)).best(small_problem(), "cpu", workspace_limit=0)


def test_bad_workspace_limit_and_mode(db_url: str) -> None:
    tuner = make(db_url, Fake("a"))
    for bad in (-1, 1.5, "10", True):
        with pytest.raises(ValueError, match="workspace_limit"):
            tuner.find(small_problem(), "cpu", workspace_limit=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        tuner.find(small_problem(), "cpu", mode="quick")


def test_a_numpy_integer_workspace_limit_becomes_an_int() -> None:
    # Pins validate_workspace_limit's promise of a plain int: a limit worked out with NumPy
    # goes on as an int (into the answer cache's keys and messages), not as np.int64.
    limit = np.int64(np.random.default_rng().integers(0, 1 << 40))
    validated = validate_workspace_limit(limit)
    assert type(validated) is int and validated == limit


def test_second_find_answers_from_database(db_url: str) -> None:
    a, b = Fake("a"), Fake("b", ws=4096)
    tuner = make(db_url, a, b)
    first = tuner.find(small_problem(), "cpu")
    runs = (a.runs, b.runs)
    second = make(db_url, a, b).find(small_problem(), "cpu")
    assert (a.runs, b.runs) == runs  # nothing measured again
    assert all(r.source == R.MEASURED_HERE for r in second)
    assert [(r.algorithm, r.time_ms) for r in first] == [(r.algorithm, r.time_ms) for r in second]


def test_new_workspace_limit_answered_from_table(db_url: str) -> None:
    a, b = Fake("a", ws=0), Fake("b", ws=4096)
    make(db_url, a, b).find(small_problem(), "cpu")  # no limit: both measured
    runs = (a.runs, b.runs)
    best = make(db_url, a, b).best(small_problem(), "cpu", workspace_limit=0)
    assert best.algorithm == "a" and best.source == R.MEASURED_HERE
    assert (a.runs, b.runs) == runs


def test_limit_first_then_wider_measures_only_what_is_missing(db_url: str) -> None:
    a, b = Fake("a", ws=0), Fake("b", ws=4096)
    make(db_url, a, b).find(small_problem(), "cpu", workspace_limit=0)
    assert b.runs == 0
    a_runs = a.runs
    results = make(db_url, a, b).find(small_problem(), "cpu")
    by = {r.algorithm: r for r in results}
    assert a.runs == a_runs and b.runs > 0
    assert by["a"].source == R.MEASURED_HERE and by["b"].source == R.FRESH


def test_cached_mode_and_tune_mode(db_url: str) -> None:
    a = Fake("a")
    with pytest.raises(NotInDatabase, match="has not been measured"):
        make(db_url, a).find(small_problem(), "cpu", mode="cached")
    assert a.runs == 0
    make(db_url, a).find(small_problem(), "cpu")
    assert make(db_url, a).find(small_problem(), "cpu", mode="cached")[0].source == R.MEASURED_HERE
    runs = a.runs
    assert make(db_url, a).find(small_problem(), "cpu", mode="tune")[0].source == R.FRESH
    assert a.runs > runs


def test_results_from_older_code_are_not_served(db_url: str) -> None:
    old = Fake("a")
    make(db_url, old).find(small_problem(), "cpu")
    new = Fake("a")
    new.impl_hash = "fake-v2"
    result = make(db_url, new).find(small_problem(), "cpu")[0]
    assert result.source == R.FRESH and new.runs > 0


def test_failures_are_stored_and_served(db_url: str) -> None:
    broken = Raises("broken")
    make(db_url, broken, Fake("ok")).find(small_problem(), "cpu")
    runs = broken.runs
    again = {r.algorithm: r for r in make(db_url, broken, Fake("ok")).find(small_problem(), "cpu")}
    assert broken.runs == runs
    assert again["broken"].status == R.FAILED and again["broken"].source == R.MEASURED_HERE


def test_configs_are_candidates_and_find_reports_the_best_per_algorithm(db_url: str) -> None:
    tuner = make(db_url, Fake("tiles", ws=16, configs=("t1", "t2", "t3")))
    per_config = tuner.find_candidates(small_problem(), "cpu")
    assert sorted(r.config for r in per_config) == ["t1", "t2", "t3"]
    per_algorithm = tuner.find(small_problem(), "cpu")
    assert len(per_algorithm) == 1
    assert per_algorithm[0].time_ms == min(r.time_ms for r in per_config)  # type: ignore[type-var]


class _FaultyRuntime(CpuRuntime):
    """The host runtime, but able to 'lose the device' the way a sticky CUDA error does."""

    lost: str | None = None

    def fault(self) -> str | None:
        return self.lost


class _KillsDevice(Fake):
    """Kills the device on its run number `on` (1: the verification run)."""

    def __init__(self, name: str, runtime: _FaultyRuntime, on: int = 1) -> None:
        super().__init__(name)
        self.runtime = runtime
        self.on = on

    def run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        if self.runs + 1 < self.on:
            super().run(x, w, y, workspace, problem, config)
            return
        self.runs += 1
        self.runtime.lost = "CUDARuntimeError: cudaErrorIllegalAddress"
        raise RuntimeError("an illegal memory access was encountered")


@pytest.mark.parametrize("on", [1, 3])
def test_device_fault_stops_tuning_and_a_new_process_skips_the_culprit(
    db_url: str, on: int
) -> None:
    # on=1: the culprit dies while verified, before anything is timed; on=3: while timed,
    # interleaved with the others. Either way only failures are stored: a verified
    # candidate's row is no result until it is timed, so the next process measures it.
    runtime = _FaultyRuntime()
    before, culprit, after = Fake("a"), _KillsDevice("b", runtime, on), Fake("c")
    with pytest.raises(DeviceFault, match=r"b/default failed .*2 candidate\(s\) were not"):
        make(db_url, before, culprit, after, runtime=lambda device: runtime).find(
            small_problem(), "cpu")
    assert (before.runs > 0, culprit.runs, after.runs > 0) == (True, on, on > 1)

    runtime.lost = None  # a fresh process has a working device again
    runs = before.runs
    results = {r.algorithm: r for r in make(db_url, before, culprit, after).find(
        small_problem(), "cpu")}
    assert culprit.runs == on and before.runs > runs and after.runs > 0
    assert results["b"].status == R.FAILED and results["b"].source == R.MEASURED_HERE
    assert "illegal memory access" in (results["b"].error or "")
    assert results["a"].source == results["c"].source == R.FRESH
    assert results["a"].status == results["c"].status == R.OK


class _FaultyScripted(Scripted):
    """A scripted clock that can lose the device, as _FaultyRuntime does."""

    lost: str | None = None

    def fault(self) -> str | None:
        return self.lost


class _KillsFrom(FailsFrom):
    """A correct candidate whose run number `first` kills the device."""

    message = "an illegal memory access was encountered"

    def failing(self) -> None:
        self.runtime.lost = "CUDARuntimeError: cudaErrorIllegalAddress"  # type: ignore[attr-defined]


def test_a_device_fault_in_the_confirmation_round_names_its_culprit(db_url: str) -> None:
    # Pins that a candidate killing the device in the confirmation round is the one the
    # fault names and stores as failed (the culprit comes last of the rows), not the row
    # that happened to be last.
    runtime = _FaultyScripted({"killer": steady(1.0), "b": steady(1.1), "c": steady(1.2)})
    policy = TimingPolicy(warmup=1, budget_s=0.0, min_reps=3, max_reps=3, batch_below_ms=0)
    # Runs: 1 verification, 2 warm-up, 3-5 the first pass, 6 the round's warm-up.
    killer = _KillsFrom("killer", runtime, first=6)
    tuner = tuner_for(db_url, runtime, policy, killer, Clocked("b", runtime),
                      Clocked("c", runtime))
    with pytest.raises(DeviceFault, match=r"after killer/default failed \(RuntimeError"):
        tuner.find(small_problem(), "cpu")
    runtime.lost = None
    stored = {r.algorithm: r for r in tuner.find(small_problem(), "cpu", mode="cached")}
    killed = stored["killer"]
    assert killed.status == R.FAILED and "illegal memory" in (killed.error or "")
    assert stored["b"].status == stored["c"].status == R.OK  # their first pass's times

