"""Each thread and stream its own resources: cuFFT plans kept per thread and stream
(algorithms.cuda.fft), and a lane of its own for each thread's default stream (the
per-thread default stream, one handle for every thread's own), in cuBLAS and in the runtime.
The stand-in libcublas is tests/cuda_thread_standins.py's.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from algorithms.cuda import _lanes, fft
from tests.cuda_thread_standins import StandInCublas, cublas_over, run_gemm

# Autouse fixtures: imported here, they apply to every test of this module (`x as x`: used).
from tests.cuda_thread_standins import capture_modes as capture_modes
from tests.cuda_thread_standins import no_cublaslt as no_cublaslt


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
    blas = cublas_over(lib)

    def gemm_on_the_threads_stream() -> None:
        lib.current.stream = per_thread
        run_gemm(blas)

    _in_threads(gemm_on_the_threads_stream)
    workspaces = [ws for _, _, ws in lib.gemms]
    assert len(workspaces) == 2 and workspaces[0] != workspaces[1]


def test_the_runtime_gives_each_threads_default_stream_a_lane(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")  # count_plan_calls stands in for torch's CUDA tensors
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
    y = count_plan_calls._CupyArray((1, 2, 3, 3), np.float32)  # out=x would not be ready
    shapes = ((1, 2, 3, 3), (2, 2, 1, 1), (1, 2, 3, 3))
    lanes = _in_threads(lambda: runtime.ready(x, w, y, shapes, "float32")[0])  # type: ignore[index]
    assert lanes[0] != lanes[1]
