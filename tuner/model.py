"""A cost model learned from the store: predicted times for configurations never measured.

What it learns: every usable measurement of one device kind (cpu, cuda) in the store,
described by tuner.features (the problem, the device's unit count, the algorithm and the
config's numbers). It predicts log(time_ms) in two parts:
- how much slower a candidate is than the fastest measured for its problem (on that many
  units), log(time / fastest), from every feature: this alone ranks a problem's candidates;
- the fastest time itself, as log(FLOPs) + a learned log(ms per FLOP), from the problem's
  and the device's features only (one row per problem).
Learning the ranking directly ranked better than learning each time: leave-one-network-out
over an H200's 324 layers, 67.1% against 60.8% top-1 within 10%, tied on an H100's 166
(BENCHMARKS.md, "Cost model").
The learner is scikit-learn's HistGradientBoostingRegressor (TVM's and MIOpen's TunaNet
cost models are boosted trees or small nets for the same reason: tabular features, few
thousand rows, fast to fit).

Confidence. The model is a bag of MEMBERS regressors, each fitted on a bootstrap sample of
the measured *problems* (not rows: a problem's configurations rise and fall together, so
resampling problems is what mimics meeting an unseen one). For each candidate:
- `time_ms` is the geometric mean of the members' predictions (each member: a ranking
  regressor and a fastest-time regressor, fitted on the same bootstrap);
- `spread` is the standard deviation of their log-times: the time is uncertain by about a
  factor exp(spread);
- `confidence` is the share of members that predict the candidate within NEAR (10%) of
  their own fastest: for the top candidate, an estimate of the chance that it is within
  10% of the true best. It is 1.0 when every member agrees. It says nothing about
  problems unlike any measured one, where all members extrapolate alike: the note of a
  prediction names how much the model was trained on.

The fitted models of a store are cached per device kind. When the store's generation
counter (db.find.generation, bumped by every write of measurements) moves, the samples are
read again, and the model is refitted only once they grew by REFIT_GROWTH (10%) since its
fit, or when there was no model yet: a fit takes 1-2 s (2,000 rows), and fast mode writes
after every layer it tunes, so refitting on every write cost more than the measurements;
a store with fewer than MIN_ROWS usable rows or MIN_PROBLEMS problems of a kind has no
model, and callers fall back to scaling the nearest measured problem by FLOPs. A fit is also
kept on disk (tuner.model_files), and a later process that would fit under the same rule
loads it instead.
"""

from __future__ import annotations

import functools
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from db import find as store_find
from db.engine import Store
from tuner import model_files
from tuner.features import (
    DEVICE_COLUMNS,
    PROBLEM_COLUMNS,
    Encoder,
    Sample,
    log_ms_per_flop,
    problem_of,
)

if TYPE_CHECKING:
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import ThreadpoolController

#: Fewest usable measurements, and distinct problems, a model is fitted from.
MIN_ROWS = 40
MIN_PROBLEMS = 4
#: Regressors in the bag (five ranked no better than three on the H100 measurements).
MEMBERS = 3
#: Trees per member: rows // 10 of them, within these bounds.
MIN_TREES, MAX_TREES = 100, 200
#: Trees of a fastest-time regressor: one row per problem, a smooth target, and every
#: tree costs milliseconds however few the rows.
SCALE_TREES = 50
#: "Within 10% of the fastest", the closeness `confidence` counts.
NEAR = 1.10
#: Growth of a kind's samples since the last fit that triggers a refit. A fraction, not the
#: float 0.1: in floats 50 * 1.1 is 55.00000000000001, so a store grown
#: by exactly 10% (50 -> 55 rows; 112 of the 200 multiples of 10 up to 2,000 alike) kept its
#: fit (found by mutation testing, 2026-12-01).
REFIT_GROWTH = Fraction(1, 10)
# ONE_THREAD: fits and predictions run on one thread. On a few thousand rows the per-tree
# overhead dominates, and OpenMP's spinning workers on a busy host (a server, a shared CI
# machine) made a 48-row fit take 18 s instead of 0.8 s.


