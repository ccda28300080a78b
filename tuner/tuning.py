"""The tuner: look up what is stored, measure what is missing, verify, store, choose."""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from sqlalchemy.exc import IntegrityError, OperationalError

from algorithms.base import Algorithm
from algorithms.problem import ConvProblem
from algorithms.reference import max_abs_error, reference_conv, relative_error, tolerance
from algorithms.registry import algorithms_for
from db import claims, queries
from db.engine import Store
from db.queries import MeasurementRow
from tuner import results as R
from tuner.devices import DeviceIdentity, backend_of, get_runtime, identify, implementation_hash
from tuner.lookup import fallback_order, flops_ratio, nearest_problems, same_kind
from tuner.results import AlgorithmResult, rank
from tuner.runtime import Runtime, TimingPolicy

TUNER_VERSION = "0.1.0"

#: The find modes: answer from the store only, measure everything now, or store-then-measure.
MODES = ("cached", "tune", "auto")

#: How long a claim on a (device, problem) lasts unless renewed ($CONVTUNE_CLAIM_TTL_S).
CLAIM_TTL_S = 60.0
#: How long a tuner waits for another one's claim before giving up ($CONVTUNE_CLAIM_WAIT_S).
CLAIM_WAIT_S = 900.0

log = logging.getLogger(__name__)


class NoUsableAlgorithm(LookupError):
    """No candidate is usable for this problem on this device under this workspace limit."""


class NotInDatabase(LookupError):
    """mode="cached" and the store has not measured every candidate of this problem."""


class ClaimTimeout(LookupError):
    """Another tuner held its claim on this (device, problem) for longer than we may wait."""


class DeviceFault(RuntimeError):
    """A candidate left the device unable to run anything more in this process."""


