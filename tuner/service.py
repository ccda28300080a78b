"""The facade every front end goes through: one long-lived `Service` per store.

The Python API, the CLI, the HTTP service and the PyTorch module all call a `Service`
(`service(db)` returns the one for a database URL). It holds the store, the tuner, the
in-process answer cache and the plans, and offers the listings (results, devices,
algorithms) and the bundle moves, so that no front end imports `db` or the registry.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import replace
from typing import Any

from sqlalchemy.orm import Session

from algorithms.problem import ConvProblem
from algorithms.registry import (
    ALGORITHM_NAMES,
    BACKEND_MODULES,
    algorithms_for,
    backend,
    get_algorithm,
)
from db import jobs as stored_jobs
from db import reports
from db.engine import Store, is_open, open_store, opened_store
from db.errors import StoreReadOnly, StoreUnusable
from db.location import default_url
from db.prune import Pruned
from db.rows import MeasurementRow  # the fields of each listed result (api.schemas)
from db.urls import check_url, describe_url
from tuner import bundles, pruning
from tuner import results as R
from tuner.answers import AnswerCache
from tuner.batch_chunks import chunk_sizes, chunked_plan
from tuner.candidates import validate_workspace_limit, within_limit
from tuner.devices import backend_of, cuda_available, get_runtime, identify, parse_device
from tuner.errors import NotInDatabase
from tuner.modes import MODES, check_mode
from tuner.plans import Plan
from tuner.results import AlgorithmResult, best_of, per_algorithm
from tuner.tuning import Tuner

#: Sources whose answer rests on rows of other problems or devices.
BORROWED = frozenset({R.PREDICTED, R.SAME_MODEL, R.SAME_ARCHITECTURE})


class Answer:
    """One cached find: the ranked configurations, and per algorithm on first demand."""

    __slots__ = ("_per_algorithm", "ranked")

    def __init__(self, ranked: list[AlgorithmResult]) -> None:
        # What this call measured is, for every later answer, stored on this device.
        self.ranked = tuple(
            replace(r, source=R.MEASURED_HERE) if r.source == R.FRESH else r for r in ranked
        )
        self._per_algorithm: tuple[AlgorithmResult, ...] | None = None

    def per_algorithm(self) -> list[AlgorithmResult]:
        """One result per algorithm, fastest usable first."""
        if self._per_algorithm is None:
            self._per_algorithm = tuple(per_algorithm(list(self.ranked)))
        return list(self._per_algorithm)


class Service:
    """A store with its tuner, answer cache and plans; safe to share between threads."""

    def __init__(self, store: Store, *, tuner: Tuner | None = None,
                 cache_check_s: float | None = None) -> None:
        self.store = store
        self.answers = AnswerCache(store, cache_check_s)
        self.tuner = tuner or Tuner(store, on_store=self.answers.invalidate)
        self._plans: OrderedDict[tuple[Any, ...], Plan] = OrderedDict()
        self._plan_lock = threading.Lock()
        # Plans by the arguments of a call (convolve, the torch module): (answer-cache
        # generation when found, plan). Building the problem and finding its answer again
        # cost more host time per call than the plan itself.
        self._call_plans: OrderedDict[Hashable, tuple[int, Plan]] = OrderedDict()

    @property
    def location(self) -> str:
        """Where the store lives: its URL, any password hidden."""
        return describe_url(self.store.url)

    # --- finds -----------------------------------------------------------------------------
    def _answer(
        self, problem: ConvProblem, device: str, workspace_limit: int | None, mode: str
    ) -> Answer | list[AlgorithmResult]:
        if not isinstance(problem, ConvProblem):
            raise ValueError(f"problem must be a ConvProblem, got {type(problem).__name__}")
        workspace_limit = validate_workspace_limit(workspace_limit)
        mode = check_mode(mode)
        if mode == "tune":  # measures again; the tuner invalidates what it stores
            return self.tuner.find_candidates(problem, device, workspace_limit, mode=mode)
        key = (self.tuner.identify(device).fingerprint, problem, workspace_limit, mode)
        hit = self.answers.get(key)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        token = self.answers.token()
        ranked = self.tuner.find_candidates(problem, device, workspace_limit, mode=mode)
        answer = Answer(ranked)
        # A prediction or a stand-in device's answer rests on other problems' or devices'
        # rows: any write may change it, not only one of this problem on this device.
        self.answers.put(key, token, answer, broad=any(r.source in BORROWED for r in ranked))
        return ranked

    def cached_find(
        self, problem: ConvProblem, device: str, workspace_limit: int | None = None,
        *, mode: str = "auto",
    ) -> list[AlgorithmResult] | None:
        """The answer of `find` when the answer cache holds it (no store access), else None."""
        mode = check_mode(mode)
        if mode == "tune" or not isinstance(problem, ConvProblem):
            return None
        key = (self.tuner.identify(device).fingerprint, problem,
               validate_workspace_limit(workspace_limit), mode)
        hit = self.answers.get(key)
        return hit.per_algorithm() if isinstance(hit, Answer) else None

    def find_candidates(
        self, problem: ConvProblem, device: str, workspace_limit: int | None = None,
        *, mode: str = "auto",
    ) -> list[AlgorithmResult]:
        """One result per configuration, fastest usable first (Tuner.find_candidates)."""
        found = self._answer(problem, device, workspace_limit, mode)
        return list(found.ranked) if isinstance(found, Answer) else found

    def find(
        self, problem: ConvProblem, device: str, workspace_limit: int | None = None,
        *, mode: str = "auto",
    ) -> list[AlgorithmResult]:
        """One result per algorithm, fastest usable first (Tuner.find)."""
        found = self._answer(problem, device, workspace_limit, mode)
        return found.per_algorithm() if isinstance(found, Answer) else per_algorithm(found)

    def best(
        self, problem: ConvProblem, device: str, workspace_limit: int | None = None,
        *, mode: str = "auto",
    ) -> AlgorithmResult:
        """The fastest usable configuration; NoUsableAlgorithm when there is none."""
        found = self._answer(problem, device, workspace_limit, mode)
        ranked = found.ranked if isinstance(found, Answer) else found
        if ranked and ranked[0].usable:
            return ranked[0]
        return best_of(list(ranked), problem, device, workspace_limit)

    def named(
        self, problem: ConvProblem, device: str, name: str, workspace_limit: int | None = None
    ) -> AlgorithmResult:
        """The named algorithm's best stored configuration, else its first that fits."""
        backend = backend_of(device)
        support = get_algorithm(backend, name).supports(problem)
        if not support:
            raise ValueError(f"algorithm {name!r} does not support {problem.describe()}: "
                             f"{support.reason}")
        workspace_limit = validate_workspace_limit(workspace_limit)
        candidates, _ = self.tuner.candidates(problem, backend)
        fitting, _over = within_limit([c for c in candidates if c.algorithm.name == name],
                                      workspace_limit)
        if not fitting:
            raise ValueError(f"algorithm {name!r} needs more workspace than "
                             f"workspace_limit={workspace_limit} for {problem.describe()}")
        try:
            ranked = self.find_candidates(problem, device, workspace_limit, mode="cached")
        except LookupError:
            ranked = []
        for result in ranked:
            if result.algorithm == name and result.usable:
                return result
        first = fitting[0]
        return AlgorithmResult(
            algorithm=name, config=first.config, status=R.OK, time_ms=None,
            workspace_bytes=first.workspace_bytes, source=R.NOT_MEASURED,
        )

    # --- plans ------------------------------------------------------------------------------
    def plan(
        self, problem: ConvProblem, device: str, workspace_limit: int | None = None,
        *, algorithm: str | None = None, measure: bool = True,
    ) -> Plan:
        """A runnable plan of the best (or the named) algorithm, tuning first if needed.

        Plans are kept per (device, problem, limit, algorithm), at most MAX_PLANS of them,
        and rebuilt when a re-tune or another process's results change the choice. A problem
        with an operand too large for the device's kernels is planned in batch chunks
        (tuner.batch_chunks).
        `measure=False` (a call inside a CUDA graph capture, where timing cannot run):
        this device's stored measurements only, else a ValueError saying to run the call
        once before capturing.
        """
        runtime = get_runtime(device)
        sizes = chunk_sizes(problem, runtime.max_operand_elements)
        if sizes is not None:  # too large for the kernels whole: each chunk planned alone
            return chunked_plan(problem, device, runtime, sizes, lambda part: self.plan(
                part, device, workspace_limit, algorithm=algorithm, measure=measure))
        if algorithm is None and not measure:
            choice = self._measured_best(problem, device, workspace_limit)
        elif algorithm is None:
            choice = self.best(problem, device, workspace_limit)
        else:
            choice = self.named(problem, device, algorithm, workspace_limit)
        key = (device, problem, workspace_limit, algorithm)
        found = self._plans.get(key)
        if found is not None and (found.algorithm, found.config) == (
            choice.algorithm, choice.config
        ):
            _used(self._plans, key)
            return found
        built = Plan(problem, device, choice, get_algorithm(backend_of(device), choice.algorithm),
                     runtime)
        with self._plan_lock:
            self._plans[key] = built
            while len(self._plans) > MAX_PLANS:
                self._plans.popitem(last=False)  # the least recently used, and its workspace
        return built

    def _measured_best(self, problem: ConvProblem, device: str,
                       workspace_limit: int | None) -> AlgorithmResult:
        """The best of this device's stored measurements of `problem`; ValueError where the
        store lacks some (measuring them here would end a capture: synchronisations)."""
        try:
            choice = self.best(problem, device, workspace_limit, mode="cached")
        except NotInDatabase:
            choice = None
        if choice is None or choice.source not in (R.FRESH, R.MEASURED_HERE):
            raise ValueError(
                f"{problem.describe()} is not tuned on {device} yet, and tuning cannot run "
                "inside a CUDA graph capture: run the call once before capturing")
        return choice

    def call_plan(self, key: Hashable) -> Plan | None:
        """The plan `remember_call` kept for `key`, unless an answer may have changed since
        (any write by this process, or by another one seen by the answer cache)."""
        found = self._call_plans.get(key)
        if found is not None and found[0] == self.answers.current():
            _used(self._call_plans, key)
            return found[1]
        return None

    def remember_call(self, key: Hashable, token: int, plan: Plan) -> None:
        """Keep `plan` for calls with `key`; `token` is `answers.token()` from before the
        plan was found, so that a plan found during a write is never served after it."""
        with self._plan_lock:
            self._call_plans[key] = (token, plan)
            while len(self._call_plans) > MAX_PLANS:
                self._call_plans.popitem(last=False)  # the least recently used

    def largest_workspace(
        self, problem: ConvProblem, device: str, workspace_limit: int | None
    ) -> int:
        """The largest workspace a tuning of `problem` would allocate under the limit."""
        candidates, _ = self.tuner.candidates(problem, backend_of(device))
        allowed, _over = within_limit(candidates, validate_workspace_limit(workspace_limit))
        return max((c.workspace_bytes for c in allowed), default=0)

    @staticmethod
    def availability(device: str) -> tuple[bool, str]:
        """Whether `device`'s backend can run here, and why not (cheap)."""
        return backend(backend_of(device)).available()

    @staticmethod
    def memory_bytes(device: str) -> int | None:
        """Memory free for buffers on `device` (None where the OS does not say)."""
        return get_runtime(device).memory_bytes()

    # --- listings ---------------------------------------------------------------------------
    def results(
        self, filters: Mapping[str, Any] | None = None, *, limit: int = 100, offset: int = 0
    ) -> tuple[int, list[dict[str, Any]]]:
        """Stored measurements, newest first: (total, page). See db.reports.list_results."""
        with self.store.session() as session:
            return reports.list_results(
                session=session, filters=filters, limit=limit, offset=offset
            )

    def prune(self, *, device: str | None = None, older_than_days: float | None = None,
              stale: bool = False, delete: bool = False) -> tuple[Pruned, dict[str, str]]:
        """The stored measurements matching every criterion given, deleted if `delete`, and
        the answers kept in memory with them; with the backends left alone
        (tuner.pruning.prune)."""
        pruned, unjudged = pruning.prune(self.store, device=device, stale=stale,
                                         older_than_days=older_than_days, delete=delete)
        if delete and pruned.matched:
            self.answers.clear()
        return pruned, unjudged

    def devices(self, default: str | None = None) -> dict[str, Any]:
        """Devices here (with fingerprints), CUDA availability, and devices in the store."""
        ok, why = cuda_available()
        here = [identify("cpu")]
        if ok:
            here.append(identify(parse_device("cuda")))
        with self.store.session() as session:
            stored = reports.list_devices(session=session)
        return {
            "default": parse_device(default),
            "here": [
                {"device": d.device, "fingerprint": d.fingerprint, "info": d.info} for d in here
            ],
            "cuda": {"available": ok, "reason": why},
            "database": stored,
        }

    @staticmethod
    def algorithms() -> dict[str, Any]:
        """Every algorithm name ever registered, with the backends that can run it here."""
        available: dict[str, list[str]] = {name: [] for name in ALGORITHM_NAMES}
        errors: dict[str, str] = {}
        for name in BACKEND_MODULES:
            try:
                for algorithm in algorithms_for(name):
                    available[algorithm.name].append(name)
            except Exception as exc:  # a backend that cannot load is reported, not fatal
                errors[name] = f"{type(exc).__name__}: {exc}"
        return {"algorithms": available, "backend_errors": errors}

    # --- bundles ----------------------------------------------------------------------------
    def export_bundle(self, *, device: str | None = None) -> str:
        """The store's measurements (or those of devices whose fingerprint starts with
        `device`) as bundle text."""
        return bundles.export_bundle(self.store, device=device)

    def import_bundle(self, data: str | bytes) -> dict[str, int]:
        """Validate and merge a bundle; every cached answer is dropped afterwards."""
        counts = bundles.import_bundle(self.store, data)  # nothing written if it raises
        # The merge does not say which store generation it produced, so the cache does not
        # count it as its own: the next check drops everything once more (never a later
        # write of another process taken for this one).
        self.answers.clear()
        return counts

    # --- jobs of the HTTP service --------------------------------------------------------
    def save_job(self, job_id: str, snapshot: Mapping[str, Any], *, kept: int) -> bool:
        """Store a job's snapshot; finished jobs beyond the `kept` newest are dropped. False,
        nothing written, where the stored job has finished already (db.jobs.save_job)."""
        def work(session: Session) -> bool:
            written = stored_jobs.save_job(session=session, job_id=job_id, snapshot=snapshot)
            if snapshot["state"] in stored_jobs.FINISHED:
                stored_jobs.prune_jobs(session=session, kept=kept)
            return written

        return self.store.write(work)

    def job(self, job_id: str) -> dict[str, Any] | None:
        """A stored job's snapshot, whichever process runs it; None when unknown."""
        with self.store.session() as session:
            return stored_jobs.load_job(session=session, job_id=job_id)


