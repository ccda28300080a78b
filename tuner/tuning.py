"""The tuner: look up what is stored, measure what is missing, verify, store, choose."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.exc import IntegrityError, OperationalError

from algorithms.base import Algorithm
from algorithms.problem import ConvProblem
from algorithms.reference import max_abs_error, reference_conv, relative_error, tolerance
from algorithms.registry import algorithms_for
from db import queries
from db.engine import Store
from db.queries import MeasurementRow
from tuner import results as R
from tuner.devices import DeviceIdentity, backend_of, get_runtime, identify, implementation_hash
from tuner.results import AlgorithmResult, rank
from tuner.runtime import Runtime, TimingPolicy

TUNER_VERSION = "0.1.0"

#: The find modes: answer from the store only, measure everything now, or store-then-measure.
MODES = ("cached", "tune", "auto")


class NoUsableAlgorithm(LookupError):
    """No candidate is usable for this problem on this device under this workspace limit."""


class NotInDatabase(LookupError):
    """mode="cached" and the store has not measured every candidate of this problem."""


@dataclass(frozen=True)
class Candidate:
    """One algorithm configuration, with its workspace for the problem at hand."""

    algorithm: Algorithm
    config: str
    workspace_bytes: int
    impl_hash: str

    @property
    def key(self) -> tuple[str, str]:
        """(algorithm name, config): unique within one find."""
        return (self.algorithm.name, self.config)


def _locks() -> Callable[[Any], threading.Lock]:
    table: dict[Any, threading.Lock] = {}
    guard = threading.Lock()

    def lock_for(key: Any) -> threading.Lock:
        with guard:
            return table.setdefault(key, threading.Lock())

    return lock_for


# One lock per (device, problem) in this process: two threads (two HTTP requests, say)
# asking for the same problem never measure it at the same time; the second reads the
# first one's results from the store.
_lock_for = _locks()


def validate_workspace_limit(limit: Any) -> int | None:
    """None (no limit) or a non-negative int of bytes."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)):
        raise ValueError(f"workspace_limit must be a whole number of bytes or None, got {limit!r}")
    if limit < 0:
        raise ValueError(f"workspace_limit must be non-negative, got {limit}")
    return int(limit)


