"""The tuner's choice where passes disagree, ties chain, timers misbehave and stored data is
partial: the faults a review of the selection logic found on 2026-11-30. Scripted clocks
(tests/tuner/test_timing.py): the true speeds are known by construction."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from algorithms.runtime import TimingPolicy
from db.engine import open_store
from db.rows import MeasurementRow
from tests.fleet.helpers import row
from tests.tuner.fakes import small_problem
from tests.tuner.test_timing import Clocked, Script, Scripted, steady, tuner_for
from tuner import results as R
from tuner.errors import NoUsableAlgorithm
from tuner.measuring import failure_text, out_of_memory
from tuner.results import AlgorithmResult, best_of, per_algorithm, rank, within, within_noise
from tuner.tuning import Tuner

POLICY = TimingPolicy(warmup=1, budget_s=60.0, min_reps=3, max_reps=5, batch_below_ms=0)


def _then(first: list[float], rest: float) -> Script:
    """The samples `first` (warm-up included), then `rest` for good."""
    return lambda i: first[i] if i < len(first) else rest


# Bug: the round's contenders were the fastest single samples, so three rivals with one
# lucky sample each filled it and the first pass's median leader was left out; its
# screening median (taken while the machine was loaded) then lost to their quiet round:
# a 10% slower pick.
def test_the_first_pass_leader_always_enters_the_round(db_url: str) -> None:
    loaded_rival = [1.32, 1.10, 1.32, 1.32, 1.32, 1.32]  # one quiet sample: min 1.10
    runtime = Scripted({"L": _then([1.2] * 6, 1.0),  # truly 1.0, all of it screened loaded
                        "X": _then(loaded_rival, 1.1), "Y": _then(loaded_rival, 1.1),
                        "Z": _then(loaded_rival, 1.1)})
    tuner = tuner_for(db_url, runtime, POLICY, *(Clocked(n, runtime) for n in "LXYZ"))
    assert tuner.best(small_problem(), "cpu").algorithm == "L"
    assert runtime.samples["L"] > 6  # re-timed in the round


# Bug: a round that ran 5% slower than the first pass (a clock, other work) ranked a
# candidate left out of it, with its older and faster first-pass time, above the three it
# had re-timed: the slowest of four was picked.
def test_a_row_left_out_of_the_round_cannot_win_on_another_pass_s_time(db_url: str) -> None:
    speeds = {"A": 1.00, "B": 1.01, "C": 1.02, "D": 1.03}
    runtime = Scripted({n: _then([ms] * 6, ms * 1.05) for n, ms in speeds.items()})
    tuner = tuner_for(db_url, runtime, POLICY, *(Clocked(n, runtime) for n in speeds))
    ranked = tuner.find_candidates(small_problem(), "cpu")
    assert ranked[0].algorithm == "A"
    assert runtime.samples["D"] > 6  # timed beside the winner once it came out ahead


def _result(name: str, config: str, ms: float, ws: int) -> AlgorithmResult:
    return AlgorithmResult(algorithm=name, config=config, status=R.OK, time_ms=ms,
                           workspace_bytes=ws)


# Bug: per_algorithm ranked the algorithms' representatives again, and the 1% tie rule,
# applied anew, chained (B within 1% of A/c2, itself within 1% of A/c1): find()'s first
# answer was B, 1.5% slower than the fastest, while best() and every plan ran A/c2.
def test_one_result_per_algorithm_keeps_the_best_first() -> None:
    ranked = rank([_result("A", "c1", 1.000, 1 << 20), _result("A", "c2", 1.009, 500_000),
                   _result("B", "c", 1.015, 0)])
    assert (ranked[0].algorithm, ranked[0].config) == ("A", "c2")
    assert [(r.algorithm, r.config) for r in per_algorithm(ranked)] == [("A", "c2"), ("B", "c")]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 0.0])
def test_a_timer_s_bad_sample_fails_its_candidate_only(db_url: str, bad: float) -> None:
    # Bug: a NaN probe stopped the whole find (math.ceil of NaN in batch_size), a zero
    # sample won and raced out every other candidate, a negative one was stored and then
    # broke every ranking of the problem ("min() arg is an empty sequence").
    runtime = Scripted({"good": steady(1.0), "other": steady(1.2),
                        "bad": _then([1.0], bad) if bad == 0.0 else steady(bad)})
    tuner = tuner_for(db_url, runtime, POLICY,
                      *(Clocked(n, runtime) for n in ("good", "other", "bad")))
    found = {r.algorithm: r for r in tuner.find_candidates(small_problem(), "cpu")}
    assert found["good"].status == R.OK and found["good"].time_ms == 1.0
    assert found["bad"].status == R.FAILED and "the timer gave" in (found["bad"].error or "")
    again = tuner.find_candidates(small_problem(), "cpu")  # from the store
    assert again[0].algorithm == "good"


def test_a_zero_warm_up_probe_fails_nothing(db_url: str) -> None:
    # Pins that a warm-up probe of 0 ms (a timer too coarse for one short run) is allowed:
    # it sets no batch, and only a timed sample of 0 ms fails its candidate.
    runtime = Scripted({"coarse": _then([0.0], 1.0), "other": steady(1.2)})
    tuner = tuner_for(db_url, runtime, POLICY,
                      *(Clocked(n, runtime) for n in ("coarse", "other")))
    found = {r.algorithm: r for r in tuner.find_candidates(small_problem(), "cpu")}
    assert (found["coarse"].status, found["coarse"].time_ms) == (R.OK, 1.0)
    assert found["coarse"].error is None and found["other"].status == R.OK


class _ByProblem(Scripted):
    """Times by problem height: each algorithm's speed differs between the two problems."""

    def __init__(self, times: dict[tuple[str, int], float]) -> None:
        super().__init__({})
        self.times = times
        self.height = 0

    def sample_ms(self, fn: Callable[[], None], runs: int) -> float:
        fn()
        return self.times[(self.current, self.height)]


