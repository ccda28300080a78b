"""The tuner: look up what is stored, measure what is missing, verify, store, choose.

Collaborators, each in its own module: `candidates` (what may run), `claims` (one tuner
per device and problem at a time), `measuring` (verify and time, the runtime passed in),
`lookup` (stand-ins across hardware and problems) and the store (`db`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import numpy as np

from algorithms.base import Algorithm
from algorithms.problem import ConvProblem
from algorithms.registry import algorithms_for
from algorithms.runtime import Runtime, TimingPolicy
from db import find as store_find
from db.engine import Store
from db.rows import MeasurementRow, canonical_json
from tuner import results as R
from tuner.candidates import (
    Candidate,
    enumerate_candidates,
    validate_workspace_limit,
    within_limit,
)
from tuner.claims import Claimer, ClaimPolicy, new_owner
from tuner.devices import DeviceIdentity, backend_of, get_runtime, identify
from tuner.env import env_number, timing_policy
from tuner.errors import DeviceFault, NotInDatabase
from tuner.key_locks import KeyLocks
from tuner.lookup import fallback_order
from tuner.measuring import Measurer, out_of_memory
from tuner.modes import FAST_K, check_mode
from tuner.predicting import not_measured, predict, second_round, top_candidates
from tuner.results import AlgorithmResult, best_of, per_algorithm, rank

Stored = dict[tuple[str, str], AlgorithmResult]


# One lock per (device, problem) in this process: two threads (two HTTP requests, say)
# asking for the same problem never measure it at the same time; the second reads the
# first one's results from the store.
_lock_for = KeyLocks()
# A forked child has only the thread that forked: a lock another thread held at the fork
# would stay held in it for good (a review of the session's changes, 2026-11-30).
os.register_at_fork(after_in_child=_lock_for.reset)


class Tuner:
    """Benchmarks the candidates of a problem on a device and keeps every measurement.

    Several tuners (threads, processes, hosts) may share one store; see tuner.claims.
    `identify` maps a device string to its DeviceIdentity and `runtime` to its Runtime
    (tests inject fakes). `on_store` is called with (fingerprint, problem, generation) after
    this tuner stored measurements of that problem, generation being the store's write
    generation that write produced (db.find.lock_for_write; the answer cache listens).
    """

    def __init__(
        self,
        store: Store,
        *,
        policy: TimingPolicy | None = None,
        algorithms: Iterable[Algorithm] | None = None,
        seed: int | None = None,
        identify: Callable[[str], DeviceIdentity] = identify,
        runtime: Callable[[str], Runtime] = get_runtime,
        claim_ttl_s: float | None = None,
        claim_wait_s: float | None = None,
        on_store: Callable[[str, ConvProblem, int | None], None] | None = None,
        fast_k: int | None = None,
    ) -> None:
        self.store = store
        self._policy = policy
        self._algorithms = list(algorithms) if algorithms is not None else None
        self._rng = np.random.default_rng(seed)
        #: Device string -> DeviceIdentity (its fingerprint keys every stored row).
        self.identify = identify
        self._runtime = runtime
        self._on_store = on_store
        self._claim_s = (claim_ttl_s, claim_wait_s)
        if fast_k is not None and (isinstance(fast_k, bool) or not isinstance(fast_k, int)
                                   or fast_k < 1):
            raise ValueError(f"fast_k must be a positive int, got {fast_k!r}")
        self._fast_k = fast_k
        self._owner = (os.getpid(), new_owner())

    @property
    def owner(self) -> str:
        """Who holds this tuner's claims (tuner.claims.new_owner), unique across a fleet:
        made again in a forked child. Inherited, every child of a process that had tuned
        took its siblings' live claims as its own leftovers and all measured the same
        problem at once (a review of concurrency, 2026-11-30)."""
        pid, owner = self._owner
        if pid != os.getpid():
            self._owner = (os.getpid(), owner := new_owner())
        return owner

    # The environment is read per tuning, not per answer: a long-lived tuner (the service's)
    # honours a changed $CONVTUNE_* setting, and a cached answer pays nothing for it.
    @property
    def policy(self) -> TimingPolicy:
        """How candidates are timed: the one given, else from the environment."""
        return self._policy or timing_policy()

    @property
    def fast_k(self) -> int:
        """How many candidates a fast find measures: the value given, else $CONVTUNE_FAST_K."""
        return self._fast_k or env_number("CONVTUNE_FAST_K", FAST_K, int, positive=True)

    @property
    def claims(self) -> ClaimPolicy:
        """How long claims last and are waited for: the values given, else the environment."""
        return ClaimPolicy.from_env(*self._claim_s)

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
        found, unsupported = enumerate_candidates(
            tuple(self.algorithms(backend)), problem, backend
        )
        return list(found), list(unsupported)

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
        mode = check_mode(mode)
        workspace_limit = validate_workspace_limit(workspace_limit)
        identity = self.identify(device)
        candidates, results = self.candidates(problem, backend_of(device))
        allowed, over = within_limit(candidates, workspace_limit)
        results += over
        if mode == "tune":
            with _lock_for((identity.fingerprint, problem)):
                _, remeasured = self._measure_claimed(problem, identity, allowed, force=True)
            return rank(results + remeasured)
        if mode in ("fast", "heuristic"):
            return rank(results + self._by_model(problem, identity, allowed, mode))

        stored = self._load(problem, identity, allowed)
        missing = [c for c in allowed if c.key not in stored]
        if missing and mode == "cached":
            borrowed = self._fallback(problem, identity, allowed)
            if borrowed is not None:
                if any(r.source == R.PREDICTED for r in borrowed):
                    # A prediction stands in only for what this device has not measured, as
                    # in heuristic mode: it answered over this device's own rows (a review
                    # of the tuner, 2026-11-30). Another device's rows are never mixed in.
                    borrowed = [stored.get((r.algorithm, r.config), r) for r in borrowed]
                return rank(results + borrowed)
            names = sorted({f"{c.algorithm.name}/{c.config}" for c in missing})
            raise NotInDatabase(
                f"{problem.describe()} on {identity.info.get('name', device)} has not been "
                f"measured for {', '.join(names)} (nor on a device of the same model or "
                "architecture)"
            )
        fresh: list[AlgorithmResult] = []
        if missing:
            with _lock_for((identity.fingerprint, problem)):
                # Another thread or process may have measured them while we waited.
                stored, fresh = self._measure_claimed(problem, identity, allowed, force=False)
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
        mode="exhaustive" is "auto" (cuDNN's and MIOpen's name for it).
        mode="fast" answers from the store when it covers every candidate, else measures
        the `fast_k` candidates the prediction (tuner.predicting: the cost model, else the
        nearest measured problem) ranks fastest, the fastest-ranked of each of its
        `fast_k` fastest families (an algorithm in one operand layout) and of every other
        family of the algorithms so chosen, and any it cannot rank; then, in a second round
        with the bests of the families that came within RUNNER_UP of the winner (the
        winner's included), each such family's configurations predicted within FAMILY_BAND
        of its fastest that no round measured yet (tuner.predicting.round_two); the others come
        back unmeasured (source "not measured", time null, the prediction in the note).
        With nothing to predict from it measures every candidate.
        mode="heuristic" never measures: this device's stored results, the rest predicted
        (source "predicted", the note naming the predictor, a model's `confidence`);
        NotInDatabase when nothing predicts.
        """
        return per_algorithm(self.find_candidates(problem, device, workspace_limit, mode=mode))

    def best(
        self,
        problem: ConvProblem,
        device: str,
        workspace_limit: int | None = None,
        *,
        mode: str = "auto",
    ) -> AlgorithmResult:
        """The fastest usable result; NoUsableAlgorithm when there is none."""
        return best_of(
            self.find_candidates(problem, device, workspace_limit, mode=mode),
            problem, device, workspace_limit,
        )

    # --- measuring under a claim ----------------------------------------------------------------
    def _measure_claimed(
        self, problem: ConvProblem, identity: DeviceIdentity, allowed: list[Candidate],
        *, force: bool,
    ) -> tuple[Stored, list[AlgorithmResult]]:
        """Claim (device, problem) in the store, measure what is missing (all if `force`).

        Returns (stored, fresh). While another tuner holds the claim and `force` is off,
        its results are awaited and returned instead of measuring.
        """

        def work() -> tuple[Stored, list[AlgorithmResult]]:
            stored = {} if force else self._load(problem, identity, allowed)
            todo = [c for c in allowed if c.key not in stored]
            return stored, self._measure(problem, identity, todo)

        def ready() -> tuple[Stored, list[AlgorithmResult]] | None:
            if force:
                return None
            stored = self._load(problem, identity, allowed)
            return (stored, []) if all(c.key in stored for c in allowed) else None

        claimer = Claimer(self.store, self.claims, self.owner)
        what = f"{problem.describe()} on {identity.info.get('name', identity.device)}"
        return claimer.run(
            identity.fingerprint, canonical_json(problem.key()), what, work, ready
        )

    def _measure(
        self, problem: ConvProblem, identity: DeviceIdentity, candidates: list[Candidate]
    ) -> list[AlgorithmResult]:
        if not candidates:
            return []
        measurer = Measurer(self._runtime(identity.device), self.policy, self._rng)
        measured = measurer.measure(problem, candidates)
        # Keep what was measured, a culprit's failure included, so that the next process
        # skips it; nothing is stored for candidates never run or not fully timed, nor for
        # a failure for want of memory, which the next find measures again.
        culprit_row = measured.rows[-1] if measured.fault is not None else None
        self._save(problem, identity, [r for r in measured.rows
                                       if r is culprit_row or not out_of_memory(r)])
        if measured.fault is not None:
            culprit = measured.rows[-1]
            left = len(candidates) - len(measured.rows)
            raise DeviceFault(
                f"{identity.device} can run no more work after "
                f"{culprit.algorithm}/{culprit.config} failed ({culprit.error}); "
                f"the device reports {measured.fault}. {left} candidate(s) were not "
                "measured; a new process will measure them and skip the stored failure"
            )
        return [from_row(row, identity.fingerprint, R.FRESH) for row in measured.rows]

    # --- lookups across devices and problems ------------------------------------------------
    def _fallback(
        self, problem: ConvProblem, identity: DeviceIdentity, allowed: list[Candidate]
    ) -> list[AlgorithmResult] | None:
        """Every allowed candidate as measured by the best stand-in device, or None."""
        info = identity.info
        with self.store.session() as session:
            others = store_find.load_fleet_measurements(
                session=session, kind=str(info.get("kind", "")), name=str(info.get("name", "")),
                arch=str(info.get("arch", "")), exclude_fingerprint=identity.fingerprint,
                key=problem.key(), impl_hashes=_hashes(allowed),
            )
        hashes = {c.key: c.impl_hash for c in allowed}
        for source, device, rows in fallback_order(info, others):
            found = {
                (r.algorithm, r.config): r for r in rows
                if hashes.get((r.algorithm, r.config)) == r.impl_hash
            }
            if len(found) == len(allowed):
                return [from_row(row, device["fingerprint"], source) for row in found.values()]
        return predict(self.store, problem, identity, allowed)

    # --- fast and heuristic finds: a prediction decides what to measure, if anything ------
    def _by_model(
        self, problem: ConvProblem, identity: DeviceIdentity, allowed: list[Candidate],
        mode: str,
    ) -> list[AlgorithmResult]:
        """What this device stored, the rest measured (fast: tuner.predicting.fast_picks
        only; every candidate while nothing predicts) or predicted (heuristic)."""
        known = self._load(problem, identity, allowed)
        if all(c.key in known for c in allowed):
            return list(known.values())
        predicted = predict(self.store, problem, identity, allowed)
        if mode == "heuristic":
            if predicted is None:
                raise NotInDatabase(
                    f"nothing to predict {problem.describe()} on "
                    f"{identity.info.get('name', identity.device)} from: no model that knows "
                    "these algorithms, and no problem of the same kind measured with them on "
                    "this device"
                )
            return [known.get((p.algorithm, p.config), p) for p in predicted]
        chosen = allowed if predicted is None else top_candidates(predicted, allowed, self.fast_k)
        if any(c.key not in known for c in chosen):
            with _lock_for((identity.fingerprint, problem)):
                stored, fresh = self._measure_claimed(problem, identity, chosen, force=False)
            known.update(stored)
            known.update({(r.algorithm, r.config): r for r in fresh})
        again = [] if predicted is None else second_round(predicted, known, allowed)
        if again:
            with _lock_for((identity.fingerprint, problem)):
                _, fresh = self._measure_claimed(problem, identity, again, force=True)
            known.update({(r.algorithm, r.config): r for r in fresh})
        guesses = {(p.algorithm, p.config): p for p in predicted or ()}
        return [known.get(c.key) or not_measured(guesses[c.key]) for c in allowed]

    # --- store ------------------------------------------------------------------------------------
    def _load(
        self, problem: ConvProblem, identity: DeviceIdentity, allowed: list[Candidate]
    ) -> Stored:
        with self.store.session() as session:
            rows = store_find.load_measurements(
                session=session, fingerprint=identity.fingerprint, key=problem.key(),
                impl_hashes=_hashes(allowed),
            )
        wanted = {c.key for c in allowed}
        return {
            (row.algorithm, row.config): from_row(row, identity.fingerprint, R.MEASURED_HERE)
            for row in rows
            if (row.algorithm, row.config) in wanted  # re-validated: still a current config
        }

    def _save(
        self, problem: ConvProblem, identity: DeviceIdentity, rows: list[MeasurementRow]
    ) -> None:
        if not rows:
            return
        produced = self.store.write(lambda session: store_find.save_measurements(
            session=session, fingerprint=identity.fingerprint, device_info=identity.info,
            key=problem.key(), rows=rows,
        ))
        if self._on_store is not None:
            # The generation, read in the write's own transaction, tells the answer cache
            # exactly which bump was ours, even if it read the counter in the meantime.
            self._on_store(identity.fingerprint, problem, produced)


def _hashes(candidates: list[Candidate]) -> dict[str, str]:
    return {c.algorithm.name: c.impl_hash for c in candidates}


def from_row(row: MeasurementRow, fingerprint: str, source: str) -> AlgorithmResult:
    """A stored row as an AlgorithmResult from `source`."""
    return AlgorithmResult(
        algorithm=row.algorithm, config=row.config, status=row.status, time_ms=row.time_ms,
        workspace_bytes=row.workspace_bytes, max_error=row.max_error, rel_error=row.rel_error,
        spread_ms=row.spread_ms, reps=row.reps, error=row.error, source=source,
        device=fingerprint, measured_at=row.measured_at.isoformat(),
    )
