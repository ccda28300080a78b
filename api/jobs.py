"""Background tuning jobs: a bounded queue in front of a small worker pool.

Each job's snapshot is written to the store on every change (Service.save_job) and polls
read it from there, so that with `serve --workers N` any worker process answers for a job
another one runs; the in-memory jobs are only this process's unfinished ones.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from algorithms.problem import ConvProblem
from api.metrics import Metrics
from tuner.results import AlgorithmResult
from tuner.service import Service, service

log = logging.getLogger("convtune.api")


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
    ) -> None:
        # The find is a parameter so that tests can slow it down or make it fail. The store
        # is opened on the first job, so that a broken database fails requests (with a 503
        # that says why), not the server's start.
        self._db_url = db_url
        self._given_find = find
        self._metrics = metrics
        self._max_jobs = max_jobs
        self._kept = kept
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="convtune-job")
        self._jobs: dict[str, Job] = {}  # this process's unfinished jobs
        # Held while a job changes and is written, so the store sees the changes in order.
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    def _service(self) -> Service:
        return service(self._db_url)

    def _finder(self) -> Callable[..., list[AlgorithmResult]]:
        return self._given_find or self._service().find

    def _save(self, job: Job) -> None:
        """Write `job` to the store (the caller holds the lock); forget it once finished."""
        if job.state in ("done", "failed"):
            self._jobs.pop(job.id, None)  # even if the write fails: it no longer counts
        self._service().save_job(job.id, job.as_dict(), kept=self._kept)

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
            # Under the lock: shutdown() cannot close the pool between the check and here.
            self._pool.submit(self._run, job)
        return snapshot

    def get(self, job_id: str) -> dict[str, Any] | None:
        """A snapshot of a job run by any worker process, or None when unknown (or long
        finished)."""
        return self._service().job(job_id)

    def shutdown(self) -> None:
        """Stop taking work; running jobs stop after their current problem."""
        with self._lock:
            self._stopping.set()
            self._pool.shutdown(wait=False, cancel_futures=True)
            # Jobs that never started will not: say so instead of "queued" forever.
            for job in list(self._jobs.values()):
                if job.state == "queued":
                    job.state, job.finished_at = "failed", _now()
                    job.error = "the server shut down before the job started"
                    self._save_quietly(job)

    def _run(self, job: Job) -> None:
        with self._lock:
            job.state, job.started_at = "running", _now()
            self._save_quietly(job)
        failed = 0
        for item in job.items:
            if self._stopping.is_set():
                with self._lock:
                    job.state, job.finished_at = "failed", _now()
                    job.error = "the server shut down before the job finished"
                    self._save_quietly(job)
                self._metrics.jobs.labels("failed").inc()
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
                item.best, item.error, item.state = best, error, state
                self._save_quietly(job)
        with self._lock:
            job.finished_at = _now()
            if failed:
                job.state = "failed"
                job.error = f"{failed} of {len(job.items)} problems failed"
            else:
                job.state = "done"
            self._save_quietly(job)
        self._metrics.jobs.labels(job.state).inc()
