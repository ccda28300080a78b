"""Deleting measurements a store no longer needs: of older code, older than a date, of a
device. Nothing else is touched (devices, problems, claims and jobs stay)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, delete, false, func, not_, or_, select, true
from sqlalchemy.orm import Session

from db.find import lock_for_write
from db.models import Device, Measurement


@dataclass(frozen=True)
class Pruned:
    """What a prune matched among the store's measurements, and whether it deleted them."""

    matched: int
    total: int
    deleted: bool


def _stale(current: Mapping[str, Mapping[str, str]]) -> ColumnElement[bool]:
    """Rows of a device kind in `current` whose (algorithm, hash) is not among its pairs:
    older code, or an algorithm that kind no longer has. Kinds not in `current` never."""
    kinds = []
    for kind, hashes in current.items():
        pairs = [and_(Measurement.algorithm == name, Measurement.impl_hash == digest)
                 for name, digest in hashes.items()]
        kinds.append(and_(Device.kind == kind, not_(or_(false(), *pairs))))
    return or_(false(), *kinds)


def prune_measurements(
    *,
    session: Session,
    device: str | None = None,
    before: datetime | None = None,
    current: Mapping[str, Mapping[str, str]] | None = None,
    delete_rows: bool = False,
) -> Pruned:
    """Measurements that match every criterion given: of devices whose fingerprint starts
    with `device`, measured before `before`, stale against `current` ({device kind:
    {algorithm: implementation hash}}); deleted when `delete_rows` (a write: the store's
    generation moves, so every process's answer cache drops what it kept)."""
    conditions: list[ColumnElement[bool]] = [true()]
    if device is not None:
        # autoescape: '%' and '_' in a prefix are characters, not LIKE wildcards.
        conditions.append(Device.fingerprint.startswith(device, autoescape=True))
    if before is not None:
        conditions.append(Measurement.measured_at < before)
    if current is not None:
        conditions.append(_stale(current))
    if delete_rows:
        lock_for_write(session=session)  # counted before the count: no write in between
    total = session.execute(select(func.count()).select_from(Measurement)).scalar_one()
    ids = (select(Measurement.id).join(Device, Measurement.device_id == Device.id)
           .where(and_(*conditions)))
    matched = session.execute(select(func.count()).select_from(ids.subquery())).scalar_one()
    if delete_rows and matched:
        session.execute(delete(Measurement).where(Measurement.id.in_(ids)),
                        execution_options={"synchronize_session": False})
    return Pruned(int(matched), int(total), delete_rows)
