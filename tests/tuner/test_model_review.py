"""The cost model and fast mode: the faults a review of them found on 2026-11-30."""

from __future__ import annotations

import functools
import threading
from typing import Any

import pytest
from threadpoolctl import threadpool_info

from algorithms.problem import ConvProblem
from algorithms.runtime import TimingPolicy
from db.engine import open_store
from tests.fleet.conftest import pg_url, store_url
from tests.tuner.fakes import Fake, small_problem
from tests.tuner.test_model import seed, training_problems
from tuner import model as M
from tuner.features import Sample
from tuner.tuning import Tuner

__all__ = ["pg_url", "store_url"]  # the store fixtures: SQLite, then PostgreSQL

SPEED = {"fast": 1.0, "mid": 2.5, "slow": 8.0, "slowest": 20.0}


def _blas_threads() -> list[int]:
    return sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})


# Bug: one_thread's limit is the process's, and two overlapping predictions each saved and
# restored it: the second restored the first's limit of 1, and the process (the service's
# finds, every CPU GEMM after them) stayed on one BLAS thread for good.
def test_overlapping_predictions_restore_the_process_s_threads() -> None:
    problems = training_problems()
    samples = [Sample(p, 2, a, "default", 0, p.flops * 1e-9 * s, "cpu")
               for p in problems for a, s in SPEED.items()]
    model = M.fit(samples)
    assert model is not None
    before = _blas_threads()
    candidates = [Sample(problems[0], 2, a, "default", 0, kind="cpu") for a in SPEED]

    def predict() -> None:
        for _ in range(200):
            model.predict(candidates)

    threads = [threading.Thread(target=predict) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _blas_threads() == before


def _threads(api: str) -> list[int]:
    return sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == api})


# Bug: one_thread limited every library for the whole process: while one thread fitted or
# predicted (a fast find in the service), another's CPU timings ran on one BLAS thread and
# were stored as the machine's, and a first identify("cpu") then recorded blas_threads=1
# in the device fingerprint for the process's life.
def test_one_thread_limits_only_the_calling_thread_s_openmp() -> None:
    M._controller()  # loads sklearn and its OpenMP runtime, as a fit does
    blas, openmp = _threads("blas"), _threads("openmp")
    if max(blas + openmp, default=1) < 2:
        pytest.skip("this machine runs BLAS and OpenMP on one thread anyway")
    inside, done = threading.Event(), threading.Event()
    seen: dict[str, list[int]] = {}

    def fitting() -> None:
        with M.one_thread(), M.one_thread():  # nested: one limit
            seen["openmp"] = _threads("openmp")
            inside.set()
            done.wait(10)
        seen["after"] = _threads("openmp")

    thread = threading.Thread(target=fitting)
    thread.start()
    inside.wait(10)
    try:
        assert (_threads("blas"), _threads("openmp")) == (blas, openmp)
        from algorithms.cpu.runtime import _blas_threads

        assert _blas_threads() == max(blas, default=1)
    finally:
        done.set()
        thread.join()
    assert seen["openmp"] == ([1] if openmp else []) and seen["after"] == openmp


class _FailsC(Fake):
    """Configuration "c" cannot launch; the others are fine."""

    def __init__(self) -> None:
        super().__init__("fast", configs=("default", "b", "c"))
        self.runs_of: dict[str, int] = {}

    def run(self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem,
            config: str) -> None:
        self.runs_of[config] = self.runs_of.get(config, 0) + 1
        if config == "c":
            raise RuntimeError("kernel launch failed")
        super().run(x, w, y, workspace, problem, config)


# Bug: fast mode's second round took a stored failure for a configuration never measured:
# it ran it again, the contenders re-timed beside it, on every later fast find.
def test_fast_mode_never_runs_a_stored_failure_again(db_url: str) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    unseen = small_problem(n=3, c=6, k=12, h=10, w=10)
    quick = TimingPolicy(warmup=0, budget_s=0.0, min_reps=2, max_reps=2)
    runs = []
    for _ in range(2):  # a new tuner each time, as a new process would be
        fast = _FailsC()
        algos = [fast, *(Fake(n) for n in SPEED if n != "fast")]
        Tuner(store, policy=quick, algorithms=algos, fast_k=1).find_candidates(  # type: ignore[arg-type]
            unseen, "cpu", mode="fast")
        runs.append(fast.runs_of)
    assert runs[0].get("c") == 1 and runs[1] == {}


