"""Jobs whose worker process stopped: reported failed within the stale bound, never lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

import db.jobs as stored_jobs
from algorithms.runtime import TimingPolicy
from api import jobs as api_jobs
from api.jobs import JobItem, JobManager
from api.metrics import Metrics
from db.engine import open_store
from db.models import Job
from tests.api.test_server import ROOT
from tests.fleet.conftest import pg_url  # noqa: F401  (a fixture: the PostgreSQL store)
from tests.tuner.fakes import small_problem
from tests.tuner.test_timing import Clocked, Scripted, steady, tuner_for

#: Short enough for a test, the same ratio as the defaults' order of magnitude.
HEARTBEAT_S, STALE_S = 0.2, 1.0


def beat_every(monkeypatch: pytest.MonkeyPatch, heartbeat_s: float, stale_s: float) -> None:
    """Set the heartbeat and stale bound of the JobManagers made from now on."""
    monkeypatch.setenv("CONVTUNE_JOB_HEARTBEAT_S", str(heartbeat_s))
    monkeypatch.setenv("CONVTUNE_JOB_STALE_S", str(stale_s))

#: A `convtune serve` worker: one job running (its find never returns), one queued behind it.
WORKER = textwrap.dedent("""
    import sys, time
    from api.jobs import JobItem, JobManager
    from api.metrics import Metrics
    from tests.tuner.fakes import small_problem
    manager = JobManager(db_url=sys.argv[1], metrics=Metrics(), workers=1, max_jobs=4, kept=100,
                         find=lambda *a, **k: time.sleep(3600))
    for _ in range(2):
        print(manager.submit([JobItem(small_problem())], "cpu", None)["id"], flush=True)
    time.sleep(3600)
""")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, db_url: str) -> str:
    """The test's store on SQLite, then on PostgreSQL (skipped where there is no server)."""
    return db_url if request.param == "sqlite" else str(request.getfixturevalue("pg_url"))


def reader(url: str) -> JobManager:
    """Another worker's manager: it only answers polls here."""
    return JobManager(db_url=url, metrics=Metrics(), workers=1, max_jobs=4, kept=100)


def stored_state(url: str, job_id: str) -> str | None:
    with open_store(url).session() as session:
        return session.execute(select(Job.state).where(Job.id == job_id)).scalar()


def poll_until_finished(manager: JobManager, job_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = manager.get(job_id)
        assert job is not None
        if job["state"] in ("done", "failed") or time.monotonic() > deadline:
            return job
        time.sleep(0.05)


def test_a_killed_workers_jobs_are_reported_failed_and_become_prunable(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Review of the storage layer (2026-11-30), finding 2: a `serve` worker killed with
    # SIGKILL left its jobs "running" / "queued" in the store for ever: every poll said
    # "running", and prune_jobs never deleted them.
    beat_every(monkeypatch, HEARTBEAT_S, STALE_S)  # the worker's, and this reader's
    open_store(store_url)  # migrated here, not raced by the worker's first write
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, store_url],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        running, queued = proc.stdout.readline().strip(), proc.stdout.readline().strip()
        polls = reader(store_url)
        deadline = time.monotonic() + 30
        while stored_state(store_url, running) != "running":
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.05)
        # Alive for longer than the bound, the worker's jobs are not misjudged.
        time.sleep(2 * STALE_S)
        assert polls.get(running)["state"] == "running"  # type: ignore[index]
        assert polls.get(queued)["state"] == "queued"  # type: ignore[index]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout:
            proc.stdout.close()
    killed = time.monotonic()
    job = poll_until_finished(polls, running, timeout=STALE_S + 10)
    took = time.monotonic() - killed
    assert job["state"] == "failed", job
    assert job["error"].startswith("the worker running this job stopped (nothing heard from")
    assert "submit the job again" in job["error"] and job["finished_at"]
    assert "stale_after_s" not in job  # the stored bound is not the client's business
    assert took < STALE_S + 5, took
    # Stored as failed, not only shown: finished, hence prunable. The queued job nobody
    # polled is judged by the prune itself.
    assert stored_state(store_url, running) == "failed"
    time.sleep(STALE_S)
    with open_store(store_url).session() as session:
        assert stored_jobs.prune_jobs(session=session, kept=0) == 2
    assert polls.get(running) is None and polls.get(queued) is None


