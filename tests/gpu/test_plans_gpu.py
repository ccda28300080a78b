"""Plans on a GPU: the caller's stream, no synchronisation, CUDA graph capture and replay."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms.problem import ConvProblem
from algorithms.reference import reference_conv, relative_error, tolerance
from tuner import plan

PROBLEM = ConvProblem(n=2, c=16, h=20, w=18, k=24, r=3, s=3, pad=1)

#: Spins for about `cycles` clocks, then writes `value` over x: a slow producer on a stream.
_SLOW_FILL = r"""
extern "C" __global__ void slow_fill(float* x, long long n, float value, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
    for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) x[i] = value;
}
"""


def _host(array: Any) -> np.ndarray:
    import cupy

    return array.cpu().numpy() if hasattr(array, "cpu") else cupy.asnumpy(array)


def _check(y: Any, x: Any, w: Any, algorithm: str) -> None:
    ref = reference_conv(_host(x), _host(w), PROBLEM)
    error = relative_error(_host(y), ref)
    assert error <= tolerance(PROBLEM.dtype, algorithm), f"{algorithm}: {error:.3g}"


# implicit_gemm_tc and im2col_gemm launch from prepared buffers (algorithms.cuda._launch),
# which name the stream themselves.
@pytest.mark.parametrize("algorithm", ["implicit_gemm", "im2col_gemm", "fft",
                                       "implicit_gemm_tc"])
def test_plan_runs_in_order_on_the_callers_stream(db_url: str, algorithm: str) -> None:
    import cupy

    chosen = plan(PROBLEM, "cuda:0", db=db_url, algorithm=algorithm)
    rng = cupy.random.default_rng()
    x = rng.standard_normal(PROBLEM.input_shape, dtype=np.float32)
    w = rng.standard_normal(PROBLEM.filter_shape, dtype=np.float32)
    y = cupy.empty(PROBLEM.output_shape, np.float32)
    cupy.cuda.Device().synchronize()  # made on the legacy stream, which `stream` skips
    stream = cupy.cuda.Stream(non_blocking=True)
    slow = cupy.RawKernel(_SLOW_FILL, "slow_fill")
    with stream:
        chosen(x, w, out=y)  # this stream's workspace
        stream.synchronize()
        # Ordered after the slow producer only if the plan runs on `stream`.
        slow((64,), (256,), (x, np.int64(x.size), np.float32(0.5), np.int64(50_000_000)))
        chosen(x, w, out=y)
        made = chosen(x, w)  # a result made beside x (Runtime.output): the direct path too
    stream.synchronize()
    assert float(x[0, 0, 0, 0]) == 0.5
    _check(y, x, w, algorithm)
    assert isinstance(made, cupy.ndarray) and made.dtype == np.float32
    _check(made, x, w, algorithm)


def _captured(chosen: Any, rng: Any) -> tuple[Any, ...]:
    """(x, w, y, a new stream, a graph of one `chosen` call on them captured there)."""
    import cupy

    x = rng.standard_normal(PROBLEM.input_shape, dtype=np.float32)
    w = rng.standard_normal(PROBLEM.filter_shape, dtype=np.float32)
    y = cupy.empty(PROBLEM.output_shape, np.float32)
    cupy.cuda.Device().synchronize()  # made on the legacy stream, which `stream` skips
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        chosen(x, w, out=y)  # warm-up on the capturing stream (its workspace, plans)
        stream.synchronize()
        stream.begin_capture()
        try:
            chosen(x, w, out=y)
        finally:  # an open capture would fail every later CUDA call of this process
            graph = stream.end_capture()
    return x, w, y, stream, graph


# implicit_gemm_tc and im2col_gemm launch from prepared buffers (algorithms.cuda._launch),
# which name the stream themselves.
@pytest.mark.parametrize("algorithm", ["implicit_gemm", "im2col_gemm", "fft",
                                       "implicit_gemm_tc"])
def test_cupy_graph_capture_replays(db_url: str, algorithm: str) -> None:
    import cupy

    chosen = plan(PROBLEM, "cuda:0", db=db_url, algorithm=algorithm)
    rng = cupy.random.default_rng()
    x, w, y, stream, graph = _captured(chosen, rng)
    with stream:
        for _ in range(2):  # fresh inputs each replay: the graph reads them, not copies
            x[...] = rng.standard_normal(PROBLEM.input_shape, dtype=np.float32)
            y.fill(np.nan)
            graph.launch(stream)
            stream.synchronize()
            _check(y, x, w, algorithm)


# Bug: a plan run inside a capture was kept only by its holders; the Service drops the plans
# behind convolve() and the torch module on a re-tune, another process's result or beyond
# MAX_PLANS, and the graph then wrote into workspaces (and cuFFT work areas) CuPy's pool had
# handed to other arrays.
@pytest.mark.parametrize("algorithm", ["im2col_gemm", "fft", "implicit_gemm_tc"])
def test_a_graph_outlives_the_plans_behind_it(db_url: str, algorithm: str) -> None:
    import gc

    import cupy

    from algorithms.cuda import fft
    from tuner.service import service

    chosen = plan(PROBLEM, "cuda:0", db=db_url, algorithm=algorithm)
    nbytes = chosen.workspace_bytes
    rng = cupy.random.default_rng()
    x, w, y, stream, graph = _captured(chosen, rng)
    with stream:
        del chosen  # and every plan the Service kept: all the graph's memory now
        kept = service(db_url)
        kept._plans.clear()
        kept._call_plans.clear()
        for batch in range(1, fft._PLAN_CACHE_SIZE + 2):  # other transforms fill cuFFT's LRU
            fft._plan(fft.CUFFT_R2C, batch, 8, 8)
        gc.collect()
        # Blocks of the workspace's size, and of the cuFFT work areas', on its stream: CuPy's
        # pool hands a freed one back.
        sizes = {max(nbytes, 1)} | {cufft.work_area.mem.size for cufft in fft._captured.values()
                                    if cufft.work_area is not None and cufft.work_area.mem.size}
        others = [cupy.full(size, 7, np.uint8) for size in sizes for _ in range(4)]
        x[...] = rng.standard_normal(PROBLEM.input_shape, dtype=np.float32)
        y.fill(np.nan)
        graph.launch(stream)
        stream.synchronize()
    _check(y, x, w, algorithm)
    assert all(bool((other == 7).all()) for other in others)


# CuPy 14 deprecates ExternalStream, which wrapped torch's stream here until 2026-11-29.
@pytest.mark.filterwarnings("error:ExternalStream is deprecated:DeprecationWarning")
def test_torch_stream_and_graph(db_url: str) -> None:
    torch = pytest.importorskip("torch")
    chosen = plan(PROBLEM, "cuda:0", db=db_url, algorithm="im2col_gemm")
    x = torch.randn(PROBLEM.input_shape, device="cuda")
    w = torch.randn(PROBLEM.filter_shape, device="cuda")
    y = torch.empty(PROBLEM.output_shape, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        assert chosen(x, w, out=y) is y  # enqueued on `side`, torch's current stream
    torch.cuda.current_stream().wait_stream(side)
    _check(y, x, w, chosen.algorithm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        chosen(x, w, out=y)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    _check(y, x, w, chosen.algorithm)


# Bug: a strided tensor went through __cuda_array_interface__ (CuPy synchronizes the
# producer's stream on it) and a copy from CuPy's pool, freed before a captured graph
# replayed; torch now makes it contiguous on its stream, from the graph's pool there.
def test_a_channels_last_tensor_eager_and_in_a_graph(db_url: str) -> None:
    torch = pytest.importorskip("torch")
    chosen = plan(PROBLEM, "cuda:0", db=db_url, algorithm="im2col_gemm")
    x = torch.randn(PROBLEM.input_shape, device="cuda").to(memory_format=torch.channels_last)
    w = torch.randn(PROBLEM.filter_shape, device="cuda")
    y = torch.empty(PROBLEM.output_shape, device="cuda")
    assert chosen(x, w, out=y) is y
    torch.cuda.synchronize()
    _check(y, x, w, chosen.algorithm)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        chosen(x, w, out=y)  # the capturing stream's workspace
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        chosen(x, w, out=y)
    x.copy_(torch.randn_like(x))
    y.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _check(y, x, w, chosen.algorithm)


# Plain tensors on torch's default stream go to the run as Addresses (runtime.ready):
# every algorithm and configuration must run on their addresses alone, backward too.
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_filter"])
def test_plain_tensors_run_by_address_in_every_configuration(runtime: Any,
                                                              direction: str) -> None:
    torch = pytest.importorskip("torch")
    from dataclasses import replace

    from algorithms.reference import reference
    from algorithms.registry import algorithms_for
    from tuner.plans import Plan
    from tuner.results import AlgorithmResult

    problem = replace(PROBLEM, direction=direction)
    a_shape, b_shape, out_shape = problem.operand_shapes
    a, b = torch.randn(a_shape, device="cuda"), torch.randn(b_shape, device="cuda")
    ref = reference(a.cpu().numpy(), b.cpu().numpy(), problem)
    ran = []
    for implementation in algorithms_for("cuda"):
        if not implementation.supports(problem):
            continue
        for config in implementation.configs(problem):
            choice = AlgorithmResult(
                algorithm=implementation.name, config=config, status="ok", time_ms=1.0,
                workspace_bytes=implementation.workspace_bytes(problem, config))
            chosen = Plan(problem, "cuda:0", choice, implementation, runtime)
            out = torch.full(out_shape, float("nan"), device="cuda")
            assert runtime.ready(a, b, out, problem.operand_shapes, "float32") is not None
            assert chosen(a, b, out=out) is out
            error = relative_error(out.cpu().numpy(), ref)
            assert error <= tolerance(problem.dtype, implementation.name), (
                f"{implementation.name}/{config}: {error:.3g}")
            # Again on copies at other addresses: the run as replayed there
            # (algorithms.cuda._replay), worked out on the first call's, bit for bit.
            again = torch.full(out_shape, float("nan"), device="cuda")
            assert chosen(a.clone(), b.clone(), out=again) is again
            assert torch.equal(again, out), f"{implementation.name}/{config}: replayed"
            ran.append(implementation.name)
    assert {"direct", "implicit_gemm", "im2col_gemm", "fft"} <= set(ran)