class _Sized(Clocked):
    def run(self, x, w, y, workspace, problem, config):  # type: ignore[no-untyped-def]
        self.runtime.height = problem.h  # type: ignore[attr-defined]
        super().run(x, w, y, workspace, problem, config)


# Bug: with part of a problem measured on this device (tuned under workspace_limit=0), a
# cached find with no limit answered every candidate from a prediction, over this device's
# own measurements of that very problem, and picked what they show to be slower.
def test_a_cached_prediction_keeps_this_device_s_own_rows(db_url: str) -> None:
    runtime = _ByProblem({("A", 9): 2.0, ("B", 9): 3.0, ("A", 11): 2.0, ("B", 11): 1.0})
    a, b = _Sized("A", runtime), _Sized("B", runtime, ws=1 << 16)
    tuner = Tuner(open_store(db_url), policy=POLICY, algorithms=(a, b),  # type: ignore[arg-type]
                  runtime=lambda device: runtime)
    tuner.find_candidates(small_problem(h=11), "cpu")  # the neighbour, both measured
    tuner.find_candidates(small_problem(h=9), "cpu", workspace_limit=0)  # only A here
    runtime.times[("B", 9)] = 3.0  # what B would measure on this problem
    cached = {r.algorithm: r for r in
              tuner.find_candidates(small_problem(h=9), "cpu", mode="cached")}
    assert cached["A"].source == R.MEASURED_HERE and cached["A"].time_ms == 2.0
    assert cached["B"].source == R.PREDICTED


class _MemoryOnce(Clocked):
    """A candidate whose first run finds the memory held by another process."""

    failed = False

    def run(self, x, w, y, workspace, problem, config):  # type: ignore[no-untyped-def]
        if not self.failed:
            self.failed = True
            raise MemoryError("out of memory allocating 1,073,741,824 bytes")
        super().run(x, w, y, workspace, problem, config)


# Bug: a failure for want of memory (another process held it) was stored like any failure,
# and auto mode never ran the candidate again: a 3x slower one won for good.
def test_an_out_of_memory_failure_is_reported_not_stored(db_url: str) -> None:
    runtime = Scripted({"best": steady(1.0), "slow": steady(3.0)})
    best, slow = _MemoryOnce("best", runtime), Clocked("slow", runtime)
    first = tuner_for(db_url, runtime, POLICY, best, slow)
    found = {r.algorithm: r for r in first.find_candidates(small_problem(), "cpu")}
    assert found["best"].status == R.FAILED and "MemoryError" in (found["best"].error or "")
    assert found["slow"].status == R.OK
    later = tuner_for(db_url, runtime, POLICY, best, slow)  # another process, memory free
    assert later.best(small_problem(), "cpu").algorithm == "best"


def test_every_kind_of_out_of_memory_failure_is_told_apart() -> None:
    # Pins out_of_memory's marks: NumPy's MemoryError says only "Unable to allocate", torch's
    # OutOfMemoryError and the CUDA libraries' statuses say their own; other failures, and
    # rows that did not fail, are stored.
    size = int(np.random.default_rng().integers(1, 64))

    def failed(exc: BaseException) -> MeasurementRow:
        return row("a", None, status=R.FAILED, error=failure_text(exc))
    for exc in (MemoryError(f"Unable to allocate {size}.0 GiB for an array"),
                RuntimeError(f"CUBLAS_STATUS_ALLOC_FAILED after {size} calls"),
                RuntimeError("cudaErrorMemoryAllocation: out of memory")):
        assert out_of_memory(failed(exc)), exc
    assert not out_of_memory(failed(RuntimeError(f"launch failed after {size} runs")))
    assert not out_of_memory(row("a", 1.0, error="MemoryError: noted, not failed"))


