"""A run's GPU calls written down instead of made (algorithms.cuda._replay's dry runs).

While a thread records, the two places where every replayable algorithm's GPU work leaves
Python, a prepared kernel launch (_launch.enqueue) and a cuBLAS call
(_cublas.gemm_strided_batched), append the call to the thread's Recording and return without
enqueueing anything. A call that cannot be written down as a function and its plain
arguments (a kernel launched through its own call) refuses the recording instead, and is
not made either: a dry run's operand addresses are not real.

A names-only recording (algorithms.cuda._ahead) goes further: a launch writes down its
kernel's file and name expression before that kernel is even looked up, so the dry run
compiles nothing and lists the instances a run needs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


class _Stream:
    """Where a launch takes the stream it is enqueued on (filled in when replayed)."""

    def __repr__(self) -> str:
        return "STREAM"


#: The stream argument of a recorded launch.
STREAM = _Stream()


@dataclass
class Recording:
    """The calls of one dry run, in stream order: (function, positional arguments)."""

    calls: list[tuple[Callable[..., None], tuple[Any, ...]]] = field(default_factory=list)
    #: Why the run cannot be replayed (the first such call), or None.
    refused: str | None = None
    #: Only the kernels launched are wanted (file, name expression; `kernels`), not calls.
    names_only: bool = False
    kernels: list[tuple[str, str]] = field(default_factory=list)

    def add(self, function: Callable[..., None], args: tuple[Any, ...]) -> None:
        """Write down one call."""
        self.calls.append((function, args))

    def refuse(self, why: str) -> None:
        """Mark the run as not replayable, keeping the first reason."""
        if self.refused is None:
            self.refused = why


_local = threading.local()


def active() -> Recording | None:
    """The calling thread's Recording, or None when its calls go to the GPU."""
    return getattr(_local, "recording", None)


@contextmanager
def recording(names_only: bool = False) -> Iterator[Recording]:
    """Record the calling thread's GPU calls in the block, and make none (`names_only`: only
    the kernels launched, none looked up)."""
    found, previous = Recording(names_only=names_only), active()
    _local.recording = found
    try:
        yield found
    finally:
        _local.recording = previous
