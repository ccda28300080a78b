"""Ids of devices and problems: look up, or insert once even when processes race."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.models import PROBLEM_INT_FIELDS, Device, Problem
from db.rows import INT32_MAX, INT64_MAX, canonical_json, utcnow

PROBLEM_FIELDS = (*PROBLEM_INT_FIELDS, "dtype", "math", "direction")

# Statements are built once with bind parameters: they run on every find.
PROBLEM_MATCH = [getattr(Problem, f) == bindparam(f) for f in PROBLEM_FIELDS]
_PROBLEM_ID = select(Problem.id).where(*PROBLEM_MATCH)


def problem_params(key: Mapping[str, Any]) -> dict[str, Any]:
    """The bind parameters of PROBLEM_MATCH for a problem key."""
    return {f: key[f] for f in PROBLEM_FIELDS}


def out_of_range(values: Mapping[str, Any]) -> str | None:
    """The first problem field of `values` too large for its INTEGER column, else None."""
    for f in PROBLEM_INT_FIELDS:
        value = values.get(f)
        if isinstance(value, int) and not -INT32_MAX - 1 <= value <= INT32_MAX:
            return f
    return None


def ensure_device(*, session: Session, fingerprint: str, info: Mapping[str, Any]) -> int:
    """The id of the device row for `fingerprint`, inserting it on first sight."""
    found = find_device_id(session=session, fingerprint=fingerprint)
    if found is not None:
        return found
    units = int(info.get("units") or 0)
    memory = info.get("memory_bytes")
    if not 0 <= units <= INT32_MAX:
        raise ValueError(f"device {fingerprint}: units {units} out of range")
    if memory is not None and not 0 <= int(memory) <= INT64_MAX:
        raise ValueError(f"device {fingerprint}: memory_bytes {memory} out of range")
    device = Device(
        fingerprint=fingerprint,
        kind=str(info.get("kind", "")),
        name=str(info.get("name", "")),
        arch=str(info.get("arch", "")),
        units=units,
        memory_bytes=None if memory is None else int(memory),
        info=canonical_json(info),
        first_seen=utcnow(),
    )
    return _insert_or_reread(
        session, device, lambda: find_device_id(session=session, fingerprint=fingerprint)
    )


def find_device_id(*, session: Session, fingerprint: str) -> int | None:
    """The id of a known device, or None."""
    found = session.execute(select(Device.id).where(Device.fingerprint == fingerprint)).scalar()
    return None if found is None else int(found)


def ensure_problem(*, session: Session, key: Mapping[str, Any]) -> int:
    """The id of the problem row for `key` (see ConvProblem.key), inserting it if new.

    ValueError when a field is too large for the store (INTEGER columns).
    """
    bad = out_of_range(key)
    if bad is not None:
        raise ValueError(f"problem field {bad}={key[bad]} is too large to store")
    found = find_problem_id(session=session, key=key)
    if found is not None:
        return found
    problem = Problem(**{f: key[f] for f in PROBLEM_FIELDS}, layout="NCHW")
    return _insert_or_reread(session, problem, lambda: find_problem_id(session=session, key=key))


def find_problem_id(*, session: Session, key: Mapping[str, Any]) -> int | None:
    """The id of a known problem, or None (also for one too large to have been stored)."""
    if out_of_range(key) is not None:
        return None
    found = session.execute(_PROBLEM_ID, problem_params(key)).scalar()
    return None if found is None else int(found)


def _insert_or_reread(
    session: Session, row: Device | Problem, reread: Callable[[], int | None]
) -> int:
    """Insert `row` and return its id; if another process inserted the same row since we
    looked (unique violation), return the id of theirs instead."""
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        found = reread()
        if found is None:
            raise
        return found
    return row.id
