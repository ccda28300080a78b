"""The cost model's fit, from the inside: its regressors' sizes, its bootstrap, what its
fastest-time part learns from, and what its cache counts (the mutation review of
2026-12-01; the model as a whole is in test_model.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from db.engine import open_store
from tests.tuner.fakes import Fake
from tests.tuner.test_model import SPEED, UNSEEN, seed, synthetic, training_problems
from tuner import model as M
from tuner import results as R


# Mutation gap: the regressors' sizes were never read: trees per member ("rows // 10 of
# them", within MIN_TREES and MAX_TREES), the fastest-time regressor's SCALE_TREES, the
# leaves' least rows, and no early stopping (every tree kept) could each move unseen.
def test_each_regressor_has_the_documented_trees_and_leaves() -> None:
    rng = np.random.default_rng()
    seed_ = int(rng.integers(1000))
    # rows -> (trees: rows // 10 within [100, 200], least rows a leaf: rows // 30 in [2, 20])
    for rows, trees, leaf in ((40, 100, 2), (300, 100, 10), (1010, 101, 20),
                              (1500, 150, 20), (1999, 199, 20), (2500, 200, 20)):
        regressor = M._regressor(rows, seed_)
        assert (regressor.max_iter, regressor.min_samples_leaf) == (trees, leaf), rows
        assert (regressor.early_stopping, regressor.random_state) == (False, seed_)
    assert M._regressor(1500, seed_, M.SCALE_TREES).max_iter == 50
    model = M.fit(synthetic(SPEED, training_problems(), noise=0.05))
    assert model is not None
    for ranker, fastest in zip(model.members, model.fastest, strict=True):
        assert ranker.n_iter_ == 100  # 48 rows a bootstrap or so: the fewest trees, all kept
        assert fastest.n_iter_ == 50


# Mutation gap: the fastest time was checked within 50% of the truth only, so a
# fastest-time regressor fitted on more than each problem's fastest rows (a configuration
# 3-6% slower among them) went unseen.
def test_the_fastest_time_is_learned_from_each_problem_s_fastest_row_only() -> None:
    rng = np.random.default_rng()
    fast = float(rng.uniform(0.5, 2.0))
    speeds = {"fast": fast, "close": fast * float(rng.uniform(1.03, 1.06)),
              "mid": fast * float(rng.uniform(2.0, 3.0)), "slow": fast * float(rng.uniform(5, 9))}
    model = M.fit(synthetic(speeds, training_problems()))  # times exact: FLOPs x speed
    assert model is not None
    got = model.predict([M.Sample(UNSEEN, 2, name, "default", 0, kind="cpu")
                         for name in speeds])
    for p in got:
        assert p.time_ms == pytest.approx(UNSEEN.flops * 1e-9 * speeds[p.algorithm],
                                          rel=0.005), p.algorithm


# Mutation gap: a model was never asked about no candidate, as from_model asks it when every
# candidate's algorithm is one it never saw (an empty matrix then failed in the learner).
def test_a_model_asked_only_about_algorithms_it_never_saw_answers_without_a_time() -> None:
    from tuner.candidates import Candidate
    from tuner.devices import DeviceIdentity
    from tuner.predicting import from_model

    model = M.fit(synthetic(SPEED, training_problems()))
    assert model is not None
    assert model.predict([]) == []
    identity = DeviceIdentity("cpu", "cpu-1", {"kind": "cpu", "units": 2})
    allowed = [Candidate(Fake(name), "default", 0, Fake.impl_hash)  # type: ignore[arg-type]
               for name in ("new", "newer")]
    got = from_model(model, UNSEEN, identity, allowed)
    assert [(r.algorithm, r.time_ms, r.confidence, r.source) for r in got] == [
        ("new", None, None, R.PREDICTED), ("newer", None, None, R.PREDICTED)]
    assert all("no measurement of" in (r.note or "") for r in got)


# Mutation gap: the cache's fit_s (the seconds its fits took, which benchmarks report) was
# never read: left at zero, or added on a read that fitted nothing, unseen.
def test_the_cache_adds_up_the_seconds_its_fits_took(db_url: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng()
    store = open_store(db_url)
    seed(store, SPEED, training_problems()[:10])
    clock = [float(rng.uniform(100, 200))]
    monkeypatch.setattr(M.time, "perf_counter", lambda: clock[0])
    spans = [float(rng.uniform(1, 3)), float(rng.uniform(1, 3))]

    def fitter(samples: list[M.Sample]) -> M.CostModel | None:
        clock[0] += spans[len(cache_fits)]
        cache_fits.append(1)
        return M.fit(samples)

    cache_fits: list[int] = []
    cache = M.ModelCache(store, fitter)  # type: ignore[arg-type]
    assert cache.model("cpu") is not None and cache.fit_s == pytest.approx(spans[0])
    assert cache.model("cpu") is not None  # no fit, no time:
    assert cache.fit_s == pytest.approx(spans[0])
    seed(store, SPEED, training_problems()[10:])  # 20% more samples: a refit
    assert cache.model("cpu") is not None
    assert (cache.fits, cache.fit_s) == (2, pytest.approx(spans[0] + spans[1]))


# Mutation gap: two askers at once were never tried: the second, which waited on the
# first's fit, fitting again instead of taking the first's (for a store too small for a
# model, whose answer None the refit rule does not serve) went unseen.
@pytest.mark.parametrize("problems", [12, 5])  # 48 rows: a model; 20: too few for one
def test_a_second_asker_waiting_on_a_fit_takes_it_instead_of_fitting_again(
        db_url: str, problems: int) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems()[:problems])
    fitting, release, waiting = threading.Event(), threading.Event(), threading.Event()

    def fitter(samples: list[M.Sample]) -> M.CostModel | None:
        fitting.set()
        release.wait(60)
        return M.fit(samples)

    cache = M.ModelCache(store, fitter)  # type: ignore[arg-type]
    lock = cache._lock

    class Watched:
        """The cache's lock, saying when an asker comes to it while a fit runs."""

        def __enter__(self) -> bool:
            if fitting.is_set():
                waiting.set()
            return lock.__enter__()

        def __exit__(self, *exc: object) -> None:
            lock.release()

    cache._lock = Watched()  # type: ignore[assignment]
    got: dict[str, M.CostModel | None] = {}
    threads = [threading.Thread(target=lambda name=name: got.update({name: cache.model("cpu")}))
               for name in ("first", "second")]
    threads[0].start()
    assert fitting.wait(60)
    threads[1].start()
    assert waiting.wait(60)  # past its own look at the cache, which found no model
    release.set()
    for thread in threads:
        thread.join(120)
    assert set(got) == {"first", "second"} and got["second"] is got["first"]
    assert (got["first"] is not None) == (problems == 12)
    assert cache.fits == 1


# Mutation gap: confidence's "within 10%" was checked on candidates 5% and 30% off the
# fastest only: NEAR moved anywhere between (1.2, say) went unseen.
def test_confidence_counts_what_is_within_ten_percent_and_nothing_past_it() -> None:
    rng = np.random.default_rng()
    speeds = {"fast": 1.0, "inside": float(rng.uniform(1.03, 1.08)),
              "outside": float(rng.uniform(1.12, 1.19)), "far": float(rng.uniform(1.5, 3.0))}
    model = M.fit(synthetic(speeds, training_problems()))  # exact times: members agree
    assert model is not None
    got = model.predict([M.Sample(UNSEEN, 2, name, "default", 0, kind="cpu")
                         for name in speeds])
    assert {p.algorithm: p.confidence for p in got} == {
        "fast": 1.0, "inside": 1.0, "outside": 0.0, "far": 0.0}
