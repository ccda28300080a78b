"""What the tuner needs from a device: buffers, random data, timing, identity.

Each backend package implements `Runtime` in its `runtime.py`; the tuner only sees this
protocol and the timing policy it passes in."""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class TimingPolicy:
    """How long and how often to time one candidate."""

    warmup: int = 1  # untimed runs first: compilation, plans, pool growth stay out
    budget_s: float = 0.25  # stop repeating once this much time has been spent timing
    min_reps: int = 3
    max_reps: int = 50

    @classmethod
    def from_env(cls) -> TimingPolicy:
        """Defaults, overridden by $CONVTUNE_WARMUP, $CONVTUNE_BUDGET_S, $CONVTUNE_MIN_REPS
        and $CONVTUNE_MAX_REPS (quick fleet passes, fast tests)."""
        base = cls()
        try:
            return cls(
                warmup=int(os.environ.get("CONVTUNE_WARMUP", base.warmup)),
                budget_s=float(os.environ.get("CONVTUNE_BUDGET_S", base.budget_s)),
                min_reps=int(os.environ.get("CONVTUNE_MIN_REPS", base.min_reps)),
                max_reps=int(os.environ.get("CONVTUNE_MAX_REPS", base.max_reps)),
            )
        except ValueError as exc:
            raise ValueError(f"bad CONVTUNE_* timing variable: {exc}") from None

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.min_reps < 1 or self.max_reps < self.min_reps:
            raise ValueError(f"invalid timing policy {self}")
        if self.budget_s < 0:
            raise ValueError(f"timing budget must be non-negative, got {self.budget_s}")


@dataclass(frozen=True)
class Timing:
    """Per-run times of one candidate, in milliseconds, and their summary."""

    times_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        """Median run time."""
        return float(statistics.median(self.times_ms))

    @property
    def spread_ms(self) -> float:
        """Interquartile range (0 for fewer than 4 runs: too few to say)."""
        if len(self.times_ms) < 4:
            return 0.0
        q = statistics.quantiles(self.times_ms, n=4)
        return float(q[2] - q[0])

    @property
    def min_ms(self) -> float:
        """Fastest run."""
        return float(min(self.times_ms))


class Runtime(Protocol):
    """One device as the tuner and `convolve` see it (a backend module implements it)."""

    backend: str  # the registry backend: "cpu" or "cuda"
    device: str  # canonical device string: "cpu" or "cuda:N"

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any: ...

    def workspace(self, nbytes: int) -> Any: ...

    def random(self, shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> Any: ...

    def to_numpy(self, array: Any, dtype: str | None = None) -> np.ndarray:
        """A host copy; `dtype` names what storage arrays hold (bfloat16 bits on CuPy)."""
        ...

    def storage_dtype(self, dtype: str) -> str:
        """The array dtype that holds a problem's `dtype` here (CuPy has no bfloat16)."""
        ...

    def adopt(self, array: Any) -> Any | None: ...

    def contiguous(self, array: Any, dtype: str) -> Any: ...

    def synchronize(self) -> None: ...

    def fault(self) -> str | None:
        """Why the device can run no more work (a sticky CUDA error), or None if it can."""
        ...

    def activate(self) -> AbstractContextManager[None]: ...

    def lane(self) -> Hashable:
        """What work enqueued now is ordered on: the thread (CPU) or current stream (GPU).

        Plans keep one workspace per lane, so that lanes running at once never share one.
        """
        ...

    def caller_stream(self, array: Any) -> AbstractContextManager[None]:
        """Make the stream the caller of `array` works on current (torch's, for a tensor)."""
        ...

    def elapsed_ms(self, fn: Callable[[], None]) -> float:
        """Run `fn` once and say how long its work took (waits for that work only)."""
        ...

    def time(self, fn: Callable[[], None], policy: TimingPolicy) -> Timing: ...

    def fingerprint(self) -> dict[str, Any]: ...

    def memory_bytes(self) -> int | None: ...
