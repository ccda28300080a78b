"""What a tuning answers: one result per candidate, with where the answer came from, and
how results rank."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from algorithms.problem import ConvProblem
from tuner.errors import NoUsableAlgorithm

# Status values are stored in the database: add, never rename.
OK = "ok"
UNSUPPORTED = "unsupported"
OVER_WORKSPACE_LIMIT = "over_workspace_limit"
FAILED = "failed"
WRONG_RESULT = "wrong_result"
STATUSES = (OK, UNSUPPORTED, OVER_WORKSPACE_LIMIT, FAILED, WRONG_RESULT)


def within(rel_error: float, limit: float) -> bool:
    """Whether a verified run's relative error passes `limit` (its tolerance): OK, else
    WRONG_RESULT (tuner.measuring decides so, tuner.bundle_records checks imports by it)."""
    return math.isfinite(rel_error) and rel_error <= limit

# Where a result came from.
FRESH = "fresh"  # measured by this call
MEASURED_HERE = "measured here"  # from the database, measured on this exact device
NOT_MEASURED = "not measured"  # unsupported or over the limit: nothing to time
# Borrowed from another device by a mode="cached" lookup (tuner.lookup): re-tune if it matters.
SAME_MODEL = "same model"  # the same GPU/CPU model with other driver or library versions
SAME_ARCHITECTURE = "same architecture"  # same compute capability, nearest SM count
PREDICTED = "predicted"  # from the cost model, else scaled from the nearest measured problem


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
    #: A model's prediction only: the share of its ensemble that puts this configuration
    #: within 10% of the fastest (for the first, about the chance that it is); see
    #: tuner.model. None for measurements and for FLOP-scaled predictions.
    confidence: float | None = None

    @property
    def usable(self) -> bool:
        """Measured, correct, and so eligible to be chosen."""
        return self.status == OK and self.time_ms is not None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly fields (all scalars: a shallow copy, much cheaper than asdict)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: Medians closer than this fraction are a tie: the whole band in which the tuner prefers
#: less workspace. It was the floor of a wider band (two standard errors of the medians'
#: difference, up to 5%; before that, other wider rules), but ties beyond 1% cost more than
#: they were apart: of the 46 workspace tie-breaks bench_tuner recorded 1% or more apart
#: (every run kept in benchmarks/results, H100, H200 and CPU, 2026-11-23 to 11-29), 20
#: cost over 5% against the isolated re-measurement (median 4.7%; CPU res3.3x3 b8: 3.5%
#: apart, 6.6% lost); of the 14 within 1%, one did (median 0.7%). What a tie-break risks
#: is how tuning and a run alone differ, which the samples' own spread does not measure
#: (`benchmarks/tuner_ratios.py --ties`; BENCHMARKS.md, "Workspace ties").
TIE_REL = 0.01


def within_noise(fast: AlgorithmResult, slow: AlgorithmResult) -> bool:
    """Whether `slow`'s median is within TIE_REL (1%) of `fast`'s, whatever their spreads."""
    if fast.time_ms is None or slow.time_ms is None:
        return False
    return slow.time_ms - fast.time_ms <= TIE_REL * fast.time_ms


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
    # Ranking a ranking again must not repeat the note.
    note = why if not lean.note else lean.note if why in lean.note else f"{lean.note}; {why}"
    return [replace(lean, note=note)] + [r for r in usable if r is not lean]


def per_algorithm(ranked: list[AlgorithmResult]) -> list[AlgorithmResult]:
    """One result per algorithm (its most telling configuration) of a `rank` output, in its
    order: the usable ones as ranked, then the rest.

    Not ranked again: the tie rule, applied anew to the algorithms' representatives, chained
    (a representative within 1% of another's within 1% of the fastest), so the first result
    was not the best's algorithm, which plans run (a review of the tuner, 2026-11-30).
    """
    best: dict[str, AlgorithmResult] = {}
    for result in ranked:  # ranked: the first seen per algorithm is its best
        current = best.get(result.algorithm)
        if current is None or _more_telling(result, current):
            best[result.algorithm] = result
    kept = {id(result) for result in best.values()}
    usable = [result for result in ranked if result.usable and id(result) in kept]
    return usable + [result for result in best.values() if not result.usable]


def best_of(
    ranked: list[AlgorithmResult], problem: ConvProblem, device: str,
    workspace_limit: int | None,
) -> AlgorithmResult:
    """The first of a ranking if usable; NoUsableAlgorithm naming every status otherwise."""
    if ranked and ranked[0].usable:
        return ranked[0]
    summary = "; ".join(
        f"{r.algorithm}{'/' + r.config if r.config else ''}: {r.status}"
        + (f" ({r.error})" if r.error else "")
        for r in ranked
    )
    raise NoUsableAlgorithm(
        f"no usable algorithm for {problem.describe()} on {device} "
        f"with workspace_limit={workspace_limit}: {summary}"
    )


def _more_telling(new: AlgorithmResult, current: AlgorithmResult) -> bool:
    """Whether `new` represents its algorithm better than `current` does.

    Usable beats unusable, faster beats slower; among unusable ones a measured failure
    says more than "over the limit", and the smallest over-limit workspace says the most.
    """
    if current.usable or (not new.usable and current.status in (FAILED, WRONG_RESULT)):
        return False
    if new.usable:
        return True
    if new.status in (FAILED, WRONG_RESULT):
        return True
    return new.workspace_bytes < current.workspace_bytes
