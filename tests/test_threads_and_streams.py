"""The GPU backend's host calls from several threads and streams: each GEMM must run on its
caller's stream with that stream's own workspace (algorithms.cuda._cublas), each thread and
stream transforms with plans of its own (algorithms.cuda.fft), and our own driver calls
make a thread's context current where the driver refuses them for want of one.

A stand-in libcublas in Python keeps each handle's state (its stream and workspace, as
cublasSetStream and cublasSetWorkspace leave them) and writes down, for every GEMM, the
stream and workspace of the handle it was given beside the stream its caller had current.
Its cublasSetStream and GEMM let other threads run (a short sleep), where real ones would be
interrupted at any point anyway.
"""

from __future__ import annotations

import gc
import itertools
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from algorithms.cuda import _cublas, _cublaslt, _lanes, _launch, _loader, fft
from algorithms.cuda._launch import INT32, POINTER
from tests.test_cuda_host_checks import _PlainFunction
from tests.test_launch import Recorder, _shape

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
def _capture_modes(monkeypatch: pytest.MonkeyPatch) -> None:
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


def _cublas_over(lib: StandInCublas) -> _cublas._Cublas:
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


def _gemm(blas: _cublas._Cublas) -> None:
    blas.gemm("float32", "float32", 68, 0, 0, 8, 8, 8, _cublas._ONE["float32"], 1 << 20, 8,
              64, 2 << 20, 8, 64, _cublas._ZERO["float32"], 3 << 20, 8, 64, 1)


@pytest.fixture(autouse=True)
def _no_cublaslt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_cublaslt.ENV, "0")


# Bug: one cuBLAS handle served every thread, bound to whichever stream called last, so a
# thread could bind it to its stream and then find its GEMM enqueued on another thread's,
# unordered with its own kernels; and one workspace served every stream at once.
def test_threads_on_their_own_streams_run_their_gemms_there() -> None:
    lib = StandInCublas()
    blas = _cublas_over(lib)
    start = threading.Barrier(2)

    def worker(stream: int) -> None:
        lib.current.stream = stream
        start.wait()
        for _ in range(200):
            _gemm(blas)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (0x100, 0x200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(lib.gemms) == 400
    assert [g for g in lib.gemms if g[0] != g[1]] == []  # each on its caller's stream
    workspaces = {stream: {ws for _, s, ws in lib.gemms if s == stream} for stream in
                  (0x100, 0x200)}
    assert all(len(found) == 1 and None not in found for found in workspaces.values())
    assert workspaces[0x100] != workspaces[0x200]


def test_one_thread_switching_streams_gives_each_its_own_workspace() -> None:
    lib = StandInCublas()
    blas = _cublas_over(lib)
    for stream in (0x100, 0x200, 0x100, 0, 0x200):
        lib.current.stream = stream
        _gemm(blas)
    assert [caller == bound for caller, bound, _ in lib.gemms] == [True] * 5
    by_stream = {bound: ws for _, bound, ws in lib.gemms}
    assert len(lib.handles) == 1  # one thread, one handle
    assert len(set(by_stream.values())) == 3 and None not in by_stream.values()
    # The legacy default stream gets ours too: cuBLAS's own would be allocated in a call.
    assert [ws for caller, _, ws in lib.gemms if caller == 0x100] == [by_stream[0x100]] * 2


def test_a_finished_threads_handle_serves_the_next_thread() -> None:
    lib = StandInCublas()
    blas = _cublas_over(lib)

    def worker(stream: int) -> None:
        lib.current.stream = stream
        _gemm(blas)

    for stream in (0x100, 0x200, 0x300):
        thread = threading.Thread(target=worker, args=(stream,))
        thread.start()
        thread.join()
        gc.collect()  # the thread's local storage, and with it its handles, freed
    assert len(lib.handles) == 1  # created once, then taken from the pool
    # Reused, it is bound to the new thread's stream before its first GEMM.
    assert [(caller, bound) for caller, bound, _ in lib.gemms] == [
        (0x100, 0x100), (0x200, 0x200), (0x300, 0x300)]


def test_a_handles_stream_is_set_only_when_it_changes() -> None:
    lib = StandInCublas()
    blas = _cublas_over(lib)
    calls: list[int] = []
    set_stream = lib.cublasSetStream_v2

    def counting(handle: Any, stream: Any) -> int:
        calls.append(stream.value or 0)
        return set_stream(handle, stream)

    lib.cublasSetStream_v2 = counting  # type: ignore[method-assign]
    lib.current.stream = 0x100
    for _ in range(3):
        _gemm(blas)
    assert calls == [0x100]  # a call's host time: no cuBLAS call but the GEMM


# Bug: cuFFT plans were kept per device only, so threads executed one plan at once (cuFFT
# is thread-safe only for different plans) and streams shared one plan's work area.
def test_fft_plans_are_kept_per_thread_and_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[Any, ...]] = []

    class PlanNd:
        def __init__(self, *args: Any) -> None:
            made.append(args)

    current = threading.local()
    cuda = SimpleNamespace(
        runtime=SimpleNamespace(getDevice=lambda: 0, streamIsCapturing=lambda ptr: 0),
        get_current_stream=lambda: SimpleNamespace(ptr=getattr(current, "stream", 0)),
        cufft=SimpleNamespace(PlanNd=PlanNd))
    cupy = SimpleNamespace(cuda=cuda)
    monkeypatch.setattr(fft, "require_cupy", lambda: cupy)
    monkeypatch.setitem(sys.modules, "cupy", cupy)  # for `from cupy.cuda import cufft`
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setattr(fft, "_plans", OrderedDict())

    def plan(stream: int) -> Any:
        current.stream = stream
        return fft._plan(fft.CUFFT_R2C, 4, 8, 8)

    first = plan(0x100)
    assert plan(0x100) is first and len(made) == 1  # kept
    assert plan(0x200) is not first  # another stream, another work area
    found: list[Any] = []
    thread = threading.Thread(target=lambda: found.append(plan(0x100)))
    thread.start()
    thread.join()
    assert found[0] is not first and len(made) == 3  # another thread, another plan


