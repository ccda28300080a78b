"""Lanes: what per-stream resources (plans' workspaces, their replays, cuBLAS's workspaces)
are kept under, one per stream that work may run on at once. A lane is its stream's handle
(an int), or (handle, thread) for the per-thread default stream; a replay launches on the
handle (_replay.Replayer).

A lane's resources are made on its first use, which may come inside a CUDA graph capture:
PyTorch's own pattern warms a model up on one stream and captures it on another
(torch.cuda.graph's). Their allocations run with this thread's capture mode relaxed
(`relaxed`), as PyTorch's allocator runs cudaMalloc: the global mode torch.cuda.graph
captures in refuses an allocation, and the refusal ends the capture."""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, cast

log = logging.getLogger(__name__)

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


def stream_captures(cupy: Any, stream: int) -> bool:
    """Whether the stream with handle `stream` is capturing a CUDA graph now; no query for
    the legacy default stream."""
    return stream not in LEGACY_STREAMS and bool(cupy.cuda.runtime.streamIsCapturing(stream))


#: CU_STREAM_CAPTURE_MODE_RELAXED (cuda.h): this thread may make "potentially unsafe" calls
#: (cudaMalloc among them) while a stream captures.
_RELAXED = 2
#: CUDA_ERROR_NOT_INITIALIZED (cuda.h): the driver has not been initialised (cuInit).
_NOT_INITIALIZED = 3


@functools.cache
def _libcuda() -> Any:
    """The CUDA driver library, or None where there is none (then nothing captures)."""
    try:
        return ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
    except OSError:
        return None


def _exchange(mode: int) -> int:
    """cuThreadExchangeStreamCaptureMode: this thread's capture mode set to `mode`; the
    previous one returned. Where the call is missing or fails, the mode stays as it was
    (said once in the log): an allocation inside a global-mode capture then fails with
    CUDA's own error, as before this existed, and everything outside a capture works."""
    function = getattr(_libcuda(), "cuThreadExchangeStreamCaptureMode", None)
    if function is None:
        return mode
    value = ctypes.c_int(mode)
    status = function(ctypes.byref(value))
    if status == 0:
        return value.value
    if status != _NOT_INITIALIZED:  # before cuInit nothing captures: nothing to say
        _failed(status)
    return mode


@functools.cache
def _failed(status: int) -> None:
    log.warning("cuThreadExchangeStreamCaptureMode failed (CUresult %d): allocations "
                "inside a CUDA graph capture may end it", status)


#: How `relaxed` sets the mode (tests put a stand-in here).
exchange_capture_mode: Callable[[int], int] = _exchange


@contextmanager
def relaxed() -> Iterator[None]:
    """This thread's capture mode relaxed for the block: allocations that outlive it (a
    lane's workspace, cuBLAS's handle and workspace) work inside a capture of any mode, and
    cost two driver calls outside one."""
    previous = exchange_capture_mode(_RELAXED)
    try:
        yield
    finally:
        exchange_capture_mode(previous)


def lane_memory(cupy: Any, nbytes: int, stream: int) -> Any:
    """A MemoryPointer to `nbytes` for a resource `stream`'s lane keeps (a workspace),
    allocated with the capture mode relaxed: CuPy's allocator's, but cudaMalloc's own while
    the stream captures a CUDA graph. CuPy's allocator may be an asynchronous pool
    (cupy.cuda.MemoryAsyncPool), whose cudaMallocAsync inside a capture becomes a node of
    the graph, memory that exists only while the graph runs, so the resource would be gone
    at the next eager call and the graph could not be launched twice with the allocation
    unfreed. Freed when the pointer is (never, for what a graph captured: tuner.plans keeps
    it)."""
    with relaxed():
        if stream_captures(cupy, stream):
            return cupy.cuda.MemoryPointer(cupy.cuda.Memory(nbytes), 0)
        return cupy.cuda.alloc(nbytes)


class CaptureRefused(ValueError):
    """A lane's resource (a cuFFT plan) would be set up while its stream captures a CUDA
    graph, where making it would become part of the graph or end the capture. Passed on,
    never kept as a verdict: the same call after a run outside the capture goes through
    (algorithms.cuda._replay.record)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} cannot be set up while its stream captures a CUDA graph: "
                         "run the plan once on that stream before capturing there")

