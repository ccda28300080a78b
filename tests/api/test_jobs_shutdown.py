"""The job manager at shutdown: no 500 for a late submit, no job left "queued" forever."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

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