# Bug: racing stopped a candidate against the overall leader, and its few samples were
# stored like a full measurement: tuned with no limit (the leader needing a large
# workspace), a later find under workspace_limit=0 ranked two such short runs, one of which
# caught a burst, and picked the slower (the answer under a limit depended on history).
def test_racing_never_decides_an_answer_under_a_workspace_limit(db_url: str) -> None:
    def script() -> dict[str, Script]:
        return {"BIG": steady(1.0), "C1": _then([2.0, 3.2, 2.0, 3.2], 2.0),  # a burst first
                "C2": steady(2.1)}

    def algos(runtime: Scripted) -> tuple[Clocked, ...]:
        return (Clocked("BIG", runtime, ws=1 << 20), Clocked("C1", runtime),
                Clocked("C2", runtime))

    runtime = Scripted(script())
    tuner_for(db_url, runtime, POLICY, *algos(runtime)).find(small_problem(), "cpu")
    assert runtime.samples["C1"] > 1 + POLICY.min_reps  # raced only against what fits
    again = Scripted(script())
    limited = tuner_for(db_url, again, POLICY, *algos(again)).find_candidates(
        small_problem(), "cpu", workspace_limit=0)
    assert limited[0].algorithm == "C1" and not again.samples  # from the store


def _unusable(name: str, config: str, status: str, ws: int = 0) -> AlgorithmResult:
    return AlgorithmResult(algorithm=name, config=config, status=status, time_ms=None,
                           workspace_bytes=ws, error=status)


# Pins which configuration find() reports for each algorithm: a usable one over any other,
# a measured failure (failed, wrong_result) over one over the workspace limit, the first
# failure seen, and of over-limit ones the smallest workspace (the first of equals).
def test_each_algorithm_is_represented_by_its_most_telling_configuration() -> None:
    rng = np.random.default_rng()
    a_ms, f_ms = (float(t) for t in rng.uniform(0.5, 2.0, size=2))
    results = [
        _unusable("A", "c1", R.FAILED), _result("A", "c2", a_ms, 64),
        _unusable("B", "c1", R.OVER_WORKSPACE_LIMIT, 100),
        _unusable("B", "c2", R.WRONG_RESULT, 500),
        _unusable("C", "c1", R.WRONG_RESULT, 500),
        _unusable("C", "c2", R.OVER_WORKSPACE_LIMIT, 100),
        _unusable("D", "c1", R.OVER_WORKSPACE_LIMIT, 300),
        _unusable("D", "c2", R.OVER_WORKSPACE_LIMIT, 200),
        _unusable("D", "c3", R.OVER_WORKSPACE_LIMIT, 200),
        _unusable("E", "c1", R.FAILED), _unusable("E", "c2", R.WRONG_RESULT),
        _result("F", "c", f_ms, 0),
    ]
    chosen = per_algorithm(rank(results))
    assert {r.algorithm: r.config for r in chosen} == {
        "A": "c2", "B": "c2", "C": "c1", "D": "c2", "E": "c1", "F": "c"}
    assert [r.usable for r in chosen] == [True, True] + [False] * 4


# Pins that only a result with a time is usable: a model's "not predicted" entry (status
# ok, no time) once sorted as 0 ms would rank first and be the best.
def test_a_result_without_a_time_is_never_ranked_first_or_chosen() -> None:
    timed = _result("timed", "c", float(np.random.default_rng().uniform(0.5, 2.0)), 0)
    untimed = AlgorithmResult(algorithm="untimed", config="c", status=R.OK, time_ms=None,
                              workspace_bytes=0, source=R.PREDICTED)
    ranked = rank([untimed, timed])
    assert [r.algorithm for r in ranked] == ["timed", "untimed"] and not untimed.usable
    assert best_of(ranked, small_problem(), "cpu", None).algorithm == "timed"
    with pytest.raises(NoUsableAlgorithm, match="untimed/c: ok"):
        best_of(rank([untimed]), small_problem(), "cpu", None)


# Pins the two boundaries of verdicts and ties: an error exactly at the tolerance is ok
# (measuring and the bundle check agree by it), and a median exactly 1% above the fastest's
# is a tie, 1% measured against the fastest (values exact in binary floating point).
def test_tolerance_and_tie_bands_include_their_bound() -> None:
    limit = float(np.random.default_rng().uniform(1e-6, 1e-2))
    assert within(limit, limit) and not within(float(np.nextafter(limit, 1.0)), limit)
    assert not within(float("nan"), limit) and not within(float("inf"), limit)
    fast = _result("fast", "c", 100.0, 1 << 20)
    assert within_noise(fast, _result("x", "c", 101.0, 0))  # 1.0 <= 0.01 x 100.0
    assert not within_noise(fast, _result("x", "c", 101.005, 0))  # 1% of 101.005 is not it
    assert rank([fast, _result("x", "c", 101.0, 0)])[0].algorithm == "x"
    unmeasured = AlgorithmResult(algorithm="u", config="c", status=R.FAILED, time_ms=None,
                                 workspace_bytes=0)
    assert not within_noise(unmeasured, fast) and not within_noise(fast, unmeasured)
