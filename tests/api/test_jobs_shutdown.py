"""The job manager at shutdown: no 500 for a late submit, no job left "queued" forever."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from api.jobs import JobItem, JobManager, JobsStopped
from api.metrics import Metrics
from tests.api.conftest import TINY
from tests.tuner.fakes import small_problem


def test_submit_after_shutdown_is_503(make_client: Callable[..., TestClient]) -> None:
    client = make_client()
    client.app.state.jobs.shutdown()  # type: ignore[attr-defined]
    response = client.post("/v1/jobs", json={"problems": [TINY], "device": "cpu"})
    assert response.status_code == 503, response.text
    assert "shutting down" in response.json()["detail"]
    # Mutation gap: the 503 of a server shutting down says when to come back.
    assert response.headers["retry-after"] == "30"


def test_queued_jobs_fail_at_shutdown(db_url: str) -> None:
    started, release = threading.Event(), threading.Event()

    def slow_find(*args: Any, **kwargs: Any) -> list[Any]:
        started.set()
        release.wait(10)
        return []

    manager = JobManager(db_url=db_url, metrics=Metrics(), workers=1, max_jobs=4, kept=8,
                         find=slow_find)
    first = manager.submit([JobItem(small_problem())], "cpu", None)
    assert started.wait(10)
    second = manager.submit([JobItem(small_problem())], "cpu", None)
    manager.shutdown()
    with pytest.raises(JobsStopped):
        manager.submit([JobItem(small_problem())], "cpu", None)
    waiting = manager.get(second["id"])
    assert waiting is not None and waiting["state"] == "failed"
    assert "before the job started" in waiting["error"]
    release.set()
    assert manager.get(first["id"]) is not None


# Mutation gap: a job whose problems fail or find nothing usable was never run to its end:
# it must end failed, saying how many failed, count every problem as done, and report no
# unusable candidate as a problem's best.
def test_a_job_with_a_failing_problem_ends_failed(db_url: str) -> None:
    import time

    from tuner.results import AlgorithmResult

    calls: list[int] = []
    ms = float(np.random.default_rng().uniform(0.5, 9.0))

    def find(*_args: Any, **_kwargs: Any) -> list[Any]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the candidate broke")
        return [AlgorithmResult("fft", "default", "wrong_result", ms, 0, source="fresh")]

    manager = JobManager(db_url=db_url, metrics=Metrics(), workers=1, max_jobs=4, kept=8,
                         find=find)
    job = manager.submit([JobItem(small_problem()), JobItem(small_problem())], "cpu", None)
    deadline = time.monotonic() + 20
    while (got := manager.get(job["id"])) and got["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    manager.shutdown()
    assert got is not None and got["state"] == "failed"
    assert got["error"] == "1 of 2 problems failed"
    assert got["progress"] == {"done": 2, "total": 2}
    broken, unusable = got["results"]
    assert broken["state"] == "failed" and "the candidate broke" in broken["error"]
    assert unusable["state"] == "done" and unusable["best"] is None
    assert unusable["error"] == "no usable algorithm"


# Mutation gap: only JobManager.shutdown() was called by hand; that the app's own lifespan
# calls it when the server stops (so that a queued job is stored failed, not left "queued"
# for a poll to find long after) went unchecked.
def test_the_apps_shutdown_fails_its_queued_jobs(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import functools
    from dataclasses import replace

    import api.app
    from api.app import create_app
    from api.settings import Settings

    started, release = threading.Event(), threading.Event()
    ran: list[Any] = []

    def slow_find(problem: Any, *args: Any, **kwargs: Any) -> list[Any]:
        ran.append(problem)
        started.set()
        release.wait(10)
        return []

    monkeypatch.setattr(api.app, "JobManager", functools.partial(JobManager, find=slow_find))
    settings = replace(Settings.from_env(), db_url=db_url, job_workers=1)
    rng = np.random.default_rng()
    queued = [small_problem(n=int(n)) for n in rng.integers(1, 9, size=2)]
    try:
        with TestClient(create_app(settings)) as client:
            manager = client.app.state.jobs  # type: ignore[attr-defined]
            body = {"problems": [TINY], "device": "cpu"}
            first = client.post("/v1/jobs", json=body).json()["id"]
            assert started.wait(10)
            second = manager.submit([JobItem(p) for p in queued], "cpu", None)["id"]
            assert manager.get(second)["state"] == "queued"
        # The client's exit ran the app's shutdown: no job of it is left unfinished.
        waiting = manager.get(second)
        assert waiting["state"] == "failed", waiting
        assert waiting["error"] == "the server shut down before the job started"
        running = manager.get(first)
        assert running["state"] == "failed", running
        assert running["error"] == "the server shut down before the job finished"
    finally:
        release.set()
    assert len(ran) == 1  # only the running job's first problem was ever looked at


# Mutation gap: a job that shutdown() failed while a worker thread had already taken it
# from the pool's queue (waiting for the lock shutdown held) still ran afterwards: its
# problems were tuned and its stored "failed" overwritten with "running". The worker is
# held at its first lock by a stand-in lock until shutdown() is over.
def test_a_job_failed_by_shutdown_before_it_began_never_runs(db_url: str) -> None:
    class HeldLock:
        """The manager's lock, except that a job thread's first take waits for `go`."""

        def __init__(self) -> None:
            self.real = threading.Lock()
            self.waiting, self.go = threading.Event(), threading.Event()

        def __enter__(self) -> None:
            name = threading.current_thread().name
            if name.startswith("convtune-job_") and not self.waiting.is_set():
                self.waiting.set()
                assert self.go.wait(10)
            self.real.acquire()

        def __exit__(self, *_exc: Any) -> None:
            self.real.release()

    ran: list[Any] = []
    ms = float(np.random.default_rng().uniform(0.5, 9.0))

    def find(problem: Any, *_args: Any, **_kwargs: Any) -> list[Any]:
        from tuner.results import AlgorithmResult

        ran.append(problem)
        return [AlgorithmResult("direct", "default", "ok", ms, 0, source="fresh")]

    manager = JobManager(db_url=db_url, metrics=Metrics(), workers=1, max_jobs=4, kept=8,
                         find=find, heartbeat_s=3600)
    lock = HeldLock()
    manager._lock = lock  # type: ignore[assignment]
    job = manager.submit([JobItem(small_problem())], "cpu", None)
    assert lock.waiting.wait(10)  # the worker has the job and waits at the lock
    manager.shutdown()
    lock.go.set()
    manager._pool.shutdown(wait=True)  # the worker's _run is over
    assert ran == []
    got = manager.get(job["id"])
    assert got is not None and got["state"] == "failed", got
    assert got["error"] == "the server shut down before the job started"
    assert got["started_at"] is None and got["progress"]["done"] == 0
