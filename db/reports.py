"""Reports over the whole store: devices with their counts, measurements filtered and paged."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import ColumnElement, and_, false, func, select
from sqlalchemy.orm import Session

from db.keys import PROBLEM_FIELDS, out_of_range
from db.models import Device, Measurement, Problem
from db.rows import measurement_row

#: What `list_results` may filter on besides the problem fields.
RESULT_FILTERS = ("algorithm", "status", "config", "device")


def list_devices(*, session: Session) -> list[dict[str, Any]]:
    """Every known device with its fingerprint fields and how many measurements it holds."""
    counts = (
        select(Measurement.device_id, func.count().label("count"))
        .group_by(Measurement.device_id)
        .subquery()
    )
    rows = session.execute(
        select(Device, func.coalesce(counts.c.count, 0))
        .outerjoin(counts, counts.c.device_id == Device.id)
        .order_by(Device.id)
    ).all()
    return [
        {
            "fingerprint": d.fingerprint,
            "kind": d.kind,
            "name": d.name,
            "arch": d.arch,
            "units": d.units,
            "memory_bytes": d.memory_bytes,
            "info": json.loads(d.info),
            "first_seen": d.first_seen.isoformat(),
            "measurements": int(count),
        }
        for d, count in rows
    ]


def list_results(
    *,
    session: Session,
    filters: Mapping[str, Any] | None = None,
    limit: int = 100,
    offset: int = 0,
) -> tuple[int, list[dict[str, Any]]]:
    """Stored measurements joined with their problem and device, newest first, paginated.

    `filters` may name any problem field, `algorithm`, `status`, `config`, or `device`
    (a fingerprint, or a prefix of one). Returns (total, page).
    """
    query = select(Measurement, Problem, Device).join(
        Problem, Measurement.problem_id == Problem.id
    ).join(Device, Measurement.device_id == Device.id)
    conditions: list[ColumnElement[bool]] = []
    for name, value in dict(filters or {}).items():
        if value is None:
            continue
        if name not in (*PROBLEM_FIELDS, *RESULT_FILTERS):
            raise ValueError(f"unknown results filter {name!r}")
        if (isinstance(value, str) and "\x00" in value) or (
            name in PROBLEM_FIELDS and out_of_range({name: value}) is not None
        ):
            # Never stored: NUL in text (PostgreSQL refuses it even as a parameter), or an
            # integer too large for its column.
            conditions.append(false())
        elif name in PROBLEM_FIELDS:
            conditions.append(getattr(Problem, name) == value)
        elif name == "device":
            # autoescape: '%' and '_' in a prefix are characters, not LIKE wildcards.
            conditions.append(Device.fingerprint.startswith(str(value), autoescape=True))
        else:
            conditions.append(getattr(Measurement, name) == value)
    if conditions:
        query = query.where(and_(*conditions))
    total = session.execute(
        select(func.count()).select_from(query.subquery())
    ).scalar_one()
    page = session.execute(
        query.order_by(Measurement.measured_at.desc(), Measurement.id.desc())
        .limit(limit)
        .offset(offset)
    ).all()
    return int(total), [
        {
            "device": d.fingerprint,
            "device_name": d.name,
            "problem": {f: getattr(p, f) for f in PROBLEM_FIELDS},
            **measurement_row(m).as_dict(),
        }
        for m, p, d in page
    ]
