"""Lanes: what per-stream resources (plans' workspaces, their replays, cuBLAS's workspaces)
are kept under, one per stream that work may run on at once. A lane is its stream's handle
(an int), or (handle, thread) for the per-thread default stream; a replay launches on the
handle (_replay.Replayer)."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import cast

#: cudaStreamPerThread (driver_types.h): one handle naming each thread's own default stream,
#: CuPy's current stream when CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1.
PER_THREAD_STREAM = 2


def lane_of(stream: int) -> Hashable:
    """The lane of the stream with handle `stream` as the calling thread sees it: the handle,
    and for the per-thread default stream the thread too (its one handle names another
    stream in each thread, and those run at once)."""
    return (stream, threading.get_ident()) if stream == PER_THREAD_STREAM else stream


#: The legacy default stream's handles (0, and cudaStreamLegacy): CUDA never captures it
#: (cudaStreamBeginCapture refuses it), so work there needs no capture query.
LEGACY_STREAMS = frozenset({0, 1})


def stream_of(lane: Hashable) -> int:
    """The stream handle a lane names (lane_of read backwards)."""
    return cast(int, lane[0] if isinstance(lane, tuple) else lane)


class CaptureRefused(ValueError):
    """A lane's resource (a plan's workspace, split K's counters, a cuBLAS workspace) would
    be set up while its stream captures a CUDA graph, where an allocation or a memset would
    end the capture or become part of it. Passed on, never kept as a verdict: the same call
    after a run outside the capture goes through (algorithms.cuda._replay.record)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} cannot be set up while its stream captures a CUDA graph: "
                         "run the plan once on that stream before capturing there")

