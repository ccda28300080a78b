"""The cost model and fast mode: the faults a review of them found on 2026-11-30."""

from __future__ import annotations

import threading
from typing import Any

from threadpoolctl import threadpool_info

from algorithms.problem import ConvProblem
from algorithms.runtime import TimingPolicy
from db.engine import open_store
from tests.tuner.fakes import Fake, small_problem
from tests.tuner.test_model import seed, training_problems
from tuner import model as M
from tuner.features import Sample
from tuner.tuning import Tuner

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