@dataclass(frozen=True)
class Prediction:
    """The model's answer for one candidate."""

    algorithm: str
    config: str
    time_ms: float
    spread: float  # std of the members' log(time): uncertain by a factor of about exp(spread)
    confidence: float  # share of members predicting it within NEAR of their fastest


@dataclass(frozen=True)
class CostModel:
    """A fitted bag of regressors, and what it was fitted on."""

    encoder: Encoder
    members: tuple[Any, ...]  # log(time / the problem's fastest), from every column
    rows: int
    problems: int
    #: log(the problem's fastest ms per FLOP), from the problem and device columns; one per
    #: member
    fastest: tuple[Any, ...] = ()

    def knows(self, algorithm: str) -> bool:
        """Whether `algorithm` was among the measurements fitted (else it cannot be ranked)."""
        return self.encoder.knows(algorithm)

    def predict(self, samples: Sequence[Sample]) -> list[Prediction]:
        """One prediction per sample, in order; the samples are the candidates of one
        problem (confidence compares them with each other)."""
        if not samples:
            return []
        x = self.encoder.matrix(samples)
        flops = np.log([s.problem.flops for s in samples])
        with one_thread():
            logs = np.stack([m.predict(x) + f.predict(x[:, :_SCALE_COLUMNS])
                             for m, f in zip(self.members, self.fastest, strict=True)]
                            ) + flops  # members x samples
        best = logs.min(axis=1, keepdims=True)
        near = (logs <= best + math.log(NEAR)).mean(axis=0)
        mean, spread = logs.mean(axis=0), logs.std(axis=0)
        return [
            Prediction(s.algorithm, s.config, float(math.exp(mean[i])), float(spread[i]),
                       float(near[i]))
            for i, s in enumerate(samples)
        ]

    def describe(self) -> str:
        """What the model was fitted on, for notes."""
        return f"{self.rows} measurements of {self.problems} problems"


def fit(samples: Sequence[Sample], *, seed: int = 0, members: int = MEMBERS) -> CostModel | None:
    """A bag of `members` boosted-tree regressors fitted on `samples`; None if too few."""
    problems = sorted({s.problem for s in samples}, key=repr)
    if len(samples) < MIN_ROWS or len(problems) < MIN_PROBLEMS:
        return None
    encoder = Encoder.for_samples(samples)
    x, per_flop = encoder.matrix(samples), log_ms_per_flop(samples)
    index = {p: i for i, p in enumerate(problems)}
    of_row = np.array([index[s.problem] for s in samples])
    # Per problem and device (one store may hold GPUs of one kind, of other sizes or of the
    # same unit count: an H100 and an H200 both have 132 SMs, and pooled, the slower one's
    # rows were all measured against the other's best, its own never the fastest; a review
    # of the cost model, 2026-11-30): its fastest row, and every row's time relative to it.
    groups: dict[tuple[Any, int, str], int] = {}
    group = np.array([groups.setdefault((s.problem, s.units, s.device), len(groups))
                      for s in samples])
    best = np.full(len(groups), np.inf)
    np.minimum.at(best, group, per_flop)
    relative = per_flop - best[group]
    fastest_row = relative == 0.0
    rng = np.random.default_rng(seed)
    rankers, scales = [], []
    with one_thread():
        for m in range(members):
            repeat = _bootstrap(of_row, len(problems), rng)
            rankers.append(_regressor(len(repeat), seed + m).fit(x[repeat], relative[repeat]))
            best_rows = repeat[fastest_row[repeat]]
            scales.append(_regressor(len(best_rows), seed + m, SCALE_TREES).fit(
                x[best_rows, :_SCALE_COLUMNS], per_flop[best_rows]))
    return CostModel(encoder, tuple(rankers), len(samples), len(problems), tuple(scales))