class _DriverError(RuntimeError):
    """What CuPy's driver wrapper raises: the CUresult as `status`."""

    def __init__(self, status: int) -> None:
        super().__init__(f"CUresult {status}")
        self.status = status


# Bug: the shared-memory opt-in called cuFuncSetAttribute straight, as prepared launches
# call cuLaunchKernel: from a thread without a current CUDA context it would be refused.
def test_the_shared_memory_opt_in_makes_a_context_current_when_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    current: list[bool] = []
    calls: list[tuple[int, ...]] = []

    def set_attribute(*args: int) -> None:
        if not current:
            raise _DriverError(_loader.INVALID_CONTEXT)
        calls.append(args)

    monkeypatch.setattr(_loader, "_func_set_attribute", set_attribute)
    monkeypatch.setattr(_loader, "make_context_current", lambda: current.append(True))
    kernel = _PlainFunction(0x7F01)
    _loader.allow_shared_memory(kernel, 160 * 1024)
    assert current == [True]
    assert calls == [(0x7F01, _loader.MAX_DYNAMIC_SHARED_SIZE_BYTES, 160 * 1024)]

    def illegal(*args: int) -> None:
        raise _DriverError(700)  # CUDA_ERROR_ILLEGAL_ADDRESS: not a context's absence

    monkeypatch.setattr(_loader, "_func_set_attribute", illegal)
    with pytest.raises(_DriverError):
        _loader.allow_shared_memory(_PlainFunction(0x7F02), 160 * 1024)
    assert current == [True]


class _ContextlessThread(Recorder):
    """A kernel launched from a thread with no current CUDA context until one is made."""

    def __init__(self, refusal: int) -> None:
        super().__init__()
        self.refusal, self.current = refusal, False

    def launch_kernel(self, *args: Any) -> None:
        if not self.current:
            raise _DriverError(self.refusal)
        super().launch_kernel(*args)


