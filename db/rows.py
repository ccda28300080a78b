"""The store's plain values: one measurement row, UTC times, canonical JSON, column bounds.

Every bound here is derived from the models (db.models), so the HTTP schemas, the bundle
validator and the queries share one definition.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import String
from sqlalchemy.sql.elements import KeyedColumnElement

from db.models import Device, Measurement

#: The largest value of an INTEGER column (PostgreSQL refuses larger ones; SQLite would not).
INT32_MAX = 2**31 - 1
#: The largest value of a BIGINT column.
INT64_MAX = 2**63 - 1


def _length(column: KeyedColumnElement[Any]) -> int:
    kind = column.type
    assert isinstance(kind, String) and kind.length is not None, column
    return int(kind.length)


#: Longest text each bounded column holds.
DEVICE_TEXT_LIMITS: dict[str, int] = {
    name: _length(Device.__table__.c[name]) for name in ("kind", "name", "arch")
}
MEASUREMENT_TEXT_LIMITS: dict[str, int] = {
    name: _length(Measurement.__table__.c[name])
    for name in ("algorithm", "config", "impl_hash", "status", "tuner_version")
}
#: Longest failure text a measurement keeps: the column is unbounded (Text), so this is the
#: tuner's own cut, which bundles are held to as well.
ERROR_TEXT_LIMIT = 2000
FINGERPRINT_LIMIT = _length(Device.__table__.c["fingerprint"])


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


ROW_FIELDS: tuple[str, ...] = tuple(MeasurementRow.__dataclass_fields__)


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


def plain_row(values: dict[str, Any]) -> MeasurementRow:
    """A MeasurementRow from column values (measured_at made timezone-aware UTC)."""
    # SQLite drops the zone (we only store UTC); PostgreSQL answers in the session's zone.
    values["measured_at"] = as_utc(values["measured_at"])
    return MeasurementRow(**values)


def measurement_row(m: Measurement) -> MeasurementRow:
    """A stored Measurement as plain values."""
    return plain_row({f: getattr(m, f) for f in ROW_FIELDS})
