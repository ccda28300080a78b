"""Numbers from the environment ($CONVTUNE_*), with one-line errors naming the variable."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TypeVar

from algorithms.runtime import TimingPolicy

N = TypeVar("N", int, float)


def env_number(name: str, default: N, kind: Callable[[str], N], *, positive: bool = False) -> N:
    """$name parsed by `kind` (int or float), else `default`; ValueError when malformed.

    Values must be non-negative, or positive when `positive` is set.
    """
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"${name} must be {what}, got {text!r}") from None
    if not math.isfinite(value):  # float("nan") and float("inf") parse
        raise ValueError(f"${name} must be finite, got {text!r}")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"${name} must be {'positive' if positive else 'non-negative'}, "
                         f"got {text!r}")
    return value


#: Seconds a client has to send a request's headers, from its first byte or connecting.
HEADER_TIMEOUT_ENV = "CONVTUNE_HEADER_TIMEOUT_S"
#: Seconds a client has to send a request's whole body, once its headers are in.
BODY_TIMEOUT_ENV = "CONVTUNE_BODY_TIMEOUT_S"


def http_timeouts() -> tuple[float, float]:
    """(header, body) timeouts of `convtune serve`, from the environment (10 s and 120 s)."""
    return (env_number(HEADER_TIMEOUT_ENV, 10.0, float, positive=True),
            env_number(BODY_TIMEOUT_ENV, 120.0, float, positive=True))


def timing_policy() -> TimingPolicy:
    """TimingPolicy's defaults, overridden by $CONVTUNE_WARMUP, $CONVTUNE_BUDGET_S,
    $CONVTUNE_MIN_REPS, $CONVTUNE_MAX_REPS and $CONVTUNE_BATCH_BELOW_MS (quick fleet
    passes, fast tests); ValueError naming the variable that is wrong."""
    base = TimingPolicy()
    min_reps = env_number("CONVTUNE_MIN_REPS", base.min_reps, int, positive=True)
    max_reps = env_number("CONVTUNE_MAX_REPS", base.max_reps, int, positive=True)
    if max_reps < min_reps:
        raise ValueError(f"$CONVTUNE_MAX_REPS ({max_reps}) must be at least "
                         f"$CONVTUNE_MIN_REPS ({min_reps})")
    return TimingPolicy(
        warmup=env_number("CONVTUNE_WARMUP", base.warmup, int),
        budget_s=env_number("CONVTUNE_BUDGET_S", base.budget_s, float),
        min_reps=min_reps, max_reps=max_reps,
        batch_below_ms=env_number("CONVTUNE_BATCH_BELOW_MS", base.batch_below_ms, float),
    )