def _failed_neighbour(store: Any, near: ConvProblem) -> None:
    from db import find as store_find
    from db.rows import MeasurementRow, utcnow
    from tuner import results as R
    from tuner.devices import identify

    cpu = identify("cpu")
    rows = [MeasurementRow(algorithm=a, config="default", impl_hash=Fake.impl_hash,
                           status=R.FAILED, time_ms=None, spread_ms=None, min_ms=None, reps=0,
                           workspace_bytes=0, max_error=None, rel_error=None,
                           error="cudaErrorLaunchFailure", measured_at=utcnow(),
                           tuner_version="t") for a in ("a", "b")]
    store.write(lambda s: store_find.save_measurements(
        session=s, fingerprint=cpu.fingerprint, device_info=cpu.info, key=near.key(),
        rows=rows))


# Bug: a prediction with no usable time counted as one: with the nearest problem's every
# candidate failed (and no model), fast mode measured nothing and best() found no usable
# algorithm; with a model that knows none of the algorithms, heuristic mode answered "ok"
# rows without a time instead of NotInDatabase.
def test_a_prediction_without_a_time_is_no_prediction(db_url: str) -> None:
    import pytest

    from tuner.errors import NotInDatabase

    store = open_store(db_url)
    _failed_neighbour(store, small_problem(n=2, c=6, k=12, h=10, w=10))
    algos = [Fake("a"), Fake("b")]
    quick = TimingPolicy(warmup=0, budget_s=0.0, min_reps=2, max_reps=2)
    problem = small_problem(n=3, c=6, k=12, h=10, w=10)
    tuner = Tuner(store, policy=quick, algorithms=algos)  # type: ignore[arg-type]
    assert tuner.best(problem, "cpu", mode="fast").algorithm in ("a", "b")
    assert [a.runs > 0 for a in algos] == [True, True]
    other = open_store(db_url.replace(".db", "_2.db"))
    seed(other, SPEED, training_problems())
    new = Tuner(other, policy=quick, algorithms=[Fake("new")])  # type: ignore[list-item]
    with pytest.raises(NotInDatabase, match="no model that knows these algorithms"):
        new.find_candidates(problem, "cpu", mode="heuristic")


def _put(store: Any, fingerprint: str, info: dict[str, Any], problem: ConvProblem,
         speeds: dict[str, float], status: str = "ok") -> None:
    from db import find as store_find
    from db.rows import MeasurementRow, utcnow

    rows = [MeasurementRow(
        algorithm=a, config="default", impl_hash="h", status=status,
        time_ms=problem.flops * 1e-9 * s if status == "ok" else None, spread_ms=0.0,
        min_ms=None, reps=3, workspace_bytes=0, max_error=0.0, rel_error=0.0,
        error=None if status == "ok" else "boom", measured_at=utcnow(), tuner_version="t")
        for a, s in speeds.items()]
    store.write(lambda s: store_find.save_measurements(
        session=s, fingerprint=fingerprint, device_info=info, key=problem.key(), rows=rows))


# Bug: the fit compared each row with the fastest of its problem and unit count, pooling two
# devices of one kind and unit count (an H100 and an H200: 132 SMs each): the slower one's
# rows were all "slower than the fastest", its own best never the fastest.
def test_two_devices_of_one_unit_count_are_not_pooled(db_url: str,
                                                       monkeypatch: Any) -> None:
    store = open_store(db_url)
    speeds = {"a": 1.0, "b": 1.5, "c": 3.0}
    for fingerprint, slow in (("h100", 2.0), ("h200", 1.0)):
        info = {"kind": "cuda", "name": fingerprint, "arch": "9.0", "units": 132}
        for problem in training_problems():
            _put(store, fingerprint, info, problem, {a: s * slow for a, s in speeds.items()})
    targets = []
    real = M._regressor

    class Spy:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def fit(self, x: Any, y: Any) -> Any:
            targets.append(y.copy())
            return self.inner.fit(x, y)

    monkeypatch.setattr(M, "_regressor", lambda *a, **k: Spy(real(*a, **k)))
    assert M.fit(M.samples_from_store(store, "cuda")[1], members=1) is not None
    import numpy as np

    assert sorted(set(np.round(targets[0], 4))) == [0.0, round(float(np.log(1.5)), 4),
                                                    round(float(np.log(3.0)), 4)]


