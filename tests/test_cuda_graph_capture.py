"""The GPU backend's allocations while a stream captures a CUDA graph: a stream first used in
a capture gets cuBLAS a workspace of its own (a capture before any GEMM included), and a
plan's workspace there is allocated with the capture mode relaxed, outside CuPy's allocator.
The stand-in libcublas and capture modes are tests/cuda_thread_standins.py's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from algorithms.cuda import _lanes
from tests.cuda_thread_standins import MODES, StandInCublas, cublas_over, run_gemm

# Autouse fixtures: imported here, they apply to every test of this module (`x as x`: used).
from tests.cuda_thread_standins import capture_modes as capture_modes
from tests.cuda_thread_standins import no_cublaslt as no_cublaslt


# Bug: a stream first used while it captured a CUDA graph (PyTorch's pattern: warm up on
# one stream, capture on torch.cuda.graph's own) borrowed another stream's cuBLAS workspace
# for the capture, since the global capture mode refuses an allocation: the graph then
# shared scratch memory with that stream for good, and with no other stream yet the capture
# was refused. Now the stream allocates its own with the capture mode relaxed, and keeps it,
# outside CuPy's allocator, which may be an asynchronous pool whose allocation inside a
# capture exists only while the graph runs.
def test_a_stream_first_used_while_capturing_gets_its_own_workspace() -> None:
    lib = StandInCublas()
    blas = cublas_over(lib)
    lib.current.stream = 0x100
    run_gemm(blas)  # the tuning's stream
    lib.capturing.add(0x300)
    lib.current.stream = 0x300
    run_gemm(blas)
    run_gemm(blas)
    lib.capturing.discard(0x300)
    run_gemm(blas)  # after the capture: the same workspace, still bound
    first, captured, again, after = (ws for _, _, ws in lib.gemms)
    assert captured not in (first, None) and again == after == captured
    assert [caller == bound for caller, bound, _ in lib.gemms] == [True] * 4
    assert lib.modes == [_lanes._RELAXED] * 3  # the handle and both workspaces
    assert MODES.current() == 0  # restored
    assert lib.allocators == ["pool", "cudaMalloc"]  # the captured one outside any pool


# Bug: a capture before any GEMM on the device had no workspace to borrow, and was refused.
def test_a_capture_before_any_gemm_on_the_device_goes_through() -> None:
    lib = StandInCublas()
    blas = cublas_over(lib)
    lib.capturing.add(0x300)
    lib.current.stream = 0x300
    run_gemm(blas)  # cublasCreate and the workspace, both inside the capture
    assert [bound for _, bound, _ in lib.gemms] == [0x300]
    assert lib.modes == [_lanes._RELAXED] * 2 and MODES.current() == 0
    assert lib.allocators == ["cudaMalloc"]


# Bug: a plan's workspace for a stream first used inside a capture was refused (the global
# capture mode, torch.cuda.graph's, refuses an allocation), so PyTorch's own pattern, a
# warm-up on one stream and the capture on another, failed for every plan with a workspace.
# And: with CuPy's allocator set to its asynchronous pool, the workspace made in the capture
# was a node of the graph (cudaMallocAsync), memory that exists only while the graph runs;
# now it is cudaMalloc's own there.
def test_a_plans_workspace_is_allocated_relaxed_while_its_stream_captures(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")  # count_plan_calls stands in for torch's CUDA tensors
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
