"""Background tuning jobs: a bounded queue in front of a small worker pool.

Each job's snapshot is written to the store on every change (Service.save_job) and polls
read it from there, so that with `serve --workers N` any worker process answers for a job
another one runs; the in-memory jobs are only this process's unfinished ones.

A worker process can die without a word (SIGKILL, OOM), so while it holds unfinished jobs
it rewrites their rows every $CONVTUNE_JOB_HEARTBEAT_S seconds, and each row says how long
it may go unwritten ($CONVTUNE_JOB_STALE_S) before a reader takes its worker for gone and
reports the job failed (db.jobs). The heartbeat is a tuner.quiet chore: it never runs while
a candidate is timed, and a long problem's tuning still leaves it room between rounds.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from algorithms.problem import ConvProblem
from api.metrics import Metrics
from tuner.env import env_number
from tuner.quiet import periodic
from tuner.results import AlgorithmResult
from tuner.service import JOB_FINISHED, JOB_STALE_AFTER_KEY, Service, service

log = logging.getLogger("convtune.api")

#: Seconds between rewrites of the stored rows of this process's unfinished jobs
#: ($CONVTUNE_JOB_HEARTBEAT_S).
JOB_HEARTBEAT_S = 10.0
#: Seconds a stored unfinished job may go unwritten before readers report its worker gone
#: ($CONVTUNE_JOB_STALE_S). Well above the heartbeat: a beat may wait for a timed round to
#: end and for a busy store (SQLite waits up to a minute for another writer's lock).
JOB_STALE_S = 120.0
#: The key of a stored snapshot that carries the stale bound, and the states after which a
#: job no longer changes (db.jobs, through the tuner: the API does not import db).
STALE_AFTER_KEY, FINISHED = JOB_STALE_AFTER_KEY, JOB_FINISHED


class JobQueueFull(RuntimeError):
    """As many jobs as allowed are already queued or running."""


class JobsStopped(RuntimeError):
    """The server is shutting down and takes no new jobs."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


@dataclass
class JobItem:
    """One problem of a job."""

    problem: ConvProblem
    layer: str | None = None
    batch: int | None = None
    state: str = "pending"
    best: dict[str, Any] | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly fields."""
        return {
            "problem": self.problem.key(), "describe": self.problem.describe(),
            "layer": self.layer, "batch": self.batch, "state": self.state,
            "best": self.best, "error": self.error,
        }


@dataclass
class Job:
    """A list of problems tuned one after another on one device."""

    id: str
    device: str
    workspace_limit: int | None
    items: list[JobItem]
    state: str = "queued"
    created_at: str = field(default_factory=_now)
    started_at: str | None = None
    finished_at: str | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly snapshot."""
        done = sum(item.state != "pending" for item in self.items)
        return {
            "id": self.id, "state": self.state, "device": self.device,
            "progress": {"done": done, "total": len(self.items)},
            "created_at": self.created_at, "started_at": self.started_at,
            "finished_at": self.finished_at, "error": self.error,
            "results": [item.as_dict() for item in self.items],
        }