@contextmanager
def one_thread() -> Iterator[None]:
    """A context in which this thread's fits and predictions run on one thread (see
    ONE_THREAD).

    Only OpenMP is limited, the pool sklearn's trees use, and only for the calling thread:
    its nthreads-var is a per-thread setting. A limit on every library was the process's:
    while one thread fitted or predicted, another's CPU timings ran on one BLAS thread
    (stored as the machine's), and a first device fingerprint taken then recorded
    blas_threads=1 for the process's life (a review of keys and fingerprints, 2026-11-30).
    Nested uses in one thread share the outermost's limit.
    """
    depth = getattr(_DEPTH, "value", 0)
    # A controller of OpenMP alone: a limiter restores every library it knows to what it
    # found at entry, and a BLAS setting another thread made meanwhile would be undone.
    limiter = _controller().select(user_api="openmp").limit(limits=1) if depth == 0 else None
    _DEPTH.value = depth + 1
    try:
        yield
    finally:
        _DEPTH.value = depth
        if limiter is not None:
            limiter.restore_original_limits()


_DEPTH = threading.local()  # this thread's uses of one_thread, nested


@functools.cache
def _controller() -> ThreadpoolController:
    # Made once: threadpoolctl.threadpool_limits inspects every loaded library on each
    # entry, 3.6 ms of a 12 ms prediction for one layer's candidates on this project's CPU
    # machine, paid per layer by a fast find; a kept controller limits in 0.04 ms. It knows
    # the libraries loaded when it is made, so sklearn (and the OpenMP runtime its trees
    # use) is loaded first.
    _sklearn()
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _sklearn() -> type[HistGradientBoostingRegressor]:
    # Imported at the first fit or prediction, not with this module: scikit-learn (and the
    # SciPy it loads) took 1.1 of `import tuner`'s 1.7 s on this project's CPU machine,
    # paid by every process and CLI call, most of which answer from the store and never
    # fit or predict.
    from sklearn.ensemble import HistGradientBoostingRegressor

    return HistGradientBoostingRegressor


#: The leading matrix columns the fastest-time regressor reads: the problem and the device.
_SCALE_COLUMNS = len(PROBLEM_COLUMNS) + len(DEVICE_COLUMNS)


def _bootstrap(of_row: np.ndarray, problems: int, rng: np.random.Generator) -> np.ndarray:
    """Row indices of a bootstrap of problems: each row repeats as often as its problem
    was drawn."""
    draws = np.bincount(rng.integers(0, problems, problems), minlength=problems)
    return np.repeat(np.arange(len(of_row)), draws[of_row])