def _seconds(name: str, default: float) -> float:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"${name} must be a number of seconds, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"${name} must be positive, got {text!r}")
    return value


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
    """Benchmarks the candidates of a problem on a device and keeps every measurement.

    Several tuners (threads, processes, hosts) may share one store: before measuring a
    (device, problem) a tuner claims it in the store's `claims` table, renews the claim
    every `claim_ttl_s / 3` seconds while it measures, and deletes it when the results are
    stored. Another tuner that finds the claim taken waits (polling with backoff, for at
    most `claim_wait_s` seconds, then ClaimTimeout) and answers from the stored results
    instead of measuring; a claim that expired (its tuner crashed) is taken over.
    `identify` maps a device string to its DeviceIdentity (tests inject fake devices).
    """

    def __init__(
        self,
        store: Store,
        *,
        policy: TimingPolicy | None = None,
        algorithms: Iterable[Algorithm] | None = None,
        seed: int | None = None,
        identify: Callable[[str], DeviceIdentity] = identify,
        claim_ttl_s: float | None = None,
        claim_wait_s: float | None = None,
    ) -> None:
        self.store = store
        self.policy = policy or TimingPolicy.from_env()
        self._algorithms = list(algorithms) if algorithms is not None else None
        self._rng = np.random.default_rng(seed)
        self._identify = identify
        self.claim_ttl_s = claim_ttl_s or _seconds("CONVTUNE_CLAIM_TTL_S", CLAIM_TTL_S)
        self.claim_wait_s = claim_wait_s or _seconds("CONVTUNE_CLAIM_WAIT_S", CLAIM_WAIT_S)
        #: Who holds this tuner's claims: host:pid:uuid, unique across a fleet.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"

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
        candidates, unsupported = _enumerate(tuple(self.algorithms(backend)), problem, backend)
        return list(candidates), list(unsupported)

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
        identity = self._identify(device)
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
                _, fresh = self._measure_claimed(problem, identity, allowed, force=True)
            return rank(results + fresh)

        stored = self._load(problem, identity, allowed)
        missing = [c for c in allowed if c.key not in stored]
        if missing and mode == "cached":
            borrowed = self._fallback(problem, identity, allowed)
            if borrowed is not None:
                return rank(results + borrowed)
            names = sorted({f"{c.algorithm.name}/{c.config}" for c in missing})
            raise NotInDatabase(
                f"{problem.describe()} on {identity.info.get('name', device)} has not been "
                f"measured for {', '.join(names)} (nor on a device of the same model or "
                "architecture)"
            )
        if missing:
            with _lock_for((identity.fingerprint, problem)):
                # Another thread or process may have measured them while we waited.
                stored, fresh = self._measure_claimed(problem, identity, allowed, force=False)
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
        """One result per algorithm (its best configuration), fastest usable first.

        mode="auto" answers from this exact device's stored measurements and measures (then
        stores) what is missing here; it never borrows other devices' results.
        mode="cached" never measures: it answers from this device's measurements when they
        cover every candidate, else from the best stand-in device (tuner.lookup: the same
        model with other software, then the same architecture with the nearest unit count),
        with `source` saying which ("same model", "same architecture") and `device` naming
        the stand-in's fingerprint, else "predicted" from this device's nearest measured
        problem of the same kind (times scaled by FLOPs, `note` naming that problem), and
        raises NotInDatabase when none of these exists.
        mode="tune" measures every candidate again.
        """
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

    # --- claims and lookups across devices ----------------------------------------------------
    def _measure_claimed(
        self, problem: ConvProblem, identity: DeviceIdentity, allowed: list[Candidate],
        *, force: bool,
    ) -> tuple[dict[tuple[str, str], AlgorithmResult], list[AlgorithmResult]]:
        """Claim (device, problem) in the store, measure what is missing (all if `force`).

        Returns (stored, fresh). While another tuner holds the claim we poll with backoff:
        once its results are stored (and `force` is off) we return them, measuring nothing.
        """
        target = queries.canonical_json(problem.key())
        deadline = time.monotonic() + self.claim_wait_s
        delay = 0.02
        while True:
            if self._claim(identity, target):
                try:
                    stored = {} if force else self._load(problem, identity, allowed)
                    todo = [c for c in allowed if c.key not in stored]
                    with self._renewing(identity, target):
                        fresh = self._measure(problem, identity, todo)
                finally:
                    self._release(identity, target)
                return stored, fresh
            if not force:
                stored = self._load(problem, identity, allowed)
                if all(c.key in stored for c in allowed):
                    return stored, []
            if time.monotonic() >= deadline:
                with self.store.session() as session:
                    holder = claims.claim_holder(
                        session=session, fingerprint=identity.fingerprint, problem=target
                    )
                who = holder["owner"] if holder else "another tuner"
                raise ClaimTimeout(
                    f"{problem.describe()} on {identity.info.get('name', identity.device)} is "
                    f"being measured by {who}; gave up after {self.claim_wait_s:g} s "
                    "(raise $CONVTUNE_CLAIM_WAIT_S to wait longer)"
                )
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 1.5, 1.0, self.claim_ttl_s / 4)

    def _claim(self, identity: DeviceIdentity, target: str) -> bool:
        with self.store.session() as session:
            return claims.try_claim(
                session=session, fingerprint=identity.fingerprint, problem=target,
                owner=self.owner, ttl_s=self.claim_ttl_s,
            )

    def _release(self, identity: DeviceIdentity, target: str) -> None:
        with self.store.session() as session:
            claims.release_claim(
                session=session, fingerprint=identity.fingerprint, problem=target,
                owner=self.owner,
            )

    @contextmanager
    def _renewing(self, identity: DeviceIdentity, target: str) -> Iterator[None]:
        """Renew our claim every ttl/3 seconds in a background thread while measuring."""
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(self.claim_ttl_s / 3):
                try:
                    with self.store.session() as session:
                        ours = claims.renew_claim(
                            session=session, fingerprint=identity.fingerprint,
                            problem=target, owner=self.owner, ttl_s=self.claim_ttl_s,
                        )
                    if not ours:
                        log.warning("claim on %s was taken over while measuring", target)
                except Exception:  # a missed renewal only risks duplicate work
                    log.warning("could not renew the claim on %s", target, exc_info=True)

        thread = threading.Thread(target=renew, name="convtune-claim", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _fallback(
        self, problem: ConvProblem, identity: DeviceIdentity, allowed: list[Candidate]
    ) -> list[AlgorithmResult] | None:
        """Every allowed candidate as measured by the best stand-in device, or None."""
        info = identity.info
        with self.store.session() as session:
            others = queries.load_fleet_measurements(
                session=session, kind=str(info.get("kind", "")), name=str(info.get("name", "")),
                arch=str(info.get("arch", "")), exclude_fingerprint=identity.fingerprint,
                key=problem.key(), impl_hashes={c.algorithm.name: c.impl_hash for c in allowed},
            )
        hashes = {c.key: c.impl_hash for c in allowed}
        for source, device, rows in fallback_order(info, others):
            found = {
                (r.algorithm, r.config): r for r in rows
                if hashes.get((r.algorithm, r.config)) == r.impl_hash
            }
            if len(found) == len(allowed):
                return [
                    _from_row(row, device["fingerprint"], source) for row in found.values()
                ]
        return self._predict(problem, identity, allowed)

    def _predict(
        self, problem: ConvProblem, identity: DeviceIdentity, allowed: list[Candidate]
    ) -> list[AlgorithmResult] | None:
        """Every allowed candidate scaled from this device's nearest measured problem."""
        if not allowed:
            return None
        with self.store.session() as session:
            measured = queries.load_similar_measurements(
                session=session, fingerprint=identity.fingerprint, like=same_kind(problem),
                impl_hashes={c.algorithm.name: c.impl_hash for c in allowed},
            )
        for other, rows in nearest_problems(problem, measured):
            found = {(r.algorithm, r.config): r for r in rows}
            if any(c.key not in found for c in allowed):
                continue
            scale = flops_ratio(problem, other)
            near = ConvProblem.from_key(dict(other)).describe()
            out = []
            for cand in allowed:
                row = found[cand.key]
                result = _from_row(row, identity.fingerprint, R.PREDICTED)
                out.append(replace(
                    result, workspace_bytes=cand.workspace_bytes, reps=0, max_error=None,
                    rel_error=None, spread_ms=None,
                    time_ms=None if row.time_ms is None else row.time_ms * scale,
                    note=f"predicted from {near} (x{scale:.3g} the FLOPs)",
                ))
            return out
        return None

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
                out[(row.algorithm, row.config)] = _from_row(
                    row, identity.fingerprint, R.MEASURED_HERE
                )
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
        rows: list[MeasurementRow] = []
        with runtime.activate():  # run() enqueues on the current device's stream
            for cand in candidates:
                rows.append(self._measure_one(runtime, problem, cand, x, w, y, ref))
                fault = runtime.fault() if rows[-1].status == R.FAILED else None
                if fault is not None:
                    # Keep what was measured, the culprit's failure included, so that the
                    # next process skips it; store nothing for candidates never run.
                    self._save(problem, identity, rows)
                    left = len(candidates) - len(rows)
                    raise DeviceFault(
                        f"{identity.device} can run no more work after "
                        f"{cand.algorithm.name}/{cand.config} failed ({rows[-1].error}); "
                        f"the device reports {fault}. {left} candidate(s) were not measured; "
                        "a new process will measure them and skip the stored failure"
                    )
        self._save(problem, identity, rows)
        return [_from_row(row, identity.fingerprint, R.FRESH) for row in rows]

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


# Algorithms are stateless, so a problem's candidates never change for one set of them; a
# cached find would otherwise spend a fifth of its time enumerating configs and workspaces.
@functools.lru_cache(maxsize=4096)
def _enumerate(
    algorithms: tuple[Algorithm, ...], problem: ConvProblem, backend: str
) -> tuple[tuple[Candidate, ...], tuple[AlgorithmResult, ...]]:
    candidates: list[Candidate] = []
    unsupported: list[AlgorithmResult] = []
    for algorithm in algorithms:
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
    return tuple(candidates), tuple(unsupported)


def _from_row(row: MeasurementRow, fingerprint: str, source: str) -> AlgorithmResult:
    return AlgorithmResult(
        algorithm=row.algorithm, config=row.config, status=row.status, time_ms=row.time_ms,
        workspace_bytes=row.workspace_bytes, max_error=row.max_error, rel_error=row.rel_error,
        spread_ms=row.spread_ms, reps=row.reps, error=row.error, source=source,
        device=fingerprint, measured_at=row.measured_at.isoformat(),
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
