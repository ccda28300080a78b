"""What a tuning answers: one result per candidate, with where the answer came from."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
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


#: Medians closer than this fraction are a tie whatever the spread (clock and timer noise).
TIE_REL = 0.02
#: ... and never a tie beyond this fraction, however wide a measured spread.
TIE_MAX_REL = 0.10


def within_noise(fast: AlgorithmResult, slow: AlgorithmResult) -> bool:
    """Whether `slow`'s median is indistinguishable from `fast`'s.

    Within the wider of their measured spreads (interquartile ranges) or 2%, whichever is
    more, but never beyond 10%: a wide spread must not hand the pick to a slow candidate.
    """
    if fast.time_ms is None or slow.time_ms is None:
        return False
    spread = max(fast.spread_ms or 0.0, slow.spread_ms or 0.0)
    noise = min(max(TIE_REL * fast.time_ms, spread), TIE_MAX_REL * fast.time_ms)
    return slow.time_ms - fast.time_ms <= noise


def rank(results: list[AlgorithmResult]) -> list[AlgorithmResult]:
    """Fastest usable first, then the rest in registry order (cudnnFind's ordering).

    Among the usable ones within noise of the fastest, the one needing the least workspace
    goes first, its `note` saying so.
    """
    usable = sorted((r for r in results if r.usable), key=lambda r: r.time_ms or 0.0)
    return _prefer_less_workspace(usable) + [r for r in results if not r.usable]


def _prefer_less_workspace(usable: list[AlgorithmResult]) -> list[AlgorithmResult]:
    if len(usable) < 2:
        return usable
    fastest = usable[0]
    lean = min((r for r in usable if within_noise(fastest, r)),
               key=lambda r: (r.workspace_bytes, r.time_ms or 0.0))
    if lean.workspace_bytes >= fastest.workspace_bytes:
        return usable
    why = (f"within noise of {fastest.algorithm}/{fastest.config} ({lean.time_ms:.4g} vs "
           f"{fastest.time_ms:.4g} ms): chosen for less workspace ({lean.workspace_bytes:,} "
           f"vs {fastest.workspace_bytes:,} bytes)")
    # Ranking a ranking again (per_algorithm does) must not repeat the note.
    note = why if not lean.note else lean.note if why in lean.note else f"{lean.note}; {why}"
    return [replace(lean, note=note)] + [r for r in usable if r is not lean]