class JobManager:
    """Runs jobs on `workers` threads; refuses a job when `max_jobs` of this process are
    unfinished. Jobs are kept in the store, so any worker process answers `get`.

    Two jobs (or a job and a request) for the same problem and device never measure it at
    the same time: the tuner's per-(device, problem) lock serialises them, and the second
    reads the first one's results from the database.
    """

    def __init__(
        self, *, db_url: str, metrics: Metrics, workers: int, max_jobs: int, kept: int,
        find: Callable[..., list[AlgorithmResult]] | None = None,
        heartbeat_s: float | None = None, stale_s: float | None = None,
    ) -> None:
        # The find is a parameter so that tests can slow it down or make it fail. The store
        # is opened on the first job, so that a broken database fails requests (with a 503
        # that says why), not the server's start.
        self._db_url = db_url
        self._given_find = find
        self._metrics = metrics
        self._max_jobs = max_jobs
        self._kept = kept
        self._heartbeat_s = heartbeat_s or env_number(
            "CONVTUNE_JOB_HEARTBEAT_S", JOB_HEARTBEAT_S, float, positive=True)
        self._stale_s = stale_s or env_number(
            "CONVTUNE_JOB_STALE_S", max(JOB_STALE_S, 6 * self._heartbeat_s), float,
            positive=True)
        if self._stale_s < 3 * self._heartbeat_s:  # a live worker's job would look dead
            raise ValueError(
                f"$CONVTUNE_JOB_STALE_S ({self._stale_s:g}) must be at least 3 x "
                f"$CONVTUNE_JOB_HEARTBEAT_S ({self._heartbeat_s:g})"
            )
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="convtune-job")
        self._jobs: dict[str, Job] = {}  # this process's unfinished jobs
        # Finished jobs whose last write failed: the heartbeat writes them again, so a
        # passing store error does not leave them "running" for readers to call orphans.
        self._unsaved: dict[str, Job] = {}
        # Held while a job changes and is written, so the store sees the changes in order.
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._heartbeat: ExitStack | None = None  # started with the first job

    def _service(self) -> Service:
        return service(self._db_url)

    def _finder(self) -> Callable[..., list[AlgorithmResult]]:
        return self._given_find or self._service().find

    def _save(self, job: Job) -> bool:
        """Write `job` to the store (the caller holds the lock); forget it once finished.
        False where the stored job had finished already (a reader reported it failed)."""
        finished = job.state in FINISHED
        if finished:
            self._jobs.pop(job.id, None)  # even if the write fails: it no longer counts
        # The row carries our stale bound, so every reader judges it as we promise.
        snapshot = {**job.as_dict(), STALE_AFTER_KEY: self._stale_s}
        try:
            written = self._service().save_job(job.id, snapshot, kept=self._kept)
        except Exception:
            if finished:
                self._unsaved[job.id] = job
            raise
        self._unsaved.pop(job.id, None)
        return written

    def _save_quietly(self, job: Job) -> None:
        # In a job thread nobody awaits the error: log it; the poll shows the last state.
        try:
            self._save(job)
        except Exception:
            log.exception("could not store the state of job %s", job.id)

    def submit(
        self, items: list[JobItem], device: str, workspace_limit: int | None
    ) -> dict[str, Any]:
        """Queue a job; JobQueueFull when too many are unfinished."""
        job = Job(uuid.uuid4().hex, device, workspace_limit, items)
        with self._lock:
            if self._stopping.is_set():
                raise JobsStopped("the server is shutting down; submit the job again later")
            if len(self._jobs) >= self._max_jobs:
                raise JobQueueFull(
                    f"{len(self._jobs)} jobs are queued or running (the limit); try again later"
                )
            self._save(job)  # stored before it runs: a poll never misses a queued job
            self._jobs[job.id] = job
            snapshot = job.as_dict()
            if self._heartbeat is None:
                self._heartbeat = ExitStack()
                self._heartbeat.enter_context(
                    periodic(self._beat, self._heartbeat_s, "convtune-job-heartbeat"))
            # Under the lock: shutdown() cannot close the pool between the check and here.
            self._pool.submit(self._run, job)
        return snapshot

    def get(self, job_id: str) -> dict[str, Any] | None:
        """A snapshot of a job run by any worker process, or None when unknown (or long
        finished)."""
        return self._service().job(job_id)

    def shutdown(self) -> None:
        """Stop taking work. Unfinished jobs are stored as failed now, running ones too: the
        process may exit (or be killed at the end of its grace period) before they reach
        their next problem. A running problem may still finish; its measurements are kept."""
        with self._lock:
            self._stopping.set()
            self._pool.shutdown(wait=False, cancel_futures=True)
            for job in list(self._jobs.values()):
                self._end(job, "the server shut down before the job started"
                          if job.state == "queued" else
                          "the server shut down before the job finished")
            for job in list(self._unsaved.values()):
                self._save_quietly(job)  # the last chance to store how it ended
            heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            # Outside the lock: the heartbeat may be waiting for it, and is joined here.
            heartbeat.close()

    def _end(self, job: Job, error: str) -> None:
        """Fail an unfinished job and store it (the caller holds the lock)."""
        job.state, job.finished_at, job.error = "failed", _now(), error
        self._save_quietly(job)
        self._metrics.jobs.labels("failed").inc()

    def _beat(self) -> None:
        """Rewrite the stored row of each job this process holds, so that no reader takes
        it for an orphan; write finished jobs whose last write failed again; let go of jobs
        a reader has already reported failed. Runs as a tuner.quiet chore."""
        with self._lock:
            if not (self._jobs or self._unsaved):
                return
            for job in list(self._unsaved.values()):
                self._save_quietly(job)
            for job in list(self._jobs.values()):
                try:
                    if self._save(job):
                        continue
                    # Refused: read back what the reader stored, for its message.
                    stored = self._service().job(job.id)
                except Exception:  # a missed beat is retried; fn of periodic must not raise
                    log.warning("could not refresh job %s in the store", job.id, exc_info=True)
                    continue
                # Not heard from for longer than we promised (a long pause, a store we
                # could not reach), a reader reported the job failed: its client was
                # told so, and the job stops after its current problem.
                log.warning("job %s was reported failed meanwhile: %s", job.id,
                            stored and stored["error"])
                self._jobs.pop(job.id, None)
                job.state = "failed"
                job.error = stored["error"] if stored else "the job was dropped"
                self._metrics.jobs.labels("failed").inc()

    def _run(self, job: Job) -> None:
        with self._lock:
            if job.state != "queued":  # failed by shutdown() before it began
                return
            job.state, job.started_at = "running", _now()
            self._save_quietly(job)
        failed = 0
        for item in job.items:
            with self._lock:
                # Ended elsewhere: by shutdown(), or reported failed by a reader.
                if job.state != "running":
                    return
            try:
                results = self._finder()(item.problem, job.device, job.workspace_limit, mode="auto")
                self._metrics.record_find(results, origin="job")
                best = results[0].as_dict() if results and results[0].usable else None
                error = None if best else "no usable algorithm"
                state = "done"
            except Exception as exc:  # one bad problem does not stop the job
                best, error, state = None, f"{type(exc).__name__}: {exc}", "failed"
                failed += 1
            with self._lock:
                if job.state != "running":  # ended while this problem ran: that stands
                    return
                item.best, item.error, item.state = best, error, state
                self._save_quietly(job)
        with self._lock:
            if job.state != "running":
                return
            job.finished_at = _now()
            if failed:
                job.state = "failed"
                job.error = f"{failed} of {len(job.items)} problems failed"
            else:
                job.state = "done"
            self._save_quietly(job)
            self._metrics.jobs.labels(job.state).inc()