#: Plans kept per Service: each may hold a workspace, so the least recently used go
#: first beyond this.
MAX_PLANS = 256


def _used(kept: OrderedDict[Any, Any], key: Hashable) -> None:
    """Mark `key` of a kept-plans table as just used, so that it leaves last: kept first in
    first out (and the call plans all dropped at once when full), a working set just over
    MAX_PLANS rebuilt a plan at every call (a review of resource lifetimes, 2026-11-30:
    260 call shapes, 72 us a call instead of 15)."""
    # Not contextlib.suppress: this runs at every convolve() call, and costs it less so.
    try:  # noqa: SIM105
        kept.move_to_end(key)
    except KeyError:  # another thread's insertion evicted it meanwhile: it is still returned
        pass

__all__ = ["JOB_FINISHED", "JOB_STALE_AFTER_KEY", "MAX_PLANS", "MODES", "Answer",
           "MeasurementRow", "Pruned", "Service", "StoreReadOnly", "StoreUnusable",
           "check_url", "default_url", "describe_url", "service"]

#: What a job's stored snapshot says, for the HTTP layer (which does not import db).
JOB_FINISHED, JOB_STALE_AFTER_KEY = stored_jobs.FINISHED, stored_jobs.STALE_AFTER_KEY

_SERVICES: dict[str, Service] = {}
_LOCK = threading.Lock()


def opened_service(db: str | None = None) -> Service | None:
    """The Service of `db` if this process opened its store already, else None (nothing is
    opened or created)."""
    url = db or default_url()
    store = opened_store(url)
    found = None if store is None else _SERVICES.get(url)
    return found if found is not None and found.store is store else None


def service(db: str | None = None) -> Service:
    """The long-lived Service of database URL `db` (default: $CONVTUNE_DB_URL or the cache)."""
    found = opened_service(db)
    if found is not None:
        return found
    url = db or default_url()
    store = open_store(url)
    with _LOCK:
        found = _SERVICES.get(url)
        if found is None or found.store is not store:  # new, or its store was closed
            found = _SERVICES[url] = Service(store)
            # The services of stores closed since (db.engine.MAX_STORES) go with them, their
            # answers and plans too: they were kept for good.
            for closed in [u for u, kept in _SERVICES.items() if not is_open(kept.store)]:
                del _SERVICES[closed]
        return found
