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