# Bug: prepared launches went to cuLaunchKernel straight, skipping what CuPy's own
# launches do first (make the device's context current on the calling thread), so a plan
# called first from a thread that had made no CUDA runtime call (a server's worker thread)
# would be refused with CUDA_ERROR_INVALID_CONTEXT.
def test_a_launch_without_a_current_context_makes_one_and_goes_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = _ContextlessThread(_loader.INVALID_CONTEXT)
    made: list[bool] = []

    def make_current() -> None:
        made.append(True)
        kernel.current = True

    monkeypatch.setattr(_loader, "make_context_current", make_current)
    args = (POINTER, POINTER, _shape(), INT32, np.uint32(9), np.float32(0.5))
    launch = _launch.prepare(kernel, (1,), (1,), args)
    assert launch is not None
    launch(5, 0x1000, 0x2000, 1)
    launch(5, 0x3000, 0x4000, 2)
    assert made == [True]  # once: the context stays current on the thread
    assert [call[6:8] for call in kernel.calls] == [(0x1000, 0x2000), (0x3000, 0x4000)]
    other = _ContextlessThread(700)  # CUDA_ERROR_ILLEGAL_ADDRESS: not ours to retry
    launch = _launch.prepare(other, (1,), (1,), args)
    assert launch is not None
    with pytest.raises(_DriverError):
        launch(5, 0x1000, 0x2000, 1)
    assert made == [True] and other.calls == []


def _in_threads(work: Any, count: int = 2) -> list[Any]:
    """What work() returns in each of `count` threads, alive together (no ident reused)."""
    done: list[Any] = []
    hold = threading.Barrier(count)

    def run() -> None:
        done.append(work())
        hold.wait(timeout=10)  # no thread ends, and gives its ident away, before all ran

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return done


# Bug: lanes were stream handles, and the per-thread default stream (CuPy's current stream
# with CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1) has one handle for every thread's own stream:
# threads running at once would share a plan's workspace and cuBLAS's.
def test_each_threads_default_stream_is_a_lane_of_its_own() -> None:
    per_thread = _lanes.PER_THREAD_STREAM
    first, second = _in_threads(lambda: _lanes.lane_of(per_thread))
    assert first != second
    assert _in_threads(lambda: _lanes.lane_of(0x100)) == [0x100, 0x100]
    lib = StandInCublas()
    blas = _cublas_over(lib)

    def gemm_on_the_threads_stream() -> None:
        lib.current.stream = per_thread
        _gemm(blas)

    _in_threads(gemm_on_the_threads_stream)
    workspaces = [ws for _, _, ws in lib.gemms]
    assert len(workspaces) == 2 and workspaces[0] != workspaces[1]


