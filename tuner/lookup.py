"""Answers across hardware: which other device's measurements best stand in for this one's.

The order, best first (MIOpen's find-db does the same with its closest-CU-count fallback):

1. this exact device fingerprint: `tuner.results.MEASURED_HERE` (handled by the tuner);
2. the same model (same kind and name) with other software (driver, runtime, BLAS...):
   SAME_MODEL, the device whose fingerprint fields agree most with this one's first,
   then the most recently measured;
3. the same architecture (same kind and arch, e.g. compute capability "9.0") with the
   nearest unit count (SMs, cores): SAME_ARCHITECTURE, ties to the most recently measured.

Only measurements made by the current implementations are ever considered (the store
filters by implementation hash), and one answer always comes from a single device: times
from different devices are never mixed into one ranking. PREDICTED is reserved for an
answer chosen by a model when no device matches; no predictor exists yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from db.queries import MeasurementRow
from tuner.results import PREDICTED, SAME_ARCHITECTURE, SAME_MODEL

#: Sources that are not this device's own measurements: a caller may want to re-tune.
BORROWED_SOURCES = (SAME_MODEL, SAME_ARCHITECTURE, PREDICTED)


def _newest(rows: Sequence[MeasurementRow]) -> float:
    return max(r.measured_at for r in rows).timestamp() if rows else 0.0


def _units(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def fallback_order(
    here: Mapping[str, Any],
    others: Sequence[tuple[Mapping[str, Any], Sequence[MeasurementRow]]],
) -> list[tuple[str, Mapping[str, Any], Sequence[MeasurementRow]]]:
    """Other devices that may stand in for `here` (fingerprint info), best first.

    `others` are (device, rows) pairs as `db.queries.load_fleet_measurements` returns
    them; each comes back as (source, device, rows). Devices of another kind, or of
    another model and architecture, are dropped.
    """
    kind, name, arch = here.get("kind"), here.get("name"), str(here.get("arch", ""))
    units = _units(here.get("units"))
    same_model, same_arch = [], []
    for device, rows in others:
        if device.get("kind") != kind or not rows:
            continue
        info = device.get("info") or {}
        if device.get("name") == name:
            agree = sum(1 for field, value in here.items() if info.get(field) == value)
            same_model.append(((-agree, -_newest(rows)), device, rows))
        elif str(device.get("arch", "")) == arch:
            distance = abs(_units(device.get("units")) - units)
            same_arch.append(((distance, -_newest(rows)), device, rows))
    same_model.sort(key=lambda t: t[0])
    same_arch.sort(key=lambda t: t[0])
    return [(SAME_MODEL, d, r) for _, d, r in same_model] + [
        (SAME_ARCHITECTURE, d, r) for _, d, r in same_arch
    ]