def test_a_live_job_through_a_long_tuning_is_not_taken_for_dead(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Review of the storage layer (2026-11-30), finding 2: the fix judges a worker by how
    # long its job went unwritten; one problem tuned for many times that bound, and a job
    # queued behind it, must still read as running / queued. The heartbeat that keeps them
    # fresh must not run while a candidate is timed (issue 11).
    rt = Scripted({"a": steady(1.0), "b": steady(1.1)}, sleep_s=0.01)
    policy = TimingPolicy(warmup=1, budget_s=0.0, min_reps=100, max_reps=100, batch_below_ms=0)
    tuner = tuner_for(db_url, rt, policy, Clocked("a", rt), Clocked("b", rt))
    beats: list[bool] = []
    save = stored_jobs.save_job

    def watched_save(**kwargs: Any) -> bool:
        if threading.current_thread().name.startswith("convtune-job-heartbeat"):
            beats.append(rt.timing)
        return save(**kwargs)

    monkeypatch.setattr(stored_jobs, "save_job", watched_save)
    # Twenty beats: on a loaded host a beat may wait a few tenths of a second for the gate.
    stale_s = 2.0
    beat_every(monkeypatch, 0.1, stale_s)
    manager = JobManager(db_url=db_url, metrics=Metrics(), workers=1, max_jobs=4, kept=100,
                         find=tuner.find)
    polls = reader(db_url)
    first = manager.submit([JobItem(small_problem())], "cpu", None)["id"]
    # The same problem: once the first job has tuned it, the second finds it stored.
    second = manager.submit([JobItem(small_problem())], "cpu", None)["id"]
    seen: dict[tuple[str, str], list[float]] = {}  # states -> when first and last polled
    deadline = time.monotonic() + 60
    while True:
        states = (polls.get(first)["state"], polls.get(second)["state"])  # type: ignore[index]
        seen.setdefault(states, []).append(time.monotonic())
        if "failed" in states or states == ("done", "done") or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert states == ("done", "done"), seen.keys()
    # The first problem's tuning, with the second job queued behind it, outlasted the bound.
    running = seen[("running", "queued")]
    assert running[-1] - running[0] > stale_s, running
    assert sum(rt.samples.values()) >= 200
    assert len(beats) > 10 and not any(beats)  # it beat, between timed regions only
    manager.shutdown()


def test_shutdown_reports_running_jobs_failed_and_they_stay_failed(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Review of the storage layer (2026-11-30), finding 2: shutdown() failed only queued
    # jobs; a running one stayed "running" in the store when the process exited (or was
    # killed after its grace period) before the job reached its next problem.
    started, release = threading.Event(), threading.Event()

    def slow_find(*args: Any, **kwargs: Any) -> list[Any]:
        started.set()
        release.wait(10)
        return []

    beat_every(monkeypatch, HEARTBEAT_S, STALE_S)
    manager = JobManager(db_url=db_url, metrics=Metrics(), workers=1, max_jobs=4, kept=8,
                         find=slow_find)
    job = manager.submit([JobItem(small_problem()), JobItem(small_problem(n=2))], "cpu", None)
    assert started.wait(10)
    manager.shutdown()
    stopped = reader(db_url).get(job["id"])
    assert stopped is not None and stopped["state"] == "failed"
    assert stopped["error"] == "the server shut down before the job finished"
    release.set()  # the running problem ends after the shutdown: the failure stands
    time.sleep(0.3)
    assert reader(db_url).get(job["id"]) == stopped


def test_a_failed_final_write_is_written_again(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Review of the storage layer (2026-11-30), finding 2: when the final write of a job
    # failed, the job was dropped from memory and the store kept "running" for ever.
    save = stored_jobs.save_job
    failures: list[str] = []

    def flaky_save(**kwargs: Any) -> bool:
        # Past Store.write's three attempts: the final write fails for good.
        if kwargs["snapshot"]["state"] == "done" and len(failures) < 3:
            failures.append(kwargs["job_id"])
            raise OperationalError("UPDATE jobs", {}, Exception("database is locked"))
        return save(**kwargs)

    monkeypatch.setattr(stored_jobs, "save_job", flaky_save)
    beat_every(monkeypatch, 0.05, 10)
    manager = JobManager(db_url=db_url, metrics=Metrics(), workers=1, max_jobs=4, kept=8,
                         find=lambda *a, **k: [])
    job_id = manager.submit([JobItem(small_problem())], "cpu", None)["id"]
    final = poll_until_finished(reader(db_url), job_id, timeout=10)
    assert failures == [job_id] * 3
    assert final["state"] == "done" and final["results"][0]["state"] == "done", final
    manager.shutdown()


def test_a_job_reported_failed_is_not_brought_back_by_its_late_worker(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Review of the storage layer (2026-11-30), finding 2: once a reader has reported a job
    # failed (its worker not heard from in time: a long pause, an unreachable store), what
    # the client saw stands; the worker that comes back lets the job go.
    cut_off, release = threading.Event(), threading.Event()
    save = stored_jobs.save_job

    def unreachable_when_cut_off(**kwargs: Any) -> bool:
        if cut_off.is_set():
            raise OperationalError("UPDATE jobs", {}, Exception("could not connect"))
        return save(**kwargs)

    def find(*args: Any, **kwargs: Any) -> list[Any]:
        cut_off.set()
        release.wait(10)
        return []

    monkeypatch.setattr(stored_jobs, "save_job", unreachable_when_cut_off)
    metrics = Metrics()
    beat_every(monkeypatch, 0.05, 0.3)
    manager = JobManager(db_url=db_url, metrics=metrics, workers=1, max_jobs=4, kept=8,
                         find=find)
    items = [JobItem(small_problem()), JobItem(small_problem(n=2))]
    job_id = manager.submit(items, "cpu", None)["id"]
    polls = reader(db_url)
    judged = poll_until_finished(polls, job_id, timeout=10)
    assert judged["state"] == "failed" and "the worker running this job stopped" in judged["error"]
    cut_off.clear()  # the store is back: the heartbeat finds the job reported failed
    deadline = time.monotonic() + 10
    while manager._jobs and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not manager._jobs  # let go: it no longer counts against max_jobs
    release.set()
    time.sleep(0.3)
    assert polls.get(job_id) == judged  # neither "running" again nor "done"
    manager.shutdown()


def test_a_row_without_a_stale_bound_is_judged_by_the_default(db_url: str) -> None:
    # Review of the storage layer (2026-11-30), finding 2: rows written before workers sent
    # heartbeats carry no bound; they are judged by a generous one, not never.
    store = open_store(db_url)
    snapshot: dict[str, Any] = {"id": "ab", "state": "running", "error": None, "results": []}
    with store.session() as session:
        stored_jobs.save_job(session=session, job_id="ab", snapshot={**snapshot,
                                                                      "state": "queued"})
        stored_jobs.save_job(session=session, job_id="ab", snapshot=snapshot)
    with store.session() as session:
        assert stored_jobs.load_job(session=session, job_id="ab") == snapshot
        row = session.get(Job, "ab")
        assert row is not None
        row.updated_at -= timedelta(hours=1, seconds=1)
    with store.session() as session:
        judged = stored_jobs.load_job(session=session, job_id="ab")
    assert judged is not None and judged["state"] == "failed"
    assert "3600 s without a word" in judged["error"]


def test_the_api_spells_the_stores_names_alike() -> None:
    # The API may not import db, so it spells the stored key and the finished states again.
    assert api_jobs.STALE_AFTER_KEY == stored_jobs.STALE_AFTER_KEY
    assert api_jobs.FINISHED == stored_jobs.FINISHED
