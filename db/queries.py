"""Keyword-only queries over the store. Plain values in and out: db knows nothing of tuner."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import ColumnElement, and_, bindparam, false, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.models import PROBLEM_INT_FIELDS, Device, Measurement, Meta, Problem

PROBLEM_FIELDS = (*PROBLEM_INT_FIELDS, "dtype")

#: The largest value of an INTEGER column (PostgreSQL refuses larger ones; SQLite would not).
INT32_MAX = 2**31 - 1
#: The largest value of a BIGINT column.
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class MeasurementRow:
    """One stored measurement, as plain values."""

    algorithm: str
    config: str
    impl_hash: str
    status: str
    time_ms: float | None
    spread_ms: float | None
    min_ms: float | None
    reps: int
    workspace_bytes: int
    max_error: float | None
    rel_error: float | None
    error: str | None
    measured_at: datetime
    tuner_version: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly fields."""
        data = asdict(self)
        data["measured_at"] = self.measured_at.isoformat()
        return data


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


def as_utc(value: datetime) -> datetime:
    """`value` as timezone-aware UTC; a naive value is taken to be UTC already.

    The store keeps UTC instants: SQLite drops the offset of whatever it is given, so a
    time with another offset must be converted before it is written or compared.
    """
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def canonical_json(data: Mapping[str, Any]) -> str:
    """Sorted, compact JSON: the same mapping always gives the same text."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


# --- devices -----------------------------------------------------------------------------
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


# --- problems ----------------------------------------------------------------------------
# Statements are built once with bind parameters: they run on every find.
_PROBLEM_MATCH = [getattr(Problem, f) == bindparam(f) for f in PROBLEM_FIELDS]
_PROBLEM_ID = select(Problem.id).where(*_PROBLEM_MATCH)


def _problem_params(key: Mapping[str, Any]) -> dict[str, Any]:
    return {f: key[f] for f in PROBLEM_FIELDS}


def _out_of_range(values: Mapping[str, Any]) -> str | None:
    """The first problem field of `values` too large for its INTEGER column, else None."""
    for f in PROBLEM_INT_FIELDS:
        value = values.get(f)
        if isinstance(value, int) and not -INT32_MAX - 1 <= value <= INT32_MAX:
            return f
    return None


def ensure_problem(*, session: Session, key: Mapping[str, Any]) -> int:
    """The id of the problem row for `key` (see ConvProblem.key), inserting it if new.

    ValueError when a field is too large for the store (INTEGER columns).
    """
    bad = _out_of_range(key)
    if bad is not None:
        raise ValueError(f"problem field {bad}={key[bad]} is too large to store")
    found = find_problem_id(session=session, key=key)
    if found is not None:
        return found
    problem = Problem(**{f: key[f] for f in PROBLEM_FIELDS}, layout="NCHW", direction="forward")
    return _insert_or_reread(session, problem, lambda: find_problem_id(session=session, key=key))


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


def find_problem_id(*, session: Session, key: Mapping[str, Any]) -> int | None:
    """The id of a known problem, or None (also for one too large to have been stored)."""
    if _out_of_range(key) is not None:
        return None
    found = session.execute(_PROBLEM_ID, _problem_params(key)).scalar()
    return None if found is None else int(found)


# --- measurements --------------------------------------------------------------------------
def measurement_row(m: Measurement) -> MeasurementRow:
    """A stored Measurement as plain values (measured_at always timezone-aware UTC)."""
    return _plain_row({f: getattr(m, f) for f in _ROW_FIELDS})


def _plain_row(values: dict[str, Any]) -> MeasurementRow:
    # SQLite drops the zone (we only store UTC); PostgreSQL answers in the session's zone.
    values["measured_at"] = as_utc(values["measured_at"])
    return MeasurementRow(**values)


_ROW_FIELDS = tuple(MeasurementRow.__dataclass_fields__)
_LOAD_STATEMENT = (
    select(*(Measurement.__table__.c[f] for f in _ROW_FIELDS))
    .join(Device, Measurement.device_id == Device.id)
    .join(Problem, Measurement.problem_id == Problem.id)
    .where(Device.fingerprint == bindparam("fingerprint"))
    .where(*_PROBLEM_MATCH)
)


def load_measurements(
    *, session: Session, fingerprint: str, key: Mapping[str, Any], impl_hashes: Mapping[str, str]
) -> list[MeasurementRow]:
    """Stored measurements of one problem on one device made by the current implementations.

    `impl_hashes` maps algorithm name to its current implementation hash: rows made by
    other (older) code are not returned, so they are never served as current.
    """
    if _out_of_range(key) is not None:
        return []  # never stored
    params = {"fingerprint": fingerprint, **_problem_params(key)}
    out = []
    for row in session.execute(_LOAD_STATEMENT, params).mappings():
        if impl_hashes.get(row["algorithm"]) == row["impl_hash"]:
            out.append(_plain_row(dict(row)))
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
    if _out_of_range(like) is not None:
        return []  # never stored
    found = session.execute(
        select(Problem, *(Measurement.__table__.c[f] for f in _ROW_FIELDS))
        .join(Measurement, Measurement.problem_id == Problem.id)
        .join(Device, Measurement.device_id == Device.id)
        .where(Device.fingerprint == fingerprint)
        .where(*(getattr(Problem, f) == v for f, v in like.items()))
        .order_by(Problem.id, Measurement.id)
    )
    out: dict[int, tuple[dict[str, Any], list[MeasurementRow]]] = {}
    for problem, *values in found:
        row = dict(zip(_ROW_FIELDS, values, strict=True))
        if impl_hashes.get(row["algorithm"]) != row["impl_hash"]:
            continue
        key = {f: getattr(problem, f) for f in PROBLEM_FIELDS}
        out.setdefault(problem.id, (key, []))[1].append(_plain_row(row))
    return list(out.values())


def lock_for_write(*, session: Session) -> None:
    """Take the store's write lock before reading what a write depends on.

    A no-op write: on SQLite it starts the write transaction now, so no other process can
    commit between our reads and our inserts (an SQLite read transaction that later writes
    fails at once with "database is locked" if someone committed meanwhile, busy timeout or
    not); on PostgreSQL it locks the schema-version row, so concurrent merges and saves run
    one after another instead of colliding on unique keys.
    """
    session.execute(
        update(Meta).where(Meta.key == "schema_version").values(value=Meta.value)
    )


def save_measurements(
    *,
    session: Session,
    fingerprint: str,
    device_info: Mapping[str, Any],
    key: Mapping[str, Any],
    rows: Sequence[MeasurementRow],
) -> None:
    """Insert or replace measurements (unique per device, problem, algorithm, config, hash)."""
    if not rows:
        return
    lock_for_write(session=session)
    device_id = ensure_device(session=session, fingerprint=fingerprint, info=device_info)
    problem_id = ensure_problem(session=session, key=key)
    for row in rows:
        existing = session.execute(
            select(Measurement).where(
                Measurement.device_id == device_id,
                Measurement.problem_id == problem_id,
                Measurement.algorithm == row.algorithm,
                Measurement.config == row.config,
                Measurement.impl_hash == row.impl_hash,
            )
        ).scalar()
        values = asdict(row)
        values["measured_at"] = as_utc(row.measured_at)
        if existing is None:
            session.add(Measurement(device_id=device_id, problem_id=problem_id, **values))
        else:
            for name, value in values.items():
                setattr(existing, name, value)
    session.flush()


def list_results(
    *,
    session: Session,
    filters: Mapping[str, Any] | None = None,
    limit: int = 100,
    offset: int = 0,
) -> tuple[int, list[dict[str, Any]]]:
    """Stored measurements joined with their problem and device, newest first, paginated.

    `filters` may name any problem field, `algorithm`, `status`, `config`, or `device`
    (a fingerprint, or a prefix of one of at least 8 characters). Returns (total, page).
    """
    filters = dict(filters or {})
    query = select(Measurement, Problem, Device).join(
        Problem, Measurement.problem_id == Problem.id
    ).join(Device, Measurement.device_id == Device.id)
    conditions: list[ColumnElement[bool]] = []
    for name, value in filters.items():
        if value is None:
            continue
        if name not in (*PROBLEM_FIELDS, "algorithm", "status", "config", "device"):
            raise ValueError(f"unknown results filter {name!r}")
        if (isinstance(value, str) and "\x00" in value) or (
            name in PROBLEM_FIELDS and _out_of_range({name: value}) is not None
        ):
            # Never stored: NUL in text (PostgreSQL refuses it even as a parameter), or an
            # integer too large for its column.
            conditions.append(false())
        elif name in PROBLEM_FIELDS:
            conditions.append(getattr(Problem, name) == value)
        elif name in ("algorithm", "status", "config"):
            conditions.append(getattr(Measurement, name) == value)
        elif name == "device":
            # autoescape: '%' and '_' in a prefix are characters, not LIKE wildcards.
            conditions.append(Device.fingerprint.startswith(str(value), autoescape=True))
        else:
            raise ValueError(f"unknown results filter {name!r}")
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
