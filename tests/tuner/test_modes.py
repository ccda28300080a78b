"""The find modes the cost model drives: fast (measure its top k, then the winner's close
configurations) and heuristic (measure nothing), and what a mode argument may be."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from algorithms.problem import ConvProblem
from db.engine import open_store
from tests.tuner.fakes import Fake, small_problem
from tests.tuner.test_model import (
    SPEED,
    UNSEEN,
    fakes,
    rows_of,
    seed,
    training_problems,
    tuner,
)
from tuner import model as M
from tuner import results as R
from tuner.errors import NotInDatabase
from tuner.service import Service


def test_heuristic_mode_measures_nothing(db_url: str) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    algos = fakes()
    best = tuner(store, algos).best(UNSEEN, "cpu", mode="heuristic")
    assert (best.algorithm, best.source) == ("fast", R.PREDICTED)
    assert all(a.runs == 0 for a in algos.values())
    assert rows_of(store, UNSEEN) == 0


def test_heuristic_mode_prefers_what_this_device_stored(db_url: str) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    got = tuner(store, fakes()).find(training_problems()[0], "cpu", mode="heuristic")
    assert {r.source for r in got} == {R.MEASURED_HERE}


def test_fast_mode_measures_only_the_predicted_top_k(db_url: str) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    algos = fakes()
    got = {r.algorithm: r for r in tuner(store, algos, fast_k=2).find(UNSEEN, "cpu",
                                                                      mode="fast")}
    assert {n for n, a in algos.items() if a.runs} == {"fast", "mid"}
    assert rows_of(store, UNSEEN) == 2
    assert got["fast"].source == R.FRESH and got["fast"].usable
    skipped = got["slowest"]
    assert (skipped.source, skipped.time_ms, skipped.status) == (R.NOT_MEASURED, None, R.OK)
    assert "fast mode: not measured (predicted" in (skipped.note or "")
    # Once every candidate is stored, a fast find measures nothing.
    tuner(store, algos).find(UNSEEN, "cpu")
    again = fakes()
    tuner(store, again, fast_k=2).find(UNSEEN, "cpu", mode="fast")
    assert all(a.runs == 0 for a in again.values())


def test_fast_mode_measures_an_algorithm_the_model_never_saw(db_url: str) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    algos = {**fakes(), "new": Fake("new")}
    tuner(store, algos, fast_k=1).find(UNSEEN, "cpu", mode="fast")
    assert {n for n, a in algos.items() if a.runs} == {"fast", "new"}


def test_fast_mode_on_an_empty_store_measures_everything(db_url: str) -> None:
    algos = fakes()
    got = tuner(open_store(db_url), algos, fast_k=1).find(UNSEEN, "cpu", mode="fast")
    assert all(a.runs for a in algos.values())
    assert {r.source for r in got} == {R.FRESH}


def test_too_small_a_store_falls_back_to_the_nearest_problem(db_url: str) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems()[:2])  # 8 rows: below MIN_ROWS
    assert M.model_cache(store).model("cpu") is None
    got = tuner(store, fakes()).find(UNSEEN, "cpu", mode="heuristic")
    assert got[0].algorithm == "fast"
    assert all("predicted from" in (r.note or "") and r.confidence is None for r in got)


def test_heuristic_with_nothing_to_predict_from_is_not_in_database(db_url: str) -> None:
    with pytest.raises(NotInDatabase, match="nothing to predict"):
        tuner(open_store(db_url), fakes()).find(UNSEEN, "cpu", mode="heuristic")


@pytest.mark.parametrize("bad", ["quick", "", "FAST", None, 3])
def test_bad_modes_are_refused_in_one_line(db_url: str, bad: object) -> None:
    facade = Service(open_store(db_url), tuner=tuner(open_store(db_url), fakes()))
    calls: list[Callable[[], object]] = [
        lambda: facade.find(UNSEEN, "cpu", mode=bad),  # type: ignore[arg-type]
        lambda: facade.best(UNSEEN, "cpu", mode=bad),  # type: ignore[arg-type]
        lambda: facade.tuner.find(UNSEEN, "cpu", mode=bad),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(ValueError, match="mode must be one of") as info:
            call()
        assert "\n" not in str(info.value)


def test_exhaustive_is_auto(db_url: str) -> None:
    algos = fakes()
    got = tuner(open_store(db_url), algos).find(UNSEEN, "cpu", mode="exhaustive")
    assert all(a.runs for a in algos.values()) and {r.source for r in got} == {R.FRESH}


def test_fast_k_is_validated(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="fast_k"):
        tuner(open_store(db_url), fakes(), fast_k=0)
    monkeypatch.setenv("CONVTUNE_FAST_K", "zero")
    with pytest.raises(ValueError, match="CONVTUNE_FAST_K"):
        _ = tuner(open_store(db_url), fakes()).fast_k


def test_fast_mode_measures_the_best_of_an_algorithm_outside_the_top_k(db_url: str) -> None:
    # Three configurations of "fast" (predicted alike) fill the top 2; fast mode also
    # measures the best of the second algorithm, "mid", and nothing slower.
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    algos = {**fakes(), "fast": Fake("fast", configs=("default", "b", "c"))}
    tuner(store, algos, fast_k=2).find(UNSEEN, "cpu", mode="fast")
    assert algos["fast"].runs and algos["mid"].runs
    assert not algos["slow"].runs and not algos["slowest"].runs


class Recording(Fake):
    """A Fake that records which configuration each run used."""

    def __init__(self, name: str, configs: tuple[str, ...]) -> None:
        super().__init__(name, configs=configs)
        self.configs_run: list[str] = []

    def run(self, x: object, w: object, y: object, workspace: object, problem: ConvProblem,
            config: str) -> None:
        self.configs_run.append(config)
        super().run(x, w, y, workspace, problem, config)


def test_fast_mode_measures_the_winners_close_configurations_in_a_second_round(
        db_url: str) -> None:
    # The model has seen only "default" configurations, so it predicts "fast"'s three alike:
    # with fast_k=1 the first round measures one of them, and the second the other two,
    # beside the first again; "mid" (2.5x slower, another family) stays unmeasured.
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    fast = Recording("fast", ("default", "b", "c"))
    algos = {**fakes(), "fast": fast}
    got = tuner(store, algos, fast_k=1).find_candidates(UNSEEN, "cpu", mode="fast")
    assert not algos["mid"].runs and not algos["slow"].runs
    assert set(fast.configs_run) == {"default", "b", "c"}
    measured = {r.config for r in got if r.algorithm == "fast" and r.source == R.FRESH}
    assert measured == {"default", "b", "c"}
    assert rows_of(store, UNSEEN) == 3


# Mutation gap: heuristic mode was shown to prefer this device's rows only when they covered
# every candidate; with some stored, the rest predicted, the stored ones could be answered
# by the prediction (or the partial rows taken for the whole answer) unseen.
def test_heuristic_mode_answers_stored_candidates_from_the_store_and_predicts_the_rest(
        db_url: str) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    tuner(store, {"mid": Fake("mid")}).find(UNSEEN, "cpu")  # "mid" measured here
    algos = fakes()
    got = {r.algorithm: r for r in tuner(store, algos).find(UNSEEN, "cpu", mode="heuristic")}
    assert set(got) == set(SPEED)
    assert got["mid"].source == R.MEASURED_HERE and got["mid"].confidence is None
    assert {got[n].source for n in ("fast", "slow", "slowest")} == {R.PREDICTED}
    assert all(a.runs == 0 for a in algos.values())


# Mutation gap: the second round's contenders were shown to be measured, not measured again
# beside the configurations it adds ("timed side by side"): a round two without them, or
# one that took their stored times, went unseen.
def test_fast_mode_times_the_winner_again_beside_its_close_configurations(db_url: str) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    fast = Recording("fast", ("default", "b", "c"))
    tuner(store, {**fakes(), "fast": fast}, fast_k=1).find_candidates(UNSEEN, "cpu",
                                                                      mode="fast")
    first = fast.configs_run[0]  # the first round's one measurement
    runs = {c: fast.configs_run.count(c) for c in ("default", "b", "c")}  # runs: reps each
    assert min(runs.values()) > 0
    assert runs[first] > max(n for c, n in runs.items() if c != first), runs  # both rounds


# Mutation gap: the default fast_k (README: $CONVTUNE_FAST_K, default 4) was never used by
# a test: every fast find gave fast_k.
def test_fast_mode_measures_four_by_default(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVTUNE_FAST_K", raising=False)
    speeds = {**SPEED, "worse": 40.0, "worst": 80.0}
    store = open_store(db_url)
    seed(store, speeds, training_problems())
    algos = {name: Fake(name) for name in speeds}
    tuner(store, algos).find(UNSEEN, "cpu", mode="fast")
    assert {n for n, a in algos.items() if a.runs} == {"fast", "mid", "slow", "slowest"}


# Mutation gap: a prediction from the nearest problem keeps that problem's failures, and
# fast mode never chose those: with fast_k=2 the failed one (ranked last, with no time)
# would be the second family's best, or "a candidate nothing could rank", unseen.
def test_fast_mode_does_not_measure_what_failed_on_the_nearest_problem(db_url: str) -> None:
    from tests.tuner.fakes import Raises

    store = open_store(db_url)
    tuner(store, {"a": Fake("a"), "b": Raises("b")}).find(small_problem(n=2), "cpu")
    algos = {"a": Fake("a"), "b": Fake("b")}
    got = {r.algorithm: r for r in tuner(store, algos, fast_k=2).find(small_problem(n=4),
                                                                      "cpu", mode="fast")}
    assert (algos["a"].runs > 0, algos["b"].runs) == (True, 0)
    assert got["a"].source == R.FRESH and got["b"].source == R.NOT_MEASURED


# Mutation gap: "exhaustive" was shown to measure as "auto" does, never to be the same find:
# check_mode handing it on as itself went unseen, and with it an exhaustive find keeping an
# answer of its own in the service's cache, missing the one an auto find had left there.
def test_exhaustive_is_the_same_find_as_auto_in_the_answer_cache(db_url: str) -> None:
    from tuner.modes import MODES, check_mode

    assert {mode: check_mode(mode) for mode in MODES} == {
        "cached": "cached", "tune": "tune", "auto": "auto", "exhaustive": "auto",
        "fast": "fast", "heuristic": "heuristic"}
    store = open_store(db_url)
    facade = Service(store, tuner=tuner(store, fakes()))
    assert facade.cached_find(UNSEEN, "cpu", mode="exhaustive") is None
    found = facade.find(UNSEEN, "cpu", mode="auto")
    cached = facade.cached_find(UNSEEN, "cpu", mode="exhaustive")
    assert cached is not None  # the auto find's answer, as the store now holds it
    assert [(r.algorithm, r.config, r.time_ms) for r in cached] == [
        (r.algorithm, r.config, r.time_ms) for r in found]


# Mutation gap: a prediction from the nearest problem was shown to rank, never to be scaled:
# the neighbour's milliseconds kept as they were (not times the FLOPs ratio) went unseen; nor
# was a nearer problem that lacks a candidate shown to give way to a farther one with all.
def test_the_nearest_problem_measuring_every_candidate_is_scaled_by_the_flops(
        db_url: str) -> None:
    import numpy as np

    rng = np.random.default_rng()
    speeds = {name: speed * float(rng.uniform(0.8, 1.25)) for name, speed in SPEED.items()}
    near = small_problem(n=2, c=6, k=12, h=10, w=10)  # UNSEEN's batch of 3: nearer
    far = small_problem(n=1, c=6, k=12, h=10, w=10)
    store = open_store(db_url)
    seed(store, {name: s for name, s in speeds.items() if name != "slowest"}, [near])
    seed(store, speeds, [far])  # 7 rows: no model
    got = {r.algorithm: r for r in tuner(store, fakes()).find(UNSEEN, "cpu", mode="heuristic")}
    assert set(got) == set(speeds)
    for name, speed in speeds.items():
        assert got[name].source == R.PREDICTED
        assert got[name].time_ms == pytest.approx(UNSEEN.flops * 1e-9 * speed, rel=1e-9)
        assert f"predicted from {far.describe()} (x3 the FLOPs)" == got[name].note