# Bug: a fit was served for good once the store's samples shrank (rows re-measured as
# failures, or removed): only growth made it refit.
def test_a_fit_is_not_served_once_its_rows_are_gone(db_url: str) -> None:
    from tuner.devices import identify

    store = open_store(db_url)
    cpu = identify("cpu")
    speeds = {"a": 1.0, "b": 2.0, "c": 4.0, "d": 8.0}
    for problem in training_problems():
        _put(store, cpu.fingerprint, cpu.info, problem, speeds)
    cache = M.ModelCache(store)
    assert cache.model("cpu") is not None
    for problem in training_problems():  # every row re-measured as a failure
        _put(store, cpu.fingerprint, cpu.info, problem, speeds, status="failed")
    assert cache.model("cpu") is None


# Bug: beside a candidate of an algorithm the model never saw, a known one's note said "100%
# of them put it within 10% of the fastest", though the other, perhaps faster, was compared
# with nothing.
def test_a_prediction_says_what_it_was_not_compared_with(db_url: str) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    quick = TimingPolicy(warmup=0, budget_s=0.0, min_reps=2, max_reps=2)
    tuner = Tuner(store, policy=quick, algorithms=[Fake("fast"), Fake("new")])  # type: ignore[list-item]
    found = {r.algorithm: r for r in tuner.find_candidates(
        small_problem(n=3, c=6, k=12, h=10, w=10), "cpu", mode="heuristic")}
    assert "not with 1 of algorithms it never saw" in (found["fast"].note or "")
    assert found["new"].time_ms is None


# Bug: the model's samples kept a configuration's time from older code when the current
# code's newer measurement of it failed: the newest usable row counted, not the newest.
def test_a_configuration_whose_newest_row_failed_teaches_no_time(store_url: str) -> None:
    from datetime import timedelta

    from db import find as store_find
    from db.rows import MeasurementRow, utcnow
    from tuner import results as R
    from tuner.devices import identify

    store = open_store(store_url)
    cpu = identify("cpu")
    problem = small_problem(n=1, c=4, k=8, h=8, w=8)
    old = MeasurementRow(algorithm="x", config="default", impl_hash="old", status=R.OK,
                         time_ms=0.01, spread_ms=0.0, min_ms=None, reps=3, workspace_bytes=0,
                         max_error=0.0, rel_error=0.0, error=None,
                         measured_at=utcnow() - timedelta(days=1), tuner_version="t")
    new = MeasurementRow(algorithm="x", config="default", impl_hash="new", status=R.FAILED,
                         time_ms=None, spread_ms=None, min_ms=None, reps=0, workspace_bytes=0,
                         max_error=None, rel_error=None, error="kernel launch failed",
                         measured_at=utcnow(), tuner_version="t")
    for row in (old, new):
        store.write(functools.partial(
            lambda s, row: store_find.save_measurements(
                session=s, fingerprint=cpu.fingerprint, device_info=cpu.info,
                key=problem.key(), rows=[row]), row=row))
    assert M.samples_from_store(store, "cpu")[1] == []
    assert M.sample_count(store, "cpu")[1] == 0


# Newness is counted per configuration: each configuration of one algorithm on one problem
# is a sample of its own (only older rows of the same configuration are left out).
def test_every_configuration_of_an_algorithm_is_a_sample(store_url: str) -> None:
    from db import find as store_find
    from db.rows import MeasurementRow, utcnow
    from tuner import results as R
    from tuner.devices import identify

    store = open_store(store_url)
    cpu = identify("cpu")
    problem = small_problem(n=1, c=4, k=8, h=8, w=8)
    rows = [MeasurementRow(algorithm="x", config=config, impl_hash="new", status=R.OK,
                           time_ms=time_ms, spread_ms=0.0, min_ms=None, reps=3,
                           workspace_bytes=0, max_error=0.0, rel_error=0.0, error=None,
                           measured_at=utcnow(), tuner_version="t")
            for config, time_ms in (("tile_a", 0.01), ("tile_b", 0.02))]
    store.write(lambda s: store_find.save_measurements(
        session=s, fingerprint=cpu.fingerprint, device_info=cpu.info, key=problem.key(),
        rows=rows))
    with store.session() as s:
        timed = store_find.load_timed_measurements(session=s, kind="cpu")
        assert sorted(row.config for _key, _units, row, _device in timed) == ["tile_a", "tile_b"]
        assert store_find.count_timed_measurements(session=s, kind="cpu") == 2
