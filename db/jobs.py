"""Background jobs in the store: one row per job, written by the process that runs it and
read by any process (several `convtune serve` workers share one store)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from db.models import Job
from db.rows import canonical_json, utcnow

#: States after which a job no longer changes.
FINISHED = ("done", "failed")


def save_job(*, session: Session, job_id: str, snapshot: Mapping[str, Any]) -> None:
    """Insert or replace job `job_id` with `snapshot` (its JSON view: state, error, ...)."""
    now = utcnow()
    job = session.get(Job, job_id)
    values = {"state": str(snapshot["state"]), "result": canonical_json(snapshot),
              "error": snapshot.get("error"), "updated_at": now}
    if job is None:
        session.add(Job(id=job_id, created_at=now, **values))
    else:
        for name, value in values.items():
            setattr(job, name, value)
    session.flush()


def load_job(*, session: Session, job_id: str) -> dict[str, Any] | None:
    """The stored snapshot of job `job_id`, or None when there is none."""
    found = session.execute(select(Job.result).where(Job.id == job_id)).scalar()
    return None if found is None else dict(json.loads(found))


def prune_jobs(*, session: Session, kept: int) -> int:
    """Delete finished jobs beyond the `kept` most recently updated; returns how many."""
    old = list(session.execute(
        select(Job.id).where(Job.state.in_(FINISHED))
        .order_by(Job.updated_at.desc(), Job.id).offset(kept)
    ).scalars())
    if old:
        session.execute(delete(Job).where(Job.id.in_(old)))
    return len(old)
