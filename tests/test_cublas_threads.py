"""cuBLAS from several threads and streams (algorithms.cuda._cublas): each GEMM must run on
its caller's stream with that stream's own workspace, a finished thread's handle serves the
next thread, a handle's stream is set only when it changes, and each thread makes a context
current before its first GEMM. The stand-in libcublas is tests/cuda_thread_standins.py's.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

from tests.cuda_thread_standins import StandInCublas, cublas_over, run_gemm

# Autouse fixtures: imported here, they apply to every test of this module (`x as x`: used).
from tests.cuda_thread_standins import capture_modes as capture_modes
from tests.cuda_thread_standins import no_cublaslt as no_cublaslt


# Bug: one cuBLAS handle served every thread, bound to whichever stream called last, so a
# thread could bind it to its stream and then find its GEMM enqueued on another thread's,
# unordered with its own kernels; and one workspace served every stream at once.
def test_threads_on_their_own_streams_run_their_gemms_there() -> None:
    lib = StandInCublas()
    blas = cublas_over(lib)
    start = threading.Barrier(2)

    def worker(stream: int) -> None:
        lib.current.stream = stream
        start.wait()
        for _ in range(200):
            run_gemm(blas)

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
    blas = cublas_over(lib)
    for stream in (0x100, 0x200, 0x100, 0, 0x200):
        lib.current.stream = stream
        run_gemm(blas)
    assert [caller == bound for caller, bound, _ in lib.gemms] == [True] * 5
    by_stream = {bound: ws for _, bound, ws in lib.gemms}
    assert len(lib.handles) == 1  # one thread, one handle
    assert len(set(by_stream.values())) == 3 and None not in by_stream.values()
    # The legacy default stream gets ours too: cuBLAS's own would be allocated in a call.
    assert [ws for caller, _, ws in lib.gemms if caller == 0x100] == [by_stream[0x100]] * 2


def test_a_finished_threads_handle_serves_the_next_thread() -> None:
    lib = StandInCublas()
    blas = cublas_over(lib)

    def worker(stream: int) -> None:
        lib.current.stream = stream
        run_gemm(blas)

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
    blas = cublas_over(lib)
    calls: list[int] = []
    set_stream = lib.cublasSetStream_v2

    def counting(handle: Any, stream: Any) -> int:
        calls.append(stream.value or 0)
        return set_stream(handle, stream)

    lib.cublasSetStream_v2 = counting  # type: ignore[method-assign]
    lib.current.stream = 0x100
    for _ in range(3):
        run_gemm(blas)
    assert calls == [0x100]  # a call's host time: no cuBLAS call but the GEMM


# Bug: a thread given a pooled handle made no CUDA call that makes a context current, and
# cuBLAS launches some kernels through the driver API, which refuses such a thread.
def test_each_thread_makes_a_context_current_before_its_first_gemm() -> None:
    lib = StandInCublas()
    blas = cublas_over(lib)

    def worker() -> None:
        lib.current.stream = 0x100
        run_gemm(blas)
        run_gemm(blas)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:  # one after the other: the second reuses the first's handle
        thread.start()
        thread.join()
        gc.collect()
    assert len(lib.handles) == 1 and len(lib.contexts) == 2