def _regressor(rows: int, seed: int, trees: int | None = None
               ) -> HistGradientBoostingRegressor:
    # Small leaves on small stores (the default 20 would forbid any split on 40 rows);
    # no early stopping, so that a fit is the same on every run. Capacity: on the H100
    # measurements (about 18 configurations a layer) trees of 31 leaves ranked clearly
    # better than 100 of 15 (BENCHMARKS.md, "Cost model"), and 150, 200 and 300 of them
    # alike within the spread of seeds. A tree costs a few milliseconds however few the
    # rows (a fit precedes a fast find's first measurement), so 200, and small stores,
    # which cannot use them, get fewer.
    return _sklearn()(
        max_iter=trees or min(MAX_TREES, max(MIN_TREES, rows // 10)), learning_rate=0.1,
        max_leaf_nodes=31, min_samples_leaf=max(2, min(20, rows // 30)),
        l2_regularization=1e-3, early_stopping=False, random_state=seed,
    )


def samples_from_store(store: Store, kind: str) -> tuple[int, list[Sample]]:
    """(generation, samples): every usable measurement of device kind `kind`."""
    with store.session() as session:
        generation = store_find.generation(session=session)
        rows = store_find.load_timed_measurements(session=session, kind=kind)
    return generation, [
        Sample(problem_of(key), units, row.algorithm, row.config, row.workspace_bytes,
               row.time_ms, kind, str(device))
        for key, units, row, device in rows
    ]


def sample_count(store: Store, kind: str) -> tuple[int, int]:
    """(generation, how many samples samples_from_store would return), without reading them."""
    with store.session() as session:
        return (store_find.generation(session=session),
                store_find.count_timed_measurements(session=session, kind=kind))


class ModelCache:
    """The fitted models of one store, per device kind, refitted as the store grows.

    Asking costs one read of the generation counter; after a write, one count of the
    samples; a read of them and a fit happen when they grew by REFIT_GROWTH since the last
    fit (the answer cache in front keeps repeated finds away entirely). With a `directory`,
    fits are saved there and a model saved by an earlier process is loaded where it would
    otherwise fit.
    """

    def __init__(
        self, store: Store,
        fitter: Callable[[Sequence[Sample]], CostModel | None] = fit,
        directory: Path | None = None,
    ) -> None:
        # Weakly: model_cache keeps this cache by its store in a WeakKeyDictionary, which a
        # strong reference here kept alive for good, and with it every store's engine and
        # fitted models (a review of resource lifetimes, 2026-11-30).
        self._store = weakref.ref(store)
        self._fit = fitter
        self._directory = directory
        # kind -> (generation seen, samples at the last fit, the model of that fit)
        self._models: dict[str, tuple[int, int, CostModel | None]] = {}
        self._lock = threading.Lock()
        #: How many fits this cache ran (tests assert refits happen only on writes).
        self.fits = 0
        #: Seconds those fits took (benchmarks report what a find spent fitting).
        self.fit_s = 0.0
        #: How many models came from the directory instead of a fit.
        self.loads = 0

    @property
    def store(self) -> Store:
        """The store this cache fits on (alive while anyone asks: they hold it)."""
        store = self._store()
        if store is None:
            raise RuntimeError("the store of this model cache is gone")
        return store

    def model(self, kind: str) -> CostModel | None:
        """The model of device kind `kind` for the store as it is now; None if too small."""
        with self.store.session() as session:
            now = store_find.generation(session=session)
        found = self._models.get(kind)
        if found is not None and found[0] == now:
            return found[2]
        with self._lock:  # one fit at a time; a second asker reuses the first one's
            found = self._models.get(kind)
            if found is not None and found[0] == now:
                return found[2]
            if found is not None and found[2] is not None:
                # Whether the store grew enough to refit needs only a count: reading every
                # sample after each write cost 0.1 s a layer in a fast tuning of ResNet-50
                # on the H200 (2026-11-27), more than measuring the layer's candidates.
                generation, rows = sample_count(self.store, kind)
                if _fresh(found[1], rows):
                    self._models[kind] = (generation, found[1], found[2])  # fresh enough
                    return found[2]
            generation, samples = samples_from_store(self.store, kind)
            saved = self._load(kind, samples)
            if saved is not None:
                self.loads += 1
                self._models[kind] = (generation, saved.rows, saved.model)
                return saved.model
            began = time.perf_counter()
            model = self._fit(samples)
            self.fit_s += time.perf_counter() - began
            self.fits += 1
            self._models[kind] = (generation, len(samples), model)
            if model is not None and self._directory is not None:
                model_files.save(self._directory, self.store.url, kind, samples, model)
            return model

    def _load(self, kind: str, samples: Sequence[Sample]) -> model_files.SavedModel | None:
        if self._directory is None:
            return None
        saved = model_files.load(self._directory, self.store.url, kind)
        if saved is None or not _fresh(saved.rows, len(samples)):
            return None
        if not model_files.fitted_on(saved, samples) or not isinstance(saved.model, CostModel):
            return None
        try:
            # A file of other code that still unpickles (another feature layout) fails
            # here, once, rather than in every find of every process until a refit.
            saved.model.predict(samples[:1])
        except Exception:
            return None
        return saved


def _fresh(rows_at_fit: int, rows_now: int) -> bool:
    """The refit rule: a fit on `rows_at_fit` samples serves until they grew by REFIT_GROWTH,
    or shrank (rows re-measured as failures, or removed: a fit on rows the store no longer
    holds was served for good; a review of the cost model, 2026-11-30)."""
    return rows_at_fit <= rows_now < rows_at_fit * (1 + REFIT_GROWTH)


_CACHES: weakref.WeakKeyDictionary[Store, ModelCache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def model_cache(store: Store) -> ModelCache:
    """The one ModelCache of `store` in this process (every tuner of it shares the fits)."""
    with _CACHES_LOCK:
        found = _CACHES.get(store)
        if found is None:
            found = _CACHES[store] = ModelCache(store, directory=model_files.model_dir())
        return found
