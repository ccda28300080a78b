"""Faithful timing (issue 11): confirmation, racing, the workspace tie-break, a quiet host.

The runtime here is the CPU one with a scripted clock: each algorithm's samples come from
a script, so the true speeds are known by construction and are the oracle.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from algorithms.cpu.runtime import CpuRuntime
from algorithms.problem import ConvProblem
from algorithms.runtime import TimingPolicy, batch_size, time_runs, warm_until_stable
from db.engine import open_store
from tests.fleet.helpers import row
from tests.tuner.fakes import Fake, Wrong, small_problem
from tuner import claims, quiet
from tuner import results as R
from tuner.racing import RacePolicy, challengers, contenders
from tuner.results import AlgorithmResult, rank, within_noise
from tuner.tuning import Tuner

Script = Callable[[int], float]


class Scripted(CpuRuntime):
    """The host runtime with a scripted clock: sample i of algorithm `name` is script[name](i)."""

    def __init__(self, script: dict[str, Script], sleep_s: float = 0.0) -> None:
        self.script = script
        self.sleep_s = sleep_s
        self.samples: dict[str, int] = defaultdict(int)
        self.current = ""
        self.timing = False  # inside a sample: what the quiet-host test watches

    def sample_ms(self, fn: Callable[[], None], runs: int) -> float:
        self.timing = True
        try:
            fn()  # a Clocked algorithm names itself in self.current
            if self.sleep_s:
                time.sleep(self.sleep_s)  # off the GIL: a background thread could run now
            name = self.current
            self.samples[name] += 1
            return self.script[name](self.samples[name] - 1)
        finally:
            self.timing = False

    def warm_up(self) -> None:
        """The scripted clock needs no warming."""

    def prime(self, fn: Callable[[], None], last_ms: float) -> None:
        """The scripted clock has no caches (Cached, below, has)."""


class Clocked(Fake):
    """A correct fake that tells the scripted runtime whose sample is being taken."""

    def __init__(self, name: str, runtime: Scripted, ws: int = 0) -> None:
        super().__init__(name, ws=ws)
        self.runtime = runtime

    def run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        self.runtime.current = self.name
        super().run(x, w, y, workspace, problem, config)


def steady(ms: float) -> Script:
    return lambda i: ms


def tuner_for(db_url: str, runtime: Scripted, policy: TimingPolicy, *algos: Fake,
              **kwargs: Any) -> Tuner:
    return Tuner(open_store(db_url), policy=policy, algorithms=algos,  # type: ignore[arg-type]
                 runtime=lambda device: runtime, **kwargs)


def by_name(results: list[AlgorithmResult]) -> dict[str, AlgorithmResult]:
    return {r.algorithm: r for r in results}


@pytest.mark.parametrize("confirm_top", ["3", "1"])
def test_confirmation_round_corrects_a_noisy_first_pass(
    db_url: str, monkeypatch: pytest.MonkeyPatch, confirm_top: str
) -> None:
    # Issue 11 (res5.1x1a.rest: 72% regret): a burst of interference while the truly fastest
    # candidate was timed inflated its median, and the tuner picked a slower one.
    monkeypatch.setenv("CONVTUNE_CONFIRM_TOP", confirm_top)
    fast_true, slow_true = 1.0, 1.2
    noisy = [fast_true, 2.6, fast_true, 2.7]  # warm-up, then a noisy first pass
    rt = Scripted({"a": lambda i: noisy[i] if i < len(noisy) else fast_true,
                   "b": steady(slow_true)})
    policy = TimingPolicy(warmup=1, budget_s=0.0, min_reps=3, max_reps=3, batch_below_ms=0)
    tuner = tuner_for(db_url, rt, policy, Clocked("a", rt), Clocked("b", rt))
    best = tuner.best(small_problem(), "cpu")
    if confirm_top == "1":  # without the round, the noisy pass decides: the wrong pick
        assert best.algorithm == "b"
        return
    assert best.algorithm == "a" and best.time_ms == fast_true
    results = by_name(tuner.find(small_problem(), "cpu"))  # the stored rows agree
    assert results["a"].time_ms == fast_true and results["b"].time_ms == slow_true
    assert results["a"].reps == 3 and results["a"].source == R.MEASURED_HERE


class Bursty(Scripted):
    """A scripted clock with a burst of interference: samples `burst` (counted over every
    algorithm, in the order taken) take three times as long."""

    def __init__(self, script: dict[str, Script], burst: range) -> None:
        super().__init__(script)
        self.burst = burst
        self.taken = 0

    def sample_ms(self, fn: Callable[[], None], runs: int) -> float:
        ms = super().sample_ms(fn, runs)
        self.taken += 1
        return ms * 3 if self.taken - 1 in self.burst else ms


def test_a_burst_cannot_screen_out_the_true_best(db_url: str) -> None:
    # Bug pinned: ResNet-50 res5.1x1a.s2 on the CPU (bench_tuner, 2026-11-23) picked a
    # candidate 52% slower than the best, which 30 re-tunings all picked. Candidates were
    # timed one after the other, so a burst during the best's turn inflated even its fastest
    # run, and the confirmation round never saw it. Interleaved, the burst hits all alike.
    speeds = {"best": 1.0, "second": 1.1, "third": 1.2}
    rt = Bursty({name: steady(ms) for name, ms in speeds.items()}, burst=range(12))
    policy = TimingPolicy(warmup=1, budget_s=60.0, min_reps=3, max_reps=10, batch_below_ms=0)
    tuner = tuner_for(db_url, rt, policy, *(Clocked(name, rt) for name in speeds))
    best = tuner.best(small_problem(), "cpu")
    assert best.algorithm == "best" and best.time_ms == 1.0


class Cached(Scripted):
    """A scripted clock with caches: a sample taken right after another algorithm's run
    (timed or not) takes `cold[name]` times as long."""

    def __init__(self, script: dict[str, Script], cold: dict[str, float]) -> None:
        super().__init__(script)
        self.cold = cold
        self.last_run = ""  # the algorithm whose data the caches hold

    def sample_ms(self, fn: Callable[[], None], runs: int) -> float:
        previous = self.last_run
        ms = super().sample_ms(fn, runs)
        self.last_run = self.current
        return ms * self.cold[self.current] if previous != self.current else ms

    def prime(self, fn: Callable[[], None], last_ms: float) -> None:
        CpuRuntime.prime(self, fn, last_ms)  # the CPU's: one untimed run of a short fn
        self.last_run = self.current


def test_each_sample_starts_from_its_own_caches(db_url: str) -> None:
    # Bug pinned: interleaved, each sample started from the caches of the candidate timed
    # before it. On the CPU that flattered direct against im2col_gemm (ResNet-50 b8
    # res5.1x1b, 2026-11-27: 0.99-1.10x it in the tuner, 1.04-1.17x alone, in six rounds of
    # six), and the tuner picked direct where, alone, im2col_gemm was 10-16% faster. The
    # cold factors here are a model of that, not measured ones.
    speeds, cold = {"gemm": 1.0, "direct": 1.04}, {"gemm": 1.125, "direct": 1.06}
    rt = Cached({name: steady(ms) for name, ms in speeds.items()}, cold)
    policy = TimingPolicy(warmup=1, budget_s=60.0, min_reps=3, max_reps=6, batch_below_ms=0)
    tuner = tuner_for(db_url, rt, policy, *(Clocked(name, rt) for name in speeds))
    results = by_name(tuner.find(small_problem(), "cpu"))
    assert {name: results[name].time_ms for name in speeds} == pytest.approx(speeds)
    assert tuner.best(small_problem(), "cpu").algorithm == "gemm"


class FailsFrom(Clocked):
    """A correct candidate whose runs fail from run number `first` on."""

    message = "launch failed on a later run"

    def __init__(self, name: str, runtime: Scripted, first: int) -> None:
        super().__init__(name, runtime)
        self.first = first

    def failing(self) -> None:
        """What a failing run does before it raises (nothing more here)."""

    def run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        if self.runs + 1 >= self.first:
            self.runs += 1
            self.failing()
            raise RuntimeError(self.message)
        super().run(x, w, y, workspace, problem, config)


def test_a_failure_in_the_confirmation_round_is_stored_and_the_rest_kept(db_url: str) -> None:
    rt = Scripted({"flaky": steady(1.0), "b": steady(1.1), "c": steady(1.2)})
    policy = TimingPolicy(warmup=1, budget_s=0.0, min_reps=3, max_reps=3, batch_below_ms=0)
    # Runs: 1 verification, 2 warm-up, 3-5 the first pass, 6 on the confirmation round.
    flaky = FailsFrom("flaky", rt, first=6)
    tuner = tuner_for(db_url, rt, policy, flaky, Clocked("b", rt), Clocked("c", rt))
    results = by_name(tuner.find(small_problem(), "cpu"))
    assert results["flaky"].status == R.FAILED
    assert "launch failed on a later run" in (results["flaky"].error or "")
    assert (results["b"].status, results["b"].time_ms, results["b"].reps) == (R.OK, 1.1, 3)
    assert tuner.best(small_problem(), "cpu").algorithm == "b"


# Pins that when a candidate fails in the confirmation round, the others keep their first
# pass's times: the round's are not mixed in (b's round here runs slower than its pass).
def test_a_failed_round_leaves_the_others_their_first_pass_times(db_url: str) -> None:
    rt = Scripted({"flaky": steady(1.0), "b": lambda i: 1.1 if i < 1 + 3 else 1.3,
                   "c": steady(1.2)})
    policy = TimingPolicy(warmup=1, budget_s=0.0, min_reps=3, max_reps=3, batch_below_ms=0)
    flaky = FailsFrom("flaky", rt, first=6)  # fails at its warm-up in the round
    tuner = tuner_for(db_url, rt, policy, flaky, Clocked("b", rt), Clocked("c", rt))
    results = by_name(tuner.find_candidates(small_problem(), "cpu"))
    assert rt.samples["b"] > 1 + 3  # the round did time b
    assert results["flaky"].status == R.FAILED
    assert (results["b"].time_ms, results["c"].time_ms) == (1.1, 1.2)
    assert tuner.best(small_problem(), "cpu").algorithm == "b"


@pytest.mark.parametrize("beside", ["alone", "a wrong one"])
def test_a_lone_verified_candidate_is_timed_in_full(
    db_url: str, monkeypatch: pytest.MonkeyPatch, beside: str
) -> None:
    # Pins that the first pass is final, and takes the policy's max_reps, when fewer than two
    # candidates pass verification: no round follows, so screen_reps must not cap it.
    monkeypatch.setenv("CONVTUNE_CONFIRM_TOP", "3")
    monkeypatch.setenv("CONVTUNE_SCREEN_REPS", "3")
    rt = Scripted({"only": steady(1.0)})
    policy = TimingPolicy(warmup=1, budget_s=60.0, min_reps=2, max_reps=8, batch_below_ms=0)
    others = [] if beside == "alone" else [Wrong("wrong")]  # fails verification: untimed
    tuner = tuner_for(db_url, rt, policy, Clocked("only", rt), *others)
    results = by_name(tuner.find_candidates(small_problem(), "cpu"))
    assert results["only"].reps == 8 and rt.samples["only"] == 1 + 8
    if others:
        assert results["wrong"].status == R.WRONG_RESULT


@pytest.mark.parametrize("factor", ["1.5", "100"])
def test_racing_stops_a_hopeless_candidate_after_min_reps(
    db_url: str, monkeypatch: pytest.MonkeyPatch, factor: str
) -> None:
    # Issue 11: `direct 8x32k4` took 12.7 ms x 20 reps on a layer whose best is 0.13 ms.
    monkeypatch.setenv("CONVTUNE_RACE_FACTOR", factor)
    rt = Scripted({"lead": steady(1.0), "hopeless": steady(10.0), "close": steady(1.4)})
    policy = TimingPolicy(warmup=1, budget_s=60.0, min_reps=3, max_reps=12, batch_below_ms=0)
    algos = (Clocked("lead", rt), Clocked("hopeless", rt), Clocked("close", rt))
    results = by_name(tuner_for(db_url, rt, policy, *algos).find(small_problem(), "cpu"))
    hopeless = results["hopeless"]
    assert hopeless.status == R.OK and hopeless.time_ms == 10.0  # still stored, as measured
    if factor == "100":  # a factor nobody loses by: every candidate gets max_reps
        assert hopeless.reps == 12
        return
    assert hopeless.reps == 3 and rt.samples["hopeless"] == 1 + 3  # warm-up + min_reps
    assert results["close"].reps == 12  # within the factor: timed in full
    assert rank(list(results.values()))[0].algorithm == "lead"


def test_racing_spares_a_candidate_exactly_at_the_factor_and_the_budget_stops_all(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pins the race's bound (a fastest run of exactly factor x the leader's median is not
    # clearly worse: timed in full) and the budget (spent: every lane stops at min_reps).
    monkeypatch.setenv("CONVTUNE_CONFIRM_TOP", "1")  # the first pass is final
    monkeypatch.setenv("CONVTUNE_RACE_FACTOR", "1.5")
    speeds = {"lead": 1.0, "edge": 1.5, "out": 1.5000001}
    for budget_s, reps in ((60.0, {"lead": 8, "edge": 8, "out": 3}),
                           (0.0, {"lead": 3, "edge": 3, "out": 3})):
        rt = Scripted({name: steady(ms) for name, ms in speeds.items()})
        policy = TimingPolicy(warmup=1, budget_s=budget_s, min_reps=3, max_reps=8,
                              batch_below_ms=0)
        tuner = tuner_for(db_url, rt, policy, *(Clocked(name, rt) for name in speeds))
        found = by_name(tuner.find_candidates(small_problem(), "cpu", mode="tune"))
        assert {name: found[name].reps for name in speeds} == reps


@pytest.mark.parametrize(("confirm_top", "confirm_reps"),
                         [("3", None), ("1", None), ("3", "8"), ("2", None)])
def test_first_pass_screens_and_the_round_decides(
    db_url: str, monkeypatch: pytest.MonkeyPatch, confirm_top: str, confirm_reps: str | None
) -> None:
    # Issue 11 (ResNet-50 took 15.7 s to tune on an H100): each candidate near the leader
    # got max_reps samples in the first pass, then the best of them as many again in the
    # confirmation round. The first pass now stops at screen_reps when a round follows.
    # And (a fast ResNet-50 tuning took 4.2 s of finds on an H200, 2026-11-27) the round's
    # three candidates each took max_reps samples of 0.5 ms, about half of all: the round
    # now stops at confirm_reps (20 unless set; max_reps here is 20 too).
    monkeypatch.setenv("CONVTUNE_CONFIRM_TOP", confirm_top)
    monkeypatch.setenv("CONVTUNE_SCREEN_REPS", "5")
    if confirm_reps is not None:
        monkeypatch.setenv("CONVTUNE_CONFIRM_REPS", confirm_reps)
    speeds = {"lead": 1.0, "close": 1.1, "third": 1.2, "fourth": 1.3}
    rt = Scripted({name: steady(ms) for name, ms in speeds.items()})
    policy = TimingPolicy(warmup=1, budget_s=60.0, min_reps=3, max_reps=20, batch_below_ms=0)
    algos = [Clocked(name, rt) for name in speeds]
    results = by_name(tuner_for(db_url, rt, policy, *algos).find(small_problem(), "cpu"))
    assert [r.algorithm for r in rank(list(results.values()))] == list(speeds)
    assert all(results[name].time_ms == ms for name, ms in speeds.items())
    if confirm_top == "1":  # no round: the first pass is final and takes max_reps
        assert all(results[name].reps == 20 for name in speeds)
        assert dict(rt.samples) == {name: 1 + 20 for name in speeds}
        return
    # A round of two (the smallest) screens the first pass as well (pinned by "2").
    confirmed = list(speeds)[: int(confirm_top)]
    for name in speeds.keys() - confirmed:  # screened only
        assert results[name].reps == 5 and rt.samples[name] == 1 + 5
    round_reps = int(confirm_reps or 20)
    for name in confirmed:  # confirmed: the round's samples
        assert results[name].reps == round_reps
        assert rt.samples[name] == (1 + 5) + (1 + round_reps)  # each pass: a warm-up first


def test_the_confirmation_round_shares_one_budget_and_keeps_min_reps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = TimingPolicy(warmup=1, budget_s=60.0, min_reps=3, max_reps=20, batch_below_ms=0)
    monkeypatch.setenv("CONVTUNE_CONFIRM_REPS", "1")
    assert RacePolicy.from_env().confirm_round(policy, 3).max_reps == 3
    assert RacePolicy.from_env().confirm_round(policy, 3).budget_s == 20.0


def test_tie_within_noise_prefers_less_workspace_and_says_so(db_url: str) -> None:
    rt = Scripted({"big_ws": steady(1.00), "no_ws": steady(1.005), "slow": steady(1.3)})
    policy = TimingPolicy(warmup=1, budget_s=0.0, min_reps=4, max_reps=4, batch_below_ms=0)
    algos = (Clocked("big_ws", rt, ws=4096), Clocked("no_ws", rt), Clocked("slow", rt))
    best = tuner_for(db_url, rt, policy, *algos).best(small_problem(), "cpu")
    assert best.algorithm == "no_ws" and best.workspace_bytes == 0
    assert best.note is not None and "less workspace" in best.note and "big_ws" in best.note


def _result(name: str, ms: float, ws: int, spread: float = 0.0, reps: int = 0
            ) -> AlgorithmResult:
    return AlgorithmResult(algorithm=name, config="c", status=R.OK, time_ms=ms,
                           workspace_bytes=ws, spread_ms=spread, reps=reps)


def test_noise_rule_bounds() -> None:
    fast = _result("fast", 1.0, 1 << 20)
    assert within_noise(fast, _result("x", 1.009, 0))  # inside 1%
    # Bug pinned: a 2% floor called medians 1.97% apart a tie, and the pick for less
    # workspace cost 18.6% (H200, fast res2.3x3, 2026-11-27).
    assert not within_noise(fast, _result("x", 1.0197, 0))  # outside 1%, no spread
    # Bug pinned: two standard errors of the medians' difference widened the band up to
    # 5%, and the ties it made cost more than they were apart (CPU res3.3x3 b8, 2026-11-29:
    # 3.5% apart, 6.6% lost; 20 of the 46 ties recorded above 1% lost over 5%). A spread
    # never widens the 1% band now, however few the samples.
    for spread, reps in ((0.0, 0), (0.1, 4), (0.5, 4), (0.1, 400)):
        assert within_noise(fast, _result("x", 1.0099, 0, spread=spread, reps=reps))
        assert not within_noise(fast, _result("x", 1.011, 0, spread=spread, reps=reps))
    assert not within_noise(fast, _result("x", 1.035, 0, spread=0.5, reps=4))
    ranked = rank([_result("x", 1.03, 0), fast])
    assert [r.algorithm for r in ranked] == ["fast", "x"] and ranked[0].note is None
    twice = rank(rank([_result("x", 1.005, 0), fast]))  # re-ranking keeps one note
    assert twice[0].algorithm == "x" and twice[0].note is not None
    assert twice[0].note.count("less workspace") == 1


def test_no_background_thread_of_ours_runs_while_a_candidate_is_timed(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 11: rich's refresh thread and the claim-renewal thread held the GIL between a
    # candidate's launches, inflating launch-bound candidates.
    rt = Scripted({"a": steady(1.0), "b": steady(1.1), "c": steady(1.2)}, sleep_s=0.002)
    renewals: list[bool] = []
    refreshes: list[bool] = []
    renew = claims.claims.renew_claim

    def watched_renew(**kwargs: Any) -> bool:
        renewals.append(rt.timing)
        return renew(**kwargs)

    monkeypatch.setattr(claims.claims, "renew_claim", watched_renew)
    policy = TimingPolicy(warmup=1, budget_s=0.03, min_reps=3, max_reps=50, batch_below_ms=0)
    algos = (Clocked("a", rt), Clocked("b", rt), Clocked("c", rt))
    tuner = tuner_for(db_url, rt, policy, *algos, claim_ttl_s=0.003)  # renew every 1 ms
    with quiet.periodic(lambda: refreshes.append(rt.timing), 0.001, "test-progress"):
        tuner.find(small_problem(), "cpu")
        time.sleep(0.02)  # outside any timed region the chores do run
    assert sum(rt.samples.values()) > 20
    assert renewals and refreshes  # they ran, between timed regions ...
    assert not any(renewals) and not any(refreshes)  # ... and never inside one


def test_time_runs_batches_launch_bound_runs_and_races() -> None:
    calls: list[int] = []

    def sample(ms: float) -> Callable[[Callable[[], None], int], float]:
        def take(fn: Callable[[], None], runs: int) -> float:
            calls.append(runs)
            return ms
        return take

    policy = TimingPolicy(warmup=1, budget_s=0.0, min_reps=4, max_reps=4, batch_below_ms=0.5)
    short = time_runs(sample(0.02), lambda: None, policy)
    assert short.runs_per_sample == 25 and calls == [1] + [25] * 4  # ceil(0.5 / 0.02)
    calls.clear()
    long = time_runs(sample(2.0), lambda: None, policy)
    assert long.runs_per_sample == 1 and calls == [1] * 5
    assert batch_size(1e-6, policy) == 256  # capped
    raced = time_runs(sample(5.0), lambda: None,
                      TimingPolicy(budget_s=60, min_reps=3, max_reps=40, cutoff_ms=4.0))
    assert len(raced.times_ms) == 3


def test_warm_up_waits_for_three_steady_samples() -> None:
    ramp = iter([3.0, 2.5, 2.0, 1.5, 1.0, 1.02, 1.01, 1.0, 1.0])
    assert warm_until_stable(lambda: next(ramp), max_s=10.0) == 7  # 1.0, 1.02, 1.01
    assert warm_until_stable(lambda: 1.0 + time.perf_counter() % 1, max_s=0.01) >= 1


def test_bad_race_settings_are_one_line_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RacePolicy(factor=0.5)
    monkeypatch.setenv("CONVTUNE_RACE_FACTOR", "fast")
    with pytest.raises(ValueError, match="CONVTUNE_RACE_FACTOR"):
        RacePolicy.from_env()
    with pytest.raises(ValueError, match="cutoff"):
        TimingPolicy(cutoff_ms=0.0)
    monkeypatch.delenv("CONVTUNE_RACE_FACTOR")
    for variable, field, bad in (("CONVTUNE_SCREEN_REPS", "screen_reps", "0"),
                                 ("CONVTUNE_CONFIRM_REPS", "confirm_reps", "-2")):
        monkeypatch.setenv(variable, bad)
        with pytest.raises(ValueError, match=f"{variable} must be positive"):
            RacePolicy.from_env()
        with pytest.raises(ValueError, match=field):
            RacePolicy(**{field: 0})
        monkeypatch.delenv(variable)


def test_who_enters_and_who_challenges_the_confirmation_round() -> None:
    # Pins the round's entry rules: the leader by median, then the others whose fastest run
    # is within the race factor of its median (the bound included), ordered by fastest run,
    # not by median, up to confirm_top in all. After a round: the best confirmed row and the
    # unconfirmed ones strictly faster than it, fastest first, up to confirm_top - 1 of them.
    race = RacePolicy(factor=1.5, confirm_top=3)
    first = [row("L", 1.0, min_ms=0.9), row("X", 1.3, min_ms=1.05), row("Y", 1.2, min_ms=1.15),
             row("Z", 1.1, min_ms=1.2), row("edge", 2.0, min_ms=1.5),
             row("out", 1.6, min_ms=1.51), row("F", None, status=R.FAILED)]
    assert contenders(first, race) == [0, 1, 2]
    assert contenders(first, RacePolicy(factor=1.5, confirm_top=9)) == [0, 1, 2, 3, 4]
    after = [row("L", 1.0), row("X", 1.3), row("Y", 1.2), row("Z", 0.95), row("edge", 0.9),
             row("W", 0.97), row("tie", 1.0), row("out", 1.2), row("F", None, status=R.FAILED)]
    assert challengers(after, {0, 1, 2}, race) == [0, 4, 3]
    tied = [row("A", 1.0), row("B", 1.0), row("C", 1.1)]
    assert challengers(tied, {0}, race) == []  # a tie does not challenge


def test_a_confirm_top_of_zero_means_no_round(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pins that confirm_top may be 0 (non-negative; fewer than 2: no round), from the
    # environment too, and that the first pass is then final.
    policy = TimingPolicy(warmup=1, budget_s=60.0, min_reps=3, max_reps=20, batch_below_ms=0)
    monkeypatch.setenv("CONVTUNE_CONFIRM_TOP", "0")
    race = RacePolicy.from_env()
    assert race.confirm_top == 0 and race.first_pass(policy, 4) == policy
    with pytest.raises(ValueError, match="non-negative"):
        RacePolicy(confirm_top=-1)


def test_a_waiting_chore_runs_before_the_next_timed_region() -> None:
    # Bug: the gate was a plain lock, and a tuning thread re-took it microseconds after each
    # timed region, before the woken chore thread ran: claim renewals were passed over for
    # 4-5 regions (7 s), and a live tuner's claim expired. A chore waiting when a region
    # ends runs before the next region starts, however soon the tuning thread asks.
    order: list[str] = []
    chore_asked = threading.Event()

    def chore() -> None:
        chore_asked.set()
        with quiet.chore():
            order.append("chore")

    for _ in range(20):  # a plain lock let the chore win now and then (on two cores)
        order.clear()
        chore_asked.clear()
        thread = threading.Thread(target=chore)
        with quiet.timed_region():
            thread.start()
            chore_asked.wait(10)
            deadline = time.monotonic() + 10
            while getattr(quiet, "_chores_waiting", 1) < 1 and time.monotonic() < deadline:
                time.sleep(0.001)  # until the chore waits for the gate (counted)
            time.sleep(0.005)  # (a plain lock counts none: its chore thread is blocked)
        with quiet.timed_region():  # at once, as a tuning thread's next candidate
            order.append("region")
        thread.join(10)
        assert order == ["chore", "region"], order
