"""Background jobs in the store: one row per job, written by the process that runs it and
read by any process (several `convtune serve` workers share one store).

A worker that dies (SIGKILL, OOM, a crash) cannot say so, so liveness is judged from the
row: the process holding an unfinished job rewrites it at least every few seconds (a
heartbeat, api.jobs), and its snapshot carries STALE_AFTER_KEY, how long the row may go
unwritten before its worker is taken to be gone. A reader that finds an unfinished row
older than that stores it as failed, so the client is told and the row becomes prunable.
Finished is final: a worker that was judged gone (a long pause, a store it could not reach)
cannot turn the failure its client has already seen back into "running".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from db.claims import db_now
from db.models import Job
from db.rows import as_utc, canonical_json

#: States after which a job no longer changes.
FINISHED = ("done", "failed")

#: Key of a stored snapshot, set by the writer: seconds without a write after which the job's
#: worker is taken to have stopped. Kept in the stored JSON (no schema change) and never
#: shown to clients; the name is stored, so it stays.
STALE_AFTER_KEY = "stale_after_s"

#: The bound for rows without STALE_AFTER_KEY, written before workers sent heartbeats: such
#: a worker wrote only when a problem finished, and one problem's tuning may take long.
UNPROMISED_STALE_S = 3600.0


def save_job(*, session: Session, job_id: str, snapshot: Mapping[str, Any]) -> bool:
    """Insert or replace job `job_id` with `snapshot` (its JSON view: state, error, ...).

    False, and nothing written, when the stored job has finished already (a reader judged
    its worker gone and stored it failed) or, for a job past "queued", when its row is gone
    (pruned since): either way its client was told it failed, and that stands.
    """
    now = db_now(session=session)
    values = {"state": str(snapshot["state"]), "result": canonical_json(snapshot),
              "error": snapshot.get("error"), "updated_at": now}
    # One conditional UPDATE, not read-then-write: on PostgreSQL a reader's "failed" that
    # commits between our read and our write would otherwise be overwritten.
    written = session.execute(
        update(Job).where(Job.id == job_id, Job.state.not_in(FINISHED)).values(**values)
        .execution_options(synchronize_session=False)
    )
    if written.rowcount:  # type: ignore[attr-defined]
        return True
    if values["state"] != "queued" or _exists(session, job_id):
        return False
    session.execute(insert(Job).values(id=job_id, created_at=now, **values))
    return True


def _exists(session: Session, job_id: str) -> bool:
    return session.execute(select(Job.id).where(Job.id == job_id)).first() is not None


def load_job(*, session: Session, job_id: str) -> dict[str, Any] | None:
    """The stored snapshot of job `job_id`, or None when there is none.

    An unfinished job whose worker has stopped (its row is older than the worker promised)
    is returned, and stored, as failed with a one-line error saying so.
    """
    for _ in range(2):
        row = session.execute(
            select(Job.state, Job.result, Job.updated_at).where(Job.id == job_id)
        ).first()
        if row is None:
            return None
        snapshot, stored = _judge(session, job_id, row.state, row.result, row.updated_at)
        if stored is not False:
            return snapshot
        # Someone wrote the row between our read and our write: its worker is alive after
        # all, or another reader failed it first. Read it again.
    return snapshot


def fail_orphaned_jobs(*, session: Session) -> int:
    """Store every unfinished job whose worker has stopped as failed; returns how many.

    Readers fail such a job when it is polled; this catches the ones nobody polls, so that
    they too become finished and prunable.
    """
    rows = session.execute(
        select(Job.id, Job.state, Job.result, Job.updated_at).where(Job.state.not_in(FINISHED))
    ).all()
    now = db_now(session=session) if rows else None
    failed = 0
    for row in rows:
        _, stored = _judge(session, row.id, row.state, row.result, row.updated_at, now)
        failed += stored is True
    return failed


def prune_jobs(*, session: Session, kept: int) -> int:
    """Delete finished jobs beyond the `kept` most recently updated; returns how many.

    Orphaned jobs (fail_orphaned_jobs) count as finished from the time they were judged, so
    a client still polling one sees the failure before it goes.
    """
    fail_orphaned_jobs(session=session)
    old = list(session.execute(
        select(Job.id).where(Job.state.in_(FINISHED))
        .order_by(Job.updated_at.desc(), Job.id).offset(kept)
    ).scalars())
    if old:
        session.execute(delete(Job).where(Job.id.in_(old)))
    return len(old)


def _judge(
    session: Session, job_id: str, state: str, result: str, updated_at: datetime,
    now: datetime | None = None,
) -> tuple[dict[str, Any], bool | None]:
    """The snapshot to show for a stored row (at `now`, by default the store's clock), and
    whether it was just stored as failed: None when the row stands as it is, False when the
    row changed under us."""
    snapshot = dict(json.loads(result))
    promised = snapshot.pop(STALE_AFTER_KEY, None)
    if state in FINISHED:
        return snapshot, None
    valid = isinstance(promised, (int, float)) and not isinstance(promised, bool)
    bound = float(promised) if valid and promised > 0 else UNPROMISED_STALE_S
    # The store's clock on PostgreSQL (db_now): workers on several hosts may disagree.
    now = now or db_now(session=session)
    last = as_utc(updated_at)
    if (now - last).total_seconds() <= bound:
        return snapshot, None
    holding = "running" if state == "running" else "holding"
    error = (f"the worker {holding} this job stopped (nothing heard from it since "
             f"{last:%Y-%m-%d %H:%M:%S} UTC; {bound:g} s without a word is the limit); "
             "submit the job again")
    snapshot.update(state="failed", finished_at=now.isoformat(), error=error)
    try:
        # In a savepoint: a store too busy to take the write must not fail the read; the
        # next read stores it. Matched on the row as read, so a heartbeat that lands
        # meanwhile wins over our judgement.
        with session.begin_nested():
            changed = session.execute(
                update(Job)
                .where(Job.id == job_id, Job.state == state, Job.updated_at == updated_at)
                .values(state="failed", result=canonical_json(snapshot), error=error,
                        updated_at=now)
                .execution_options(synchronize_session=False)
            ).rowcount  # type: ignore[attr-defined]
    except OperationalError:
        return snapshot, None
    return snapshot, bool(changed)
