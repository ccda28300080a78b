"""The learned cost model and the find modes it drives: fast (measure its top k) and
heuristic (measure nothing)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from algorithms.problem import ConvProblem
from algorithms.runtime import TimingPolicy
from db import find as store_find
from db.engine import Store, open_store
from db.models import Measurement
from db.rows import MeasurementRow, utcnow
from tests.fleet.conftest import pg_url, store_url
from tests.tuner.fakes import Fake, small_problem
from tuner import model as M
from tuner import results as R
from tuner.devices import identify
from tuner.errors import NotInDatabase
from tuner.service import Service
from tuner.tuning import Tuner

QUICK = TimingPolicy(warmup=0, budget_s=0.0, min_reps=2, max_reps=2)
#: Ground truth of the synthetic store: milliseconds per GFLOP of each fake algorithm.
SPEED = {"fast": 1.0, "mid": 2.5, "slow": 8.0, "slowest": 20.0}


def training_problems() -> list[ConvProblem]:
    """Twelve 3x3 problems of different sizes (the unseen ones below are not among them)."""
    return [small_problem(n=n, c=c, k=k, h=hw, w=hw)
            for n in (1, 2, 4) for c, k in ((4, 8), (8, 16)) for hw in (8, 12)]


def seed(store: Store, speeds: dict[str, float], problems: list[ConvProblem]) -> None:
    """Store one measurement per (problem, algorithm): time = FLOPs x speed (the truth)."""
    cpu = identify("cpu")
    for p in problems:
        rows = [MeasurementRow(
            algorithm=name, config="default", impl_hash=Fake.impl_hash, status=R.OK,
            time_ms=p.flops * 1e-9 * ms_per_gflop, spread_ms=0.0, min_ms=None, reps=3,
            workspace_bytes=0, max_error=0.0, rel_error=0.0, error=None,
            measured_at=utcnow(), tuner_version="test",
        ) for name, ms_per_gflop in speeds.items()]
        store.write(functools.partial(
            _save, fingerprint=cpu.fingerprint, info=cpu.info, problem=p, rows=rows))


def _save(session: Session, *, fingerprint: str, info: dict[str, object],
          problem: ConvProblem, rows: list[MeasurementRow]) -> None:
    store_find.save_measurements(session=session, fingerprint=fingerprint, device_info=info,
                                 key=problem.key(), rows=rows)


def rows_of(store: Store, problem: ConvProblem) -> int:
    with store.session() as session:
        problem_id = store_find.find_problem_id(session=session, key=problem.key())
        return int(session.execute(select(func.count()).select_from(Measurement).where(
            Measurement.problem_id == problem_id)).scalar() or 0)


def fakes() -> dict[str, Fake]:
    return {name: Fake(name) for name in SPEED}


def tuner(store: Store, algos: dict[str, Fake], **kw: object) -> Tuner:
    return Tuner(store, policy=QUICK, algorithms=algos.values(), **kw)  # type: ignore[arg-type]


UNSEEN = small_problem(n=3, c=6, k=12, h=10, w=10)
__all__ = ["pg_url", "store_url"]  # the store fixtures: SQLite, then PostgreSQL


def test_the_model_ranks_the_truly_faster_algorithm_first(db_url: str) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    model = M.fit(M.samples_from_store(store, "cpu")[1])
    assert model is not None
    got = tuner(store, fakes()).find(UNSEEN, "cpu", mode="heuristic")
    assert [r.algorithm for r in got] == ["fast", "mid", "slow", "slowest"]
    assert {r.source for r in got} == {R.PREDICTED}
    assert all((r.note or "").startswith("model (48 measurements of 12 problems)") for r in got)
    assert got[0].confidence == 1.0 and got[-1].confidence == 0.0
    # The time is learned per FLOP, so an unseen size is predicted near the truth.
    truth = UNSEEN.flops * 1e-9 * SPEED["fast"]
    assert got[0].time_ms == pytest.approx(truth, rel=0.5)


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


def counting(store: Store) -> tuple[M.ModelCache, list[int]]:
    fits: list[int] = []

    def fit(samples: object) -> M.CostModel | None:
        fits.append(1)
        return M.fit(samples)  # type: ignore[arg-type]

    cache = M.ModelCache(store, fit)
    M._CACHES[store] = cache
    return cache, fits


def test_the_model_is_refit_as_the_store_grows_and_not_on_cached_reads(db_url: str) -> None:
    # Bug pinned: every write refit the model (about a second each), and fast mode writes
    # after every layer it tunes; now a refit waits until the samples grew by 10%.
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    _, fits = counting(store)
    algos = fakes()
    facade = Service(store, tuner=tuner(store, algos), cache_check_s=0)
    for _ in range(3):
        assert facade.best(UNSEEN, "cpu", mode="heuristic").algorithm == "fast"
    other = small_problem(n=5, c=6, k=12, h=10, w=10)
    facade.best(other, "cpu", mode="heuristic")
    assert len(fits) == 1  # one fit, however many finds ask
    seeded = len(training_problems()) * len(SPEED)
    facade.find(small_problem(n=3, c=8, k=8), "cpu")  # a write bumps the generation ...
    assert seeded + len(SPEED) < seeded * (1 + M.REFIT_GROWTH)  # ... by less than 10%
    assert facade.best(UNSEEN, "cpu", mode="heuristic").source == R.PREDICTED
    assert len(fits) == 1
    facade.find(small_problem(n=5, c=8, k=8), "cpu")  # now past 10% more samples
    assert seeded + 2 * len(SPEED) >= seeded * (1 + M.REFIT_GROWTH)
    assert facade.best(UNSEEN, "cpu", mode="heuristic").source == R.PREDICTED
    assert len(fits) == 2


def _row(algorithm: str, status: str = R.OK, time_ms: float | None = 1.5,
         impl_hash: str = Fake.impl_hash) -> MeasurementRow:
    return MeasurementRow(
        algorithm=algorithm, config="default", impl_hash=impl_hash, status=status,
        time_ms=time_ms, spread_ms=0.0, min_ms=None, reps=3, workspace_bytes=0,
        max_error=0.0, rel_error=0.0, error=None, measured_at=utcnow(), tuner_version="test")


def test_the_sample_count_is_the_number_of_samples(store_url: str) -> None:
    store = open_store(store_url)
    seed(store, SPEED, training_problems()[:3])
    cpu = identify("cpu")
    twin = {**cpu.info, "name": "another cpu"}  # a second device of the same kind
    gpu = {**cpu.info, "kind": "cuda"}
    problem = training_problems()[0]
    for fingerprint, info, rows in (
        (cpu.fingerprint, cpu.info, [
            _row("fast", impl_hash="older"),  # one configuration, two implementations
            _row("failed", status=R.FAILED, time_ms=None),
            _row("wrong", status=R.WRONG_RESULT),
            _row("untimed", time_ms=0.0),
        ]),
        ("twin", twin, [_row("fast"), _row("mid")]),
        ("gpu", gpu, [_row("fast")]),
    ):
        store.write(functools.partial(_save, fingerprint=fingerprint, info=info,
                                      problem=problem, rows=rows))
    for kind, expected in (("cpu", 3 * len(SPEED) + 2), ("cuda", 1), ("none", 0)):
        _, samples = M.samples_from_store(store, kind)
        assert len(samples) == expected
        assert M.sample_count(store, kind)[1] == expected


def test_a_write_that_keeps_the_model_fresh_reads_no_samples(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Bug pinned: after every write the model cache re-read every stored sample only to
    # count them (0.1 s a layer of a fast ResNet-50 tuning on the H200, 2026-11-27).
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    cache, fits = counting(store)
    assert cache.model("cpu") is not None
    reads: list[str] = []
    original = M.samples_from_store

    def read(store: Store, kind: str) -> tuple[int, list[M.Sample]]:
        reads.append(kind)
        return original(store, kind)

    monkeypatch.setattr(M, "samples_from_store", read)
    seed(store, {"fast": 1.0}, [small_problem(n=3, c=8, k=8)])  # one more: still fresh
    assert cache.model("cpu") is not None
    assert (reads, len(fits)) == ([], 1)
    seed(store, SPEED, [small_problem(n=5, c=8, k=8), small_problem(n=6, c=8, k=8)])
    assert cache.model("cpu") is not None  # 10% more samples: read and refit
    assert (reads, len(fits)) == (["cpu"], 2)


def test_a_prediction_cached_in_the_service_is_dropped_by_any_write(db_url: str) -> None:
    # The answer cache dropped only the written problem's answers, so a prediction for
    # another problem kept answering from the model as it was before the write.
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    facade = Service(store, cache_check_s=60)
    facade.tuner = tuner(store, fakes(), on_store=facade.answers.invalidate)
    facade.find(UNSEEN, "cpu", mode="heuristic")
    assert facade.cached_find(UNSEEN, "cpu", mode="heuristic") is not None
    facade.find(small_problem(n=3, c=8, k=8), "cpu")
    assert facade.cached_find(UNSEEN, "cpu", mode="heuristic") is None


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


# Bug: tuner.model imported scikit-learn (and SciPy with it) at import, 1.1 of `import
# tuner`'s 1.7 s on the project's CPU machine, paid by every process and CLI call, though
# most answer from the store and never fit or predict.
def test_importing_the_tuner_loads_no_learner_until_a_fit_or_prediction() -> None:
    import subprocess
    import sys

    script = ("import sys, tuner, tuner.cli, api.app\n"
              "learners = ('sklearn', 'scipy', 'threadpoolctl')\n"
              "print(sorted(m for m in learners if m in sys.modules))\n"
              "from tuner import model\n"
              "libraries = {i['internal_api'] for i in model._controller().info()}\n"
              "print('sklearn' in sys.modules, 'openmp' in libraries)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    # The controller that limits fits to one thread is made after sklearn's OpenMP loads.
    assert done.stdout.split("\n")[:2] == ["[]", "True True"]
