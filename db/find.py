"""The find path: one problem's measurements on one device (or similar devices or
problems) read back, and new measurements written. Plain values in and out."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from sqlalchemy import BigInteger, Text, and_, bindparam, cast, func, insert, or_, select, update
from sqlalchemy.orm import Session

from db.keys import (
    PROBLEM_FIELDS,
    PROBLEM_MATCH,
    ensure_device,
    ensure_problem,
    find_problem_id,
    out_of_range,
    problem_params,
)
from db.migrations import GENERATION_KEY
from db.models import Device, Measurement, Meta, Problem
from db.rows import (
    ROW_FIELDS,
    MeasurementRow,
    as_utc,
    measurement_row,
    plain_row,
    utcnow,
)

_LOAD_STATEMENT = (
    select(*(Measurement.__table__.c[f] for f in ROW_FIELDS))
    .join(Device, Measurement.device_id == Device.id)
    .join(Problem, Measurement.problem_id == Problem.id)
    .where(Device.fingerprint == bindparam("fingerprint"))
    .where(*PROBLEM_MATCH)
)


def load_measurements(
    *, session: Session, fingerprint: str, key: Mapping[str, Any], impl_hashes: Mapping[str, str]
) -> list[MeasurementRow]:
    """Stored measurements of one problem on one device made by the current implementations.

    `impl_hashes` maps algorithm name to its current implementation hash: rows made by
    other (older) code are not returned, so they are never served as current.
    """
    if out_of_range(key) is not None:
        return []  # never stored
    params = {"fingerprint": fingerprint, **problem_params(key)}
    out = []
    for row in session.execute(_LOAD_STATEMENT, params).mappings():
        if impl_hashes.get(row["algorithm"]) == row["impl_hash"]:
            out.append(plain_row(dict(row)))
    return out


def load_fleet_measurements(
    *,
    session: Session,
    kind: str,
    name: str,
    arch: str,
    exclude_fingerprint: str,
    key: Mapping[str, Any],
    impl_hashes: Mapping[str, str],
) -> list[tuple[dict[str, Any], list[MeasurementRow]]]:
    """Other devices' current measurements of one problem, for lookups across hardware.

    Devices of the same `kind` whose `name` or `arch` matches (the caller ranks them),
    except `exclude_fingerprint`; only rows made by the current implementations
    (`impl_hashes`, as in `load_measurements`). Returns (device, rows) pairs, where device
    holds fingerprint, kind, name, arch, units and info.
    """
    problem_id = find_problem_id(session=session, key=key)
    if problem_id is None or not impl_hashes:
        return []
    current = [
        and_(Measurement.algorithm == algorithm, Measurement.impl_hash == digest)
        for algorithm, digest in impl_hashes.items()
    ]
    found = session.execute(
        select(Device, Measurement)
        .join(Measurement, Measurement.device_id == Device.id)
        .where(
            Device.kind == kind,
            or_(Device.name == name, Device.arch == arch),
            Device.fingerprint != exclude_fingerprint,
            Measurement.problem_id == problem_id,
            or_(*current),
        )
        .order_by(Device.id, Measurement.id)
    )
    out: dict[int, tuple[dict[str, Any], list[MeasurementRow]]] = {}
    for d, m in found:
        if d.id not in out:
            out[d.id] = ({
                "fingerprint": d.fingerprint, "kind": d.kind, "name": d.name,
                "arch": d.arch, "units": d.units, "info": json.loads(d.info),
            }, [])
        out[d.id][1].append(measurement_row(m))
    return list(out.values())


def load_similar_measurements(
    *,
    session: Session,
    fingerprint: str,
    like: Mapping[str, Any],
    impl_hashes: Mapping[str, str],
) -> list[tuple[dict[str, Any], list[MeasurementRow]]]:
    """One device's current measurements of every problem whose fields equal `like`'s.

    `like` names a subset of the problem fields (say r, s, strides, dilations, dtype);
    returns (problem key, rows) pairs, rows filtered by `impl_hashes` as in
    `load_measurements`.
    """
    unknown = set(like) - set(PROBLEM_FIELDS)
    if unknown:
        raise ValueError(f"unknown problem fields {sorted(unknown)}")
    if out_of_range(like) is not None:
        return []  # never stored
    found = session.execute(
        select(Problem, *(Measurement.__table__.c[f] for f in ROW_FIELDS))
        .join(Measurement, Measurement.problem_id == Problem.id)
        .join(Device, Measurement.device_id == Device.id)
        .where(Device.fingerprint == fingerprint)
        .where(*(getattr(Problem, f) == v for f, v in like.items()))
        .order_by(Problem.id, Measurement.id)
    )
    out: dict[int, tuple[dict[str, Any], list[MeasurementRow]]] = {}
    for problem, *values in found:
        row = dict(zip(ROW_FIELDS, values, strict=True))
        if impl_hashes.get(row["algorithm"]) != row["impl_hash"]:
            continue
        key = {f: getattr(problem, f) for f in PROBLEM_FIELDS}
        out.setdefault(problem.id, (key, []))[1].append(plain_row(row))
    return list(out.values())


def load_timed_measurements(
    *, session: Session, kind: str
) -> list[tuple[dict[str, Any], int, MeasurementRow, int]]:
    """Every usable (ok, timed) measurement on devices of one kind, for fitting a model.

    Returns (problem key, device units, row, device id) tuples. Where a device measured the
    same problem and configuration more than once (several implementations), only the
    newest row counts, usable or not: it reflects the code that runs now (rows of removed
    configurations still teach the model how the problem behaves). The newest usable one
    counted before, so a configuration whose current code fails kept its older code's time
    and drew fast mode's measurements (a review of the cost model, 2026-11-30).
    """
    newest = _newest_on(kind)
    found = session.execute(
        select(Problem, newest.c.device_id, Device.units,
               *(Measurement.__table__.c[f] for f in ROW_FIELDS))
        .join(Measurement, Measurement.problem_id == Problem.id)
        .join(newest, newest.c.id == Measurement.id)
        .join(Device, Measurement.device_id == Device.id)
        .where(*_usable(newest))
        .order_by(Measurement.measured_at, Measurement.id)
    )
    keys: dict[int, dict[str, Any]] = {}
    out = []
    for problem, device_id, units, *values in found:
        row = plain_row(dict(zip(ROW_FIELDS, values, strict=True)))
        key = keys.setdefault(problem.id, {f: getattr(problem, f) for f in PROBLEM_FIELDS})
        out.append((key, units, row, device_id))
    return out


def count_timed_measurements(*, session: Session, kind: str) -> int:
    """How many rows load_timed_measurements would return, counted in the database."""
    newest = _newest_on(kind)
    return int(session.execute(
        select(func.count()).select_from(newest).where(*_usable(newest))).scalar_one())


def _newest_on(kind: str) -> Any:
    """The rows of devices of kind `kind`, each numbered by newness within its (device,
    problem, algorithm, config): 1 the newest."""
    m = Measurement
    newness = func.row_number().over(
        partition_by=(m.device_id, m.problem_id, m.algorithm, m.config),
        order_by=(m.measured_at.desc(), m.id.desc()))
    return (select(m.id, m.device_id, m.status, m.time_ms, newness.label("newness"))
            .join(Device, m.device_id == Device.id)
            .where(Device.kind == kind)
            .subquery())


def _usable(newest: Any) -> tuple[Any, ...]:
    """The newest row of its configuration, and usable: ok and timed."""
    return newest.c.newness == 1, newest.c.status == "ok", newest.c.time_ms > 0


_BUMP_GENERATION = (
    update(Meta)
    .where(Meta.key == GENERATION_KEY)
    .values(value=cast(cast(Meta.value, BigInteger) + 1, Text))
)
_GENERATION = select(Meta.value).where(Meta.key == GENERATION_KEY)


def lock_for_write(*, session: Session) -> int:
    """Take the store's write lock before reading what a write depends on; count the write.

    One UPDATE of the `generation` meta row: on SQLite it starts the write transaction now,
    so no other process can commit between our reads and our inserts (an SQLite read
    transaction that later writes fails at once with "database is locked" if someone
    committed meanwhile, busy timeout or not); on PostgreSQL it locks that row, so
    concurrent merges and saves run one after another instead of colliding on unique keys.
    The bump itself tells other processes' answer caches that measurements changed.

    Returns the generation this write produces once committed: read in the same
    transaction, after the bump, while the lock keeps every other write out, so the value
    is this write's own (the answer cache of this process tells its writes from others'
    by it).
    """
    session.execute(_BUMP_GENERATION)
    return generation(session=session)


def generation(*, session: Session) -> int:
    """How many writes of measurements the store has seen (see lock_for_write)."""
    value = session.execute(_GENERATION).scalar()
    return int(value) if value is not None else 0


def save_measurements(
    *,
    session: Session,
    fingerprint: str,
    device_info: Mapping[str, Any],
    key: Mapping[str, Any],
    rows: Sequence[MeasurementRow],
) -> int | None:
    """Insert or replace measurements (unique per device, problem, algorithm, config, hash).

    Returns the store generation this write produces (see lock_for_write), None when
    `rows` is empty (nothing written, the generation not bumped).
    """
    if not rows:
        return None
    produced = lock_for_write(session=session)
    device_id = ensure_device(session=session, fingerprint=fingerprint, info=device_info)
    problem_id = ensure_problem(session=session, key=key)
    # One read of what this device stored for the problem, then one executemany for the
    # inserts and one for the updates: a read per row (each flushing the insert before it)
    # made a layer's write 11 ms on a CPU and 19 ms on the H200's host, 0.5 s of a fast
    # ResNet-50 tuning (2026-11-27).
    ids = {
        (algorithm, config, impl_hash): id_
        for algorithm, config, impl_hash, id_ in session.execute(
            select(Measurement.algorithm, Measurement.config, Measurement.impl_hash,
                   Measurement.id)
            .where(Measurement.device_id == device_id, Measurement.problem_id == problem_id))
    }
    recorded_at = utcnow()
    latest = {  # a configuration given twice keeps the last
        (row.algorithm, row.config, row.impl_hash): {
            **asdict(row), "measured_at": as_utc(row.measured_at), "recorded_at": recorded_at}
        for row in rows
    }
    inserts = [{"device_id": device_id, "problem_id": problem_id, **values}
               for key, values in latest.items() if key not in ids]
    updates = [{"id": ids[key], **values} for key, values in latest.items() if key in ids]
    if inserts:
        session.execute(insert(Measurement), inserts)
    if updates:
        session.execute(update(Measurement), updates)
    return produced