def test_the_runtime_gives_each_threads_default_stream_a_lane(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import count_plan_calls

    cupy = count_plan_calls._cupy()  # a stand-in CuPy on GPU 0
    cupy.cuda.get_current_stream = lambda: SimpleNamespace(ptr=_lanes.PER_THREAD_STREAM)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    from algorithms.cuda.runtime import CudaRuntime  # with the stand-in in place

    runtime = CudaRuntime(0)
    first, second = _in_threads(runtime.lane)
    assert first != second  # so plans keep a workspace per thread there
    x = count_plan_calls._CupyArray((1, 2, 3, 3), np.float32)
    w = count_plan_calls._CupyArray((2, 2, 1, 1), np.float32)
    shapes = ((1, 2, 3, 3), (2, 2, 1, 1), (1, 2, 3, 3))
    lanes = _in_threads(lambda: runtime.ready(x, w, x, shapes, "float32")[0])  # type: ignore[index]
    assert lanes[0] != lanes[1]


# Bug: a stream first used while it captured a CUDA graph (PyTorch's pattern: warm up on
# one stream, capture on torch.cuda.graph's own) borrowed another stream's cuBLAS workspace
# for the capture, since the global capture mode refuses an allocation: the graph then
# shared scratch memory with that stream for good, and with no other stream yet the capture
# was refused. Now the stream allocates its own with the capture mode relaxed, and keeps it,
# outside CuPy's allocator, which may be an asynchronous pool whose allocation inside a
# capture exists only while the graph runs.
def test_a_stream_first_used_while_capturing_gets_its_own_workspace() -> None:
    lib = StandInCublas()
    blas = _cublas_over(lib)
    lib.current.stream = 0x100
    _gemm(blas)  # the tuning's stream
    lib.capturing.add(0x300)
    lib.current.stream = 0x300
    _gemm(blas)
    _gemm(blas)
    lib.capturing.discard(0x300)
    _gemm(blas)  # after the capture: the same workspace, still bound
    first, captured, again, after = (ws for _, _, ws in lib.gemms)
    assert captured not in (first, None) and again == after == captured
    assert [caller == bound for caller, bound, _ in lib.gemms] == [True] * 4
    assert lib.modes == [_lanes._RELAXED] * 3  # the handle and both workspaces
    assert MODES.current() == 0  # restored
    assert lib.allocators == ["pool", "cudaMalloc"]  # the captured one outside any pool


# Bug: a capture before any GEMM on the device had no workspace to borrow, and was refused.
def test_a_capture_before_any_gemm_on_the_device_goes_through() -> None:
    lib = StandInCublas()
    blas = _cublas_over(lib)
    lib.capturing.add(0x300)
    lib.current.stream = 0x300
    _gemm(blas)  # cublasCreate and the workspace, both inside the capture
    assert [bound for _, bound, _ in lib.gemms] == [0x300]
    assert lib.modes == [_lanes._RELAXED] * 2 and MODES.current() == 0
    assert lib.allocators == ["cudaMalloc"]


# Bug: a thread given a pooled handle made no CUDA call that makes a context current, and
# cuBLAS launches some kernels through the driver API, which refuses such a thread.
def test_each_thread_makes_a_context_current_before_its_first_gemm() -> None:
    lib = StandInCublas()
    blas = _cublas_over(lib)

    def worker() -> None:
        lib.current.stream = 0x100
        _gemm(blas)
        _gemm(blas)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:  # one after the other: the second reuses the first's handle
        thread.start()
        thread.join()
        gc.collect()
    assert len(lib.handles) == 1 and len(lib.contexts) == 2


# Bug: a plan's workspace for a stream first used inside a capture was refused (the global
# capture mode, torch.cuda.graph's, refuses an allocation), so PyTorch's own pattern, a
# warm-up on one stream and the capture on another, failed for every plan with a workspace.
# And: with CuPy's allocator set to its asynchronous pool, the workspace made in the capture
# was a node of the graph (cudaMallocAsync), memory that exists only while the graph runs;
# now it is cudaMalloc's own there.
def test_a_plans_workspace_is_allocated_relaxed_while_its_stream_captures(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import count_plan_calls

    cupy = count_plan_calls._cupy()
    made: list[tuple[int, str]] = []

    def allocator(name: str) -> Callable[[int], bytearray]:
        def alloc(nbytes: int) -> bytearray:
            made.append((MODES.current(), name))
            return bytearray(nbytes)
        return alloc

    cupy.cuda.alloc = allocator("pool")
    cupy.cuda.Memory = allocator("cudaMalloc")
    cupy.cuda.MemoryPointer = lambda memory, offset: memory
    capturing = cupy.cuda.get_current_stream()
    capturing.ptr = 0x300
    cupy.cuda.runtime.streamIsCapturing = lambda ptr: int(ptr == 0x300)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    from algorithms.cuda.runtime import CudaRuntime  # with the stand-in in place

    runtime = CudaRuntime(0)
    assert runtime.workspace(256).nbytes == 256
    assert runtime.workspace(0) is None  # nothing to allocate
    capturing.ptr = 0x100  # a stream not capturing
    assert runtime.workspace(128).nbytes == 128
    # In the capture outside CuPy's allocator (_lanes.lane_memory), else through it.
    assert made == [(_lanes._RELAXED, "cudaMalloc"), (_lanes._RELAXED, "pool")]
    assert MODES.current() == 0


# A thread's first GEMM may come inside a capture, where a runtime call may be refused:
# only a thread with no current context makes one.
@pytest.mark.parametrize("current", [0, 0x7F00])
def test_a_context_is_made_current_only_where_none_is(monkeypatch: pytest.MonkeyPatch,
                                                      current: int) -> None:
    made: list[bool] = []
    cupy = SimpleNamespace(cuda=SimpleNamespace(
        driver=SimpleNamespace(ctxGetCurrent=lambda: current)))
    monkeypatch.setattr(_loader, "require_cupy", lambda: cupy)
    monkeypatch.setattr(_loader, "make_context_current", lambda: made.append(True))
    _loader.ensure_context()
    assert made == ([] if current else [True])
