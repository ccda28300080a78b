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
from different devices are never mixed into one ranking.

4. Nothing measured for this problem anywhere usable: PREDICTED, from this device's own
   measurements of the nearest problem of the same kind (same filter size, strides,
   dilations, dtype and grouping; nearest in log-space over n, c, h, w, k), with each time
   scaled by the ratio of FLOP counts. A prediction is a ranking to start from, not a
   measurement: re-tune where it matters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from algorithms.problem import ConvProblem
from db.rows import MeasurementRow
from tuner.results import SAME_ARCHITECTURE, SAME_MODEL


def _newest(rows: Sequence[MeasurementRow]) -> float:
    return max(r.measured_at for r in rows).timestamp() if rows else 0.0


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


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
    kind, name, arch = here.get("kind"), _text(here.get("name")), _text(here.get("arch"))
    model_id = _text(here.get("model_id"))
    units = _units(here.get("units"))
    same_model, same_arch = [], []
    for device, rows in others:
        if device.get("kind") != kind or not rows:
            continue
        info = device.get("info") or {}
        # An unknown (empty or missing) model or architecture is no evidence of sameness:
        # two hosts whose CPU model could not be read are not the same model. A CPU's name
        # can be a hypervisor's ("AMD EPYC" for Milan and Genoa alike): where this device
        # says its model_id, the other must say the same one.
        if (name and _text(device.get("name")) == name
                and (not model_id or _text(info.get("model_id", device.get("model_id")))
                     == model_id)):
            agree = sum(1 for field, value in here.items() if info.get(field) == value)
            same_model.append(((-agree, -_newest(rows)), device, rows))
        elif arch and _text(device.get("arch")) == arch:
            distance = abs(_units(device.get("units")) - units)
            same_arch.append(((distance, -_newest(rows)), device, rows))
    same_model.sort(key=lambda t: t[0])
    same_arch.sort(key=lambda t: t[0])
    return [(SAME_MODEL, d, r) for _, d, r in same_model] + [
        (SAME_ARCHITECTURE, d, r) for _, d, r in same_arch
    ]


#: Fields a stand-in problem must share with the one predicted for: they decide which
#: algorithms apply and how they behave; the remaining sizes only scale the work.
SAME_KIND_FIELDS = (
    "r", "s", "stride_h", "stride_w", "dilation_h", "dilation_w", "dtype", "math", "direction",
)


def same_kind(problem: ConvProblem) -> dict[str, Any]:
    """The field values a stand-in problem must share with `problem` (see SAME_KIND_FIELDS)."""
    key = problem.key()
    return {f: key[f] for f in SAME_KIND_FIELDS}


def _grouping(key: Mapping[str, Any]) -> str:
    groups = key["groups"]
    if groups == 1:
        return "dense"
    return "depthwise" if groups == key["c"] == key["k"] else "grouped"


def nearest_problems(
    problem: ConvProblem,
    measured: Sequence[tuple[Mapping[str, Any], Sequence[MeasurementRow]]],
) -> list[tuple[Mapping[str, Any], Sequence[MeasurementRow]]]:
    """Measured problems of the same kind and grouping as `problem`, nearest first.

    Distance is the sum of |log(a / b)| over n, c, h, w and k; `problem` itself is skipped.
    """
    key = problem.key()
    ranked = []
    for other, rows in measured:
        if dict(other) == key or _grouping(other) != _grouping(key):
            continue
        distance = sum(abs(math.log(other[f] / key[f])) for f in ("n", "c", "h", "w", "k"))
        ranked.append((distance, other, rows))
    ranked.sort(key=lambda t: t[0])
    return [(other, rows) for _, other, rows in ranked]


def flops_ratio(problem: ConvProblem, other: Mapping[str, Any]) -> float:
    """How many times the work of `other` `problem` is (direct-convolution FLOPs)."""
    return problem.flops / ConvProblem.from_key(dict(other)).flops
