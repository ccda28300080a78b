"""Stand-ins for the GPU backend's host calls from several threads and streams.

A stand-in libcublas in Python keeps each handle's state (its stream and workspace, as
cublasSetStream and cublasSetWorkspace leave them) and writes down, for every GEMM, the
stream and workspace of the handle it was given beside the stream its caller had current.
Its cublasSetStream and GEMM let other threads run (a short sleep), where real ones would be
interrupted at any point anyway. CaptureModes stands in for each thread's CUDA graph capture
mode. A test module that uses them imports the autouse fixtures `capture_modes` and
`no_cublaslt` from here, which puts them in force for each of its tests.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from algorithms.cuda import _cublas, _cublaslt, _lanes

#: Long enough that a waiting thread takes over (a thread holds the GIL for 5 ms else).
_YIELD_S = 2e-5


@dataclass
class _HandleState:
    stream: int = 0  # a new handle runs on the legacy default stream
    workspace: int | None = None  # None: cuBLAS's own


class CaptureModes:
    """cuThreadExchangeStreamCaptureMode over each thread's mode (0: global, CUDA's own)."""

    def __init__(self) -> None:
        self.local = threading.local()

    def current(self) -> int:
        return int(getattr(self.local, "mode", 0))

    def exchange(self, mode: int) -> int:
        previous = self.current()
        self.local.mode = mode
        return previous


MODES = CaptureModes()


@pytest.fixture(autouse=True)
def capture_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MODES, "local", threading.local())
    monkeypatch.setattr(_lanes, "exchange_capture_mode", MODES.exchange)


@dataclass
class StandInCublas:
    """The entry points _Cublas calls, over handles kept in Python."""

    handles: dict[int, _HandleState] = field(default_factory=dict)
    #: (stream the caller had current, the handle's stream, the handle's workspace)
    gemms: list[tuple[int, int, int | None]] = field(default_factory=list)
    current: threading.local = field(default_factory=threading.local)
    capturing: set[int] = field(default_factory=set)  # streams capturing a CUDA graph
    contexts: list[int] = field(default_factory=list)  # threads that made a context current
    #: The calling thread's capture mode at each cublasCreate and workspace allocation.
    modes: list[int] = field(default_factory=list)
    #: Where each workspace came from: CuPy's allocator ("pool") or cudaMalloc itself.
    allocators: list[str] = field(default_factory=list)

    def cublasCreate_v2(self, out: Any) -> int:  # cuBLAS's own names, as ctypes finds them
        self.modes.append(MODES.current())
        handle = 0x1000 + len(self.handles)
        self.handles[handle] = _HandleState()
        out._obj.value = handle
        return 0

    def cublasSetPointerMode_v2(self, handle: Any, mode: int) -> int:
        return 0

    def cublasSetMathMode(self, handle: Any, mode: int) -> int:
        return 0

    def cublasSetStream_v2(self, handle: Any, stream: Any) -> int:
        time.sleep(_YIELD_S)  # another thread runs here
        self.handles[handle.value].stream = stream.value or 0
        return 0

    def cublasSetWorkspace_v2(self, handle: Any, workspace: Any, nbytes: Any) -> int:
        self.handles[handle.value].workspace = workspace.value
        return 0

    def __post_init__(self) -> None:
        def gemm(handle: Any, *args: Any) -> int:
            time.sleep(_YIELD_S)
            state = self.handles[handle.value]
            self.gemms.append((self.current.stream, state.stream, state.workspace))
            return 0

        # A function, not a method: _Cublas sets its restype, as on a ctypes function.
        self.cublasGemmStridedBatchedEx = gemm


def cublas_over(lib: StandInCublas) -> _cublas._Cublas:
    """A _Cublas on `lib` with a stand-in CuPy: device 0, each thread's current stream
    as the stand-in has it, allocations at new addresses; the threads that made a CUDA
    context current go into lib.contexts."""
    addresses = itertools.count(1 << 40, 1 << 30)

    def allocator(name: str) -> Callable[[int], SimpleNamespace]:
        def alloc(nbytes: int) -> SimpleNamespace:
            lib.modes.append(MODES.current())
            lib.allocators.append(name)
            return SimpleNamespace(ptr=next(addresses))
        return alloc

    cupy = SimpleNamespace(cuda=SimpleNamespace(
        runtime=SimpleNamespace(getDevice=lambda: 0,
                                streamIsCapturing=lambda ptr: int(ptr in lib.capturing)),
        get_current_stream=lambda: SimpleNamespace(ptr=lib.current.stream),
        alloc=allocator("pool"), Memory=allocator("cudaMalloc"),
        MemoryPointer=lambda memory, offset: memory))
    return _cublas._Cublas(cupy, lib=lib,
                           make_current=lambda: lib.contexts.append(threading.get_ident()))


def run_gemm(blas: _cublas._Cublas) -> None:
    blas.gemm("float32", "float32", 68, 0, 0, 8, 8, 8, _cublas._ONE["float32"], 1 << 20, 8,
              64, 2 << 20, 8, 64, _cublas._ZERO["float32"], 3 << 20, 8, 64, 1)


@pytest.fixture(autouse=True)
def no_cublaslt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_cublaslt.ENV, "0")
