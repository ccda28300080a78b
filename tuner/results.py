"""What a tuning answers: one result per candidate, with where the answer came from."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

# Status values are stored in the database: add, never rename.
OK = "ok"
UNSUPPORTED = "unsupported"
OVER_WORKSPACE_LIMIT = "over_workspace_limit"
FAILED = "failed"
WRONG_RESULT = "wrong_result"
STATUSES = (OK, UNSUPPORTED, OVER_WORKSPACE_LIMIT, FAILED, WRONG_RESULT)

# Where a result came from.
FRESH = "fresh"  # measured by this call
MEASURED_HERE = "measured here"  # from the database, measured on this exact device
NOT_MEASURED = "not measured"  # unsupported or over the limit: nothing to time
# Borrowed from another device by a mode="cached" lookup (tuner.lookup): re-tune if it matters.
SAME_MODEL = "same model"  # the same GPU/CPU model with other driver or library versions
SAME_ARCHITECTURE = "same architecture"  # same compute capability, nearest SM count
PREDICTED = "predicted"  # scaled from this device's nearest measured problem


@dataclass(frozen=True)
class AlgorithmResult:
    """One algorithm's answer for one problem on one device (like cudnnConvolutionFwdAlgoPerf)."""

    algorithm: str
    config: str
    status: str
    time_ms: float | None
    workspace_bytes: int
    max_error: float | None = None
    rel_error: float | None = None
    spread_ms: float | None = None
    reps: int = 0
    error: str | None = None
    source: str = NOT_MEASURED
    device: str = ""
    measured_at: str | None = None
    note: str | None = None  # e.g. which measured problem a prediction was scaled from

    @property
    def usable(self) -> bool:
        """Measured, correct, and so eligible to be chosen."""
        return self.status == OK and self.time_ms is not None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly fields (all scalars: a shallow copy, much cheaper than asdict)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def rank(results: list[AlgorithmResult]) -> list[AlgorithmResult]:
    """Fastest usable first, then the rest in registry order (cudnnFind's ordering)."""
    usable = sorted((r for r in results if r.usable), key=lambda r: r.time_ms or 0.0)
    return usable + [r for r in results if not r.usable]