class Tuner:
    """Benchmarks the candidates of a problem on a device and keeps every measurement."""

    def __init__(
        self,
        store: Store,
        *,
        policy: TimingPolicy | None = None,
        algorithms: Iterable[Algorithm] | None = None,
        seed: int | None = None,
    ) -> None:
        self.store = store
        self.policy = policy or TimingPolicy.from_env()
        self._algorithms = list(algorithms) if algorithms is not None else None
        self._rng = np.random.default_rng(seed)

    # --- candidates -------------------------------------------------------------------------
    def algorithms(self, backend: str) -> list[Algorithm]:
        """The algorithms this tuner considers on a backend."""
        if self._algorithms is not None:
            return [a for a in self._algorithms if a.backend == backend]
        return algorithms_for(backend)

    def candidates(
        self, problem: ConvProblem, backend: str
    ) -> tuple[list[Candidate], list[AlgorithmResult]]:
        """Supported configurations, and an `unsupported` result per algorithm that is not."""
        candidates: list[Candidate] = []
        unsupported: list[AlgorithmResult] = []
        for algorithm in self.algorithms(backend):
            support = algorithm.supports(problem)
            if not support:
                unsupported.append(AlgorithmResult(
                    algorithm=algorithm.name, config="", status=R.UNSUPPORTED,
                    time_ms=None, workspace_bytes=0, error=support.reason,
                ))
                continue
            digest = getattr(algorithm, "impl_hash", None) or implementation_hash(backend)
            for config in algorithm.configs(problem):
                candidates.append(Candidate(
                    algorithm, config, algorithm.workspace_bytes(problem, config), digest
                ))
        return candidates, unsupported

    # --- the find -------------------------------------------------------------------------------
    def find_candidates(
        self,
        problem: ConvProblem,
        device: str,
        workspace_limit: int | None = None,
        *,
        mode: str = "auto",
    ) -> list[AlgorithmResult]:
        """One result per configuration, fastest usable first (see `find`)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        workspace_limit = validate_workspace_limit(workspace_limit)
        identity = identify(device)
        candidates, results = self.candidates(problem, backend_of(device))
        allowed = []
        for cand in candidates:
            if workspace_limit is not None and cand.workspace_bytes > workspace_limit:
                results.append(AlgorithmResult(
                    algorithm=cand.algorithm.name, config=cand.config,
                    status=R.OVER_WORKSPACE_LIMIT, time_ms=None,
                    workspace_bytes=cand.workspace_bytes,
                    error=f"needs {cand.workspace_bytes} bytes of workspace, "
                          f"limit is {workspace_limit}",
                ))
            else:
                allowed.append(cand)
        if mode == "tune":
            with _lock_for((identity.fingerprint, problem)):
                fresh = self._measure(problem, identity, allowed)
            return rank(results + fresh)

        stored = self._load(problem, identity, allowed)
        missing = [c for c in allowed if c.key not in stored]
        if missing and mode == "cached":
            names = sorted({f"{c.algorithm.name}/{c.config}" for c in missing})
            raise NotInDatabase(
                f"{problem.describe()} on {identity.info.get('name', device)} has not been "
                f"measured for {', '.join(names)}"
            )
        if missing:
            with _lock_for((identity.fingerprint, problem)):
                # Another thread may have measured them while we waited for the lock.
                stored = self._load(problem, identity, allowed)
                missing = [c for c in allowed if c.key not in stored]
                fresh = self._measure(problem, identity, missing)
        else:
            fresh = []
        fresh_keys = {(r.algorithm, r.config) for r in fresh}
        results += fresh
        results += [stored[c.key] for c in allowed if c.key not in fresh_keys]
        return rank(results)

    def find(
        self,
        problem: ConvProblem,
        device: str,
        workspace_limit: int | None = None,
        *,
        mode: str = "auto",
    ) -> list[AlgorithmResult]:
        """One result per algorithm (its best configuration), fastest usable first."""
        per_config = self.find_candidates(problem, device, workspace_limit, mode=mode)
        best: dict[str, AlgorithmResult] = {}
        for result in per_config:  # ranked: the first seen per algorithm is its best
            current = best.get(result.algorithm)
            if current is None or _more_telling(result, current):
                best[result.algorithm] = result
        return rank(list(best.values()))

    def best(
        self,
        problem: ConvProblem,
        device: str,
        workspace_limit: int | None = None,
        *,
        mode: str = "auto",
    ) -> AlgorithmResult:
        """The fastest usable result; NoUsableAlgorithm when there is none."""
        ranked = self.find_candidates(problem, device, workspace_limit, mode=mode)
        if ranked and ranked[0].usable:
            return ranked[0]
        summary = "; ".join(
            f"{r.algorithm}{'/' + r.config if r.config else ''}: {r.status}"
            + (f" ({r.error})" if r.error else "")
            for r in ranked
        )
        raise NoUsableAlgorithm(
            f"no usable algorithm for {problem.describe()} on {device} "
            f"with workspace_limit={workspace_limit}: {summary}"
        )

    # --- store ------------------------------------------------------------------------------------
    def _load(
        self, problem: ConvProblem, identity: DeviceIdentity, allowed: list[Candidate]
    ) -> dict[tuple[str, str], AlgorithmResult]:
        hashes = {c.algorithm.name: c.impl_hash for c in allowed}
        with self.store.session() as session:
            rows = queries.load_measurements(
                session=session, fingerprint=identity.fingerprint, key=problem.key(),
                impl_hashes=hashes,
            )
        wanted = {c.key for c in allowed}
        out = {}
        for row in rows:
            if (row.algorithm, row.config) in wanted:  # re-validated: still a current config
                out[(row.algorithm, row.config)] = _from_row(row, identity, R.MEASURED_HERE)
        return out

    def _save(
        self, problem: ConvProblem, identity: DeviceIdentity, rows: list[MeasurementRow]
    ) -> None:
        for attempt in range(3):
            try:
                with self.store.session() as session:
                    queries.save_measurements(
                        session=session, fingerprint=identity.fingerprint,
                        device_info=identity.info, key=problem.key(), rows=rows,
                    )
                return
            except (IntegrityError, OperationalError):
                # Another process inserted the same device/problem/row first: read it
                # back on the next try and replace it.
                if attempt == 2:
                    raise

    # --- measuring ------------------------------------------------------------------------
    def _measure(
        self, problem: ConvProblem, identity: DeviceIdentity, candidates: list[Candidate]
    ) -> list[AlgorithmResult]:
        if not candidates:
            return []
        runtime = get_runtime(identity.device)
        x = runtime.random(problem.input_shape, problem.dtype, self._rng)
        w = runtime.random(problem.filter_shape, problem.dtype, self._rng)
        y = runtime.empty(problem.output_shape, problem.dtype)
        ref = reference_conv(runtime.to_numpy(x), runtime.to_numpy(w), problem)
        rows = [self._measure_one(runtime, problem, cand, x, w, y, ref) for cand in candidates]
        self._save(problem, identity, rows)
        return [_from_row(row, identity, R.FRESH) for row in rows]

    def _measure_one(
        self,
        runtime: Runtime,
        problem: ConvProblem,
        cand: Candidate,
        x: Any,
        w: Any,
        y: Any,
        ref: np.ndarray,
    ) -> MeasurementRow:
        algorithm, config = cand.algorithm, cand.config
        row: dict[str, Any] = {
            "algorithm": algorithm.name, "config": config, "impl_hash": cand.impl_hash,
            "time_ms": None, "spread_ms": None, "min_ms": None, "reps": 0,
            "workspace_bytes": cand.workspace_bytes, "max_error": None, "rel_error": None,
            "error": None, "measured_at": queries.utcnow(), "tuner_version": TUNER_VERSION,
        }
        try:
            workspace = runtime.workspace(cand.workspace_bytes)
            if workspace is not None:
                workspace.fill(0xFF)  # reads of unwritten workspace show up as NaN
            y.fill(np.nan)  # unwritten outputs show up as NaN
            algorithm.run(x, w, y, workspace, problem, config)
            runtime.synchronize()
            out = runtime.to_numpy(y)
            rel = relative_error(out, ref)
            row["max_error"] = max_abs_error(out, ref)
            row["rel_error"] = rel
            limit = tolerance(problem.dtype, algorithm.name)
            if not np.isfinite(rel) or rel > limit:
                row["status"] = R.WRONG_RESULT
                row["error"] = f"relative error {rel:.3g} exceeds {limit:g}"
                return MeasurementRow(**row)

            def run() -> None:
                algorithm.run(x, w, y, workspace, problem, config)

            timing = runtime.time(run, self.policy)
            row.update(
                status=R.OK, time_ms=timing.median_ms, spread_ms=timing.spread_ms,
                min_ms=timing.min_ms, reps=len(timing.times_ms),
            )
        except Exception as exc:
            row["status"] = R.FAILED
            last = traceback.extract_tb(exc.__traceback__)[-1:]
            where = f" at {last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno}" if last else ""
            row["error"] = f"{type(exc).__name__}: {exc}{where}"[:2000]
        return MeasurementRow(**row)


def _from_row(row: MeasurementRow, identity: DeviceIdentity, source: str) -> AlgorithmResult:
    return AlgorithmResult(
        algorithm=row.algorithm, config=row.config, status=row.status, time_ms=row.time_ms,
        workspace_bytes=row.workspace_bytes, max_error=row.max_error, rel_error=row.rel_error,
        spread_ms=row.spread_ms, reps=row.reps, error=row.error, source=source,
        device=identity.fingerprint, measured_at=row.measured_at.isoformat(),
    )


def _more_telling(new: AlgorithmResult, current: AlgorithmResult) -> bool:
    """Whether `new` represents its algorithm better than `current` does.

    Usable beats unusable, faster beats slower; among unusable ones a measured failure
    says more than "over the limit", and the smallest over-limit workspace says the most.
    """
    if current.usable or (not new.usable and current.status in (R.FAILED, R.WRONG_RESULT)):
        return False
    if new.usable:
        return True
    if new.status in (R.FAILED, R.WRONG_RESULT):
        return True
    return new.workspace_bytes < current.workspace_bytes
