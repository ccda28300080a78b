"""The SQL side of bundles: read a store's records out, merge validated records in.

Plain values in and out; the file format and its validation live in tuner.bundles.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from db.find import lock_for_write
from db.keys import PROBLEM_FIELDS, ensure_device, ensure_problem
from db.models import Device, Measurement, Problem
from db.rows import MeasurementRow, as_utc, canonical_json, measurement_row, utcnow

#: How many ids one IN (...) names (SQLite allows 32766 parameters, PostgreSQL 65535).
_CHUNK = 500


def _chunks(values: Sequence[int]) -> Iterable[Sequence[int]]:
    for start in range(0, len(values), _CHUNK):
        yield values[start:start + _CHUNK]


def export_records(
    *, session: Session, device: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[tuple[str, int, MeasurementRow]]]:
    """Every device, problem and measurement in the store, or only one device's.

    `device` is a fingerprint or a prefix of one (every matching device is exported);
    ValueError when nothing matches. Returns (devices, problems, measurements): devices as
    {"fingerprint", "info"}, problems as {"id", "key"} numbered 0.. in a stable order, and
    measurements as (device fingerprint, problem id, row), all sorted so that the same
    store always exports the same records.
    """
    query = select(Device).order_by(Device.fingerprint)
    if device:
        # autoescape: '%' and '_' in a prefix are characters, not LIKE wildcards.
        query = query.where(Device.fingerprint.startswith(device, autoescape=True))
    # A NUL never is in a fingerprint (and PostgreSQL refuses it in a text parameter).
    devices = [] if device and "\x00" in device else list(session.execute(query).scalars())
    if device and not devices:
        raise ValueError(f"no device in the store has a fingerprint starting with {device!r}")
    by_id = {d.id: d.fingerprint for d in devices}
    rows: list[tuple[Measurement, Problem]] = []
    for ids in _chunks(sorted(by_id)):
        rows += [
            (m, p) for m, p in session.execute(
                select(Measurement, Problem)
                .join(Problem, Measurement.problem_id == Problem.id)
                .where(Measurement.device_id.in_(ids))
            )
        ]
    problems: dict[int, dict[str, Any]] = {}
    for _m, p in rows:
        problems.setdefault(p.id, {f: getattr(p, f) for f in PROBLEM_FIELDS})
    # Number problems by their key so two stores with the same data export the same file.
    ordered = sorted(problems, key=lambda pid: canonical_json(problems[pid]))
    number = {pid: i for i, pid in enumerate(ordered)}
    measurements = sorted(
        ((by_id[m.device_id], number[p.id], measurement_row(m)) for m, p in rows),
        key=lambda t: (t[0], t[1], t[2].algorithm, t[2].config, t[2].impl_hash),
    )
    return (
        [{"fingerprint": d.fingerprint, "info": json.loads(d.info)} for d in devices],
        [{"id": number[pid], "key": problems[pid]} for pid in ordered],
        measurements,
    )


def _rank(measured_at: datetime, recorded_at: datetime) -> datetime:
    """A row's merge precedence: its measured_at, but never later than this store's clock."""
    return min(as_utc(measured_at), as_utc(recorded_at))


def merge_records(
    *,
    session: Session,
    devices: Mapping[str, Mapping[str, Any]],
    problems: Mapping[int, Mapping[str, Any]],
    measurements: Sequence[tuple[str, int, MeasurementRow]],
) -> dict[str, int]:
    """Merge validated records into the store in the caller's transaction.

    `devices` maps fingerprint to info, `problems` maps a bundle-local id to a problem key,
    and each measurement names its device fingerprint and problem id. A measurement is
    identified by (device, problem, algorithm, config, impl_hash): a new one is added, a
    newer one replaces the stored one, and an older or equally old one is ignored, so
    merging is idempotent and never loses the newest result.

    "Newer" is by a clock this store controls: a row ranks by min(measured_at, the time
    this store recorded it), so a measured_at in the future (a wrong clock on the tuning
    host, or a forged bundle) counts as no later than its import and cannot outrank every
    later merge. Returns counts: added, replaced, unchanged, older_ignored.
    """
    lock_for_write(session=session)
    now = utcnow()
    device_ids = {
        fp: ensure_device(session=session, fingerprint=fp, info=info)
        for fp, info in devices.items()
    }
    problem_ids = {
        local: ensure_problem(session=session, key=key) for local, key in problems.items()
    }
    # The newest incoming row per identity (a bundle normally has one per identity).
    incoming: dict[tuple[int, int, str, str, str], MeasurementRow] = {}
    for fp, local, row in measurements:
        ident = (device_ids[fp], problem_ids[local], row.algorithm, row.config, row.impl_hash)
        row = replace(row, measured_at=as_utc(row.measured_at))  # stored as UTC
        seen = incoming.get(ident)
        if seen is None or row.measured_at > seen.measured_at:
            incoming[ident] = row
    stored: dict[tuple[int, int, str, str, str], tuple[int, datetime, datetime]] = {}
    wanted_problems = sorted({ident[1] for ident in incoming})
    for ids in _chunks(wanted_problems):
        for mid, did, pid, alg, cfg, digest, at, recorded in session.execute(
            select(
                Measurement.id, Measurement.device_id, Measurement.problem_id,
                Measurement.algorithm, Measurement.config, Measurement.impl_hash,
                Measurement.measured_at, Measurement.recorded_at,
            ).where(
                Measurement.problem_id.in_(ids),
                Measurement.device_id.in_(sorted(set(device_ids.values()))),
            )
        ):
            stored[(did, pid, alg, cfg, digest)] = (mid, _rank(at, recorded or at), as_utc(at))
    counts = {"added": 0, "replaced": 0, "unchanged": 0, "older_ignored": 0}
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    for ident, row in incoming.items():
        values = {**asdict(row), "recorded_at": now}
        found = stored.get(ident)
        rank = _rank(row.measured_at, now)
        if found is None:
            inserts.append({"device_id": ident[0], "problem_id": ident[1], **values})
            counts["added"] += 1
        elif row.measured_at == found[2]:
            # The row this store holds, again: a re-import dated ahead of this store's clock
            # ranked later at each import (capped at the import's time) and "replaced"
            # itself, refreshing its own precedence (a review of keys, 2026-11-30).
            counts["unchanged"] += 1
        elif rank > found[1]:
            updates.append({"id": found[0], **values})
            counts["replaced"] += 1
        elif rank == found[1]:
            counts["unchanged"] += 1
        else:
            counts["older_ignored"] += 1
    if inserts:
        session.execute(insert(Measurement), inserts)
    if updates:
        session.execute(update(Measurement), updates)
    session.flush()
    return counts
