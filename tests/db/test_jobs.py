"""db.jobs at its own interface, on a clock the test sets: what a save may overwrite, when
an unfinished job counts as orphaned, and which finished jobs a prune keeps."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import select

import db.jobs as stored_jobs
from db.engine import open_store
from db.models import Job

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


class Clock:
    """The store's clock as db.jobs reads it (db_now), set by the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = T0
        monkeypatch.setattr(stored_jobs, "db_now", lambda session: self.now)


def snap(job_id: str, state: str, **extra: Any) -> dict[str, Any]:
    return {"id": job_id, "state": state, "error": None, **extra}


def save(url: str, job_id: str, snapshot: dict[str, Any]) -> bool:
    with open_store(url).session() as s:
        return stored_jobs.save_job(session=s, job_id=job_id, snapshot=snapshot)


def load(url: str, job_id: str) -> dict[str, Any] | None:
    with open_store(url).session() as s:
        return stored_jobs.load_job(session=s, job_id=job_id)


# Mutation gap: only a queued job is ever inserted (a later state of a pruned job is not
# brought back), a finished job takes no write, not even a queued one, and the error column
# holds the snapshot's error.
def test_a_save_inserts_only_queued_jobs_and_never_rewrites_a_finished_one(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    Clock(monkeypatch)
    assert not save(store_url, "pruned", snap("pruned", "running"))
    assert load(store_url, "pruned") is None
    assert save(store_url, "j", snap("j", "queued"))
    assert save(store_url, "j", snap("j", "running"))
    assert save(store_url, "j", snap("j", "failed", error="boom"))
    assert not save(store_url, "j", snap("j", "queued"))
    assert not save(store_url, "j", snap("j", "done"))
    assert load(store_url, "j") == snap("j", "failed", error="boom")
    with open_store(store_url).session() as s:
        assert s.execute(select(Job.error).where(Job.id == "j")).scalar() == "boom"


# Mutation gap: a job is orphaned only once more than its promised seconds passed (at the
# bound itself it is alive); a bound of 0 or a bool is no promise (the default applies);
# a job that failed on its own keeps its own error however old.
@pytest.mark.parametrize(("promised", "bound_s"), [(10, 10), (0, 3600), (True, 3600)])
def test_a_job_is_orphaned_only_past_its_promised_bound(
        db_url: str, monkeypatch: pytest.MonkeyPatch, promised: object, bound_s: int) -> None:
    clock = Clock(monkeypatch)
    for job_id in ("alive", "own-failure"):
        assert save(db_url, job_id, snap(job_id, "queued"))
        assert save(db_url, job_id, snap(job_id, "running", **{stored_jobs.STALE_AFTER_KEY:
                                                                  promised}))
    assert save(db_url, "own-failure", snap("own-failure", "failed", error="boom"))
    clock.now = T0 + timedelta(seconds=bound_s)
    assert load(db_url, "alive") == snap("alive", "running")
    clock.now += timedelta(milliseconds=1)
    judged = load(db_url, "alive")
    assert judged is not None and judged["state"] == "failed"
    assert f"{bound_s:g} s without a word" in judged["error"]
    clock.now = T0 + timedelta(days=1)
    assert load(db_url, "own-failure") == snap("own-failure", "failed", error="boom")


# Mutation gap: the judgement is stored only over the row as it was read: a heartbeat or a
# state change landing in between wins, and load_job then reads the row again.
def test_a_write_landing_between_read_and_judgement_wins(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    assert save(db_url, "j", snap("j", "queued", stale_after_s=10))
    with open_store(db_url).session() as s:
        row = s.execute(select(Job.state, Job.result, Job.updated_at)).one()
    assert save(db_url, "j", snap("j", "running", stale_after_s=10))  # same instant
    with open_store(db_url).session() as s:
        _, stored = stored_jobs._judge(s, "j", row.state, row.result, row.updated_at,
                                       now=T0 + timedelta(hours=1))
    assert stored is False and load(db_url, "j") == snap("j", "running")

    judge = stored_jobs._judge
    calls: list[int] = []

    def heartbeat_first(*args: Any, **kwargs: Any) -> Any:
        if not calls:  # the worker writes just after our read
            save(db_url, "j", snap("j", "running", stale_after_s=10, beat=1))
        calls.append(1)
        return judge(*args, **kwargs)

    clock.now = T0 + timedelta(hours=1)
    monkeypatch.setattr(stored_jobs, "_judge", heartbeat_first)
    assert load(db_url, "j") == snap("j", "running", beat=1)
    assert len(calls) == 2


# Mutation gap: a prune first fails orphaned jobs, then keeps the `kept` most recently
# updated finished jobs and deletes the older ones; unfinished live jobs always stay.
def test_a_prune_keeps_the_most_recent_finished_jobs_and_every_live_one(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    assert save(store_url, "gone", snap("gone", "queued", stale_after_s=10))
    for minute in range(1, 5):
        clock.now = T0 + timedelta(minutes=minute)
        assert save(store_url, f"f{minute}", snap(f"f{minute}", "queued"))
        assert save(store_url, f"f{minute}", snap(f"f{minute}", "done"))
    clock.now = T0 + timedelta(minutes=5)
    assert save(store_url, "live", snap("live", "queued", stale_after_s=600))
    with open_store(store_url).session() as s:
        assert stored_jobs.prune_jobs(session=s, kept=2) == 3
    with open_store(store_url).session() as s:
        left = {job_id: state for job_id, state in s.execute(select(Job.id, Job.state))}
    assert left == {"gone": "failed", "f4": "done", "live": "queued"}
