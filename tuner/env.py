"""Numbers from the environment ($CONVTUNE_*), with one-line errors naming the variable."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

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
