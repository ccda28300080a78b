"""Plans shared between threads on a GPU: a thread that has made no CUDA call yet, and
threads on streams of their own running GEMM and FFT plans at once (issue 9: plans are safe
to share between threads)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from algorithms.problem import ConvProblem
from algorithms.reference import reference_conv, relative_error, tolerance
from tuner import plan

# Large enough that two streams' GEMMs and transforms overlap on the device.
PROBLEM = ConvProblem(n=8, c=64, h=28, w=28, k=64, r=3, s=3, pad=1)


def _in_new_thread(work: Callable[[], Any]) -> Any:
    """work() in a fresh thread: its result, or what it raised, raised here."""
    done: list[Any] = []

    def run() -> None:
        try:
            done.append(("ok", work()))
        except BaseException as exc:  # handed to the test's thread
            done.append(("raised", exc))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    kind, value = done[0]
    if kind == "raised":
        raise value
    return value


def _error(y: Any, x: Any, w: Any) -> float:
    import cupy

    host = [a.cpu().numpy() if hasattr(a, "cpu") else cupy.asnumpy(a) for a in (y, x, w)]
    return relative_error(host[0], reference_conv(host[1], host[2], PROBLEM))


# The first call from a thread without a current CUDA context: the prepared launches
# (implicit_gemm_tc, direct) go to the driver, which needs one current (_launch).
@pytest.mark.parametrize("algorithm", ["implicit_gemm_tc", "direct", "im2col_gemm", "fft"])
@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_a_plan_runs_first_from_a_new_thread(db_url: str, algorithm: str, kind: str) -> None:
    import cupy

    chosen = plan(PROBLEM, "cuda:0", db=db_url, algorithm=algorithm)
    if kind == "torch":
        torch = pytest.importorskip("torch")
        x = torch.randn(PROBLEM.input_shape, device="cuda")
        w = torch.randn(PROBLEM.filter_shape, device="cuda")
        y = torch.full(PROBLEM.output_shape, float("nan"), device="cuda")
        torch.cuda.synchronize()
    else:
        rng = cupy.random.default_rng()
        x = rng.standard_normal(PROBLEM.input_shape, dtype=np.float32)
        w = rng.standard_normal(PROBLEM.filter_shape, dtype=np.float32)
        y = cupy.full(PROBLEM.output_shape, np.nan, np.float32)
        cupy.cuda.Device().synchronize()

    def call() -> None:
        chosen(x, w, out=y)  # the caller's (default) stream
        cupy.cuda.Device().synchronize()

    _in_new_thread(call)
    assert _error(y, x, w) <= tolerance(PROBLEM.dtype, algorithm)


# Threads on streams of their own at once: cuBLAS's handle bound to one thread's stream and
# one workspace (or one cuFFT plan's work area) for every stream would mix their GEMMs.
# The per-thread default stream (CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1's current stream) has
# one handle for every thread's own stream: lanes tell them apart by thread (_lanes).
@pytest.mark.parametrize("streams", ["own", "per_thread_default"])
@pytest.mark.parametrize("algorithm", ["im2col_gemm", "fft", "winograd"])
def test_threads_on_their_own_streams_share_a_plan(db_url: str, algorithm: str,
                                                   streams: str) -> None:
    import cupy

    chosen = plan(PROBLEM, "cuda:0", db=db_url, algorithm=algorithm)
    rng = cupy.random.default_rng()
    threads, calls = 3, 20
    inputs = [(rng.standard_normal(PROBLEM.input_shape, dtype=np.float32),
               rng.standard_normal(PROBLEM.filter_shape, dtype=np.float32))
              for _ in range(threads)]
    cupy.cuda.Device().synchronize()
    start = threading.Barrier(threads)

    def worker(x: Any, w: Any) -> list[Any]:
        stream = (cupy.cuda.Stream(non_blocking=True) if streams == "own"
                  else cupy.cuda.Stream.ptds)
        with stream:  # the NaN fills too: a non-blocking stream waits for no other
            outputs = [cupy.full(PROBLEM.output_shape, np.nan, np.float32)
                       for _ in range(calls)]
            chosen(x, w, out=outputs[0])  # the stream's warm-up: its workspace, plans
            stream.synchronize()
            start.wait()
            for y in outputs:  # back to back, each into its own output
                chosen(x, w, out=y)
            stream.synchronize()
        return outputs

    found: list[Any] = [None] * threads

    def run(i: int) -> None:
        try:
            found[i] = worker(*inputs[i])
        except BaseException as exc:  # handed to the test's thread
            found[i] = exc
            start.abort()

    started = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    for result in found:
        if isinstance(result, BaseException):
            raise result
    # One float64 reference per thread's inputs, not one per output (60 of them).
    refs = [reference_conv(cupy.asnumpy(x), cupy.asnumpy(w), PROBLEM) for x, w in inputs]
    errors = [relative_error(cupy.asnumpy(y), refs[i]) for i in range(threads)
              for y in found[i]]
    assert max(errors) <= tolerance(PROBLEM.dtype, algorithm), max(errors)


def _never_ran_there(case: str, db_url: str, runtime: Any) -> Any:
    """A plan of each kind of lane resource: cuBLAS's workspace only (a pointwise
    im2col_gemm without a workspace), a plan workspace too, and split K's counters."""
    if case == "gemm_only":
        pointwise = ConvProblem(n=8, c=64, h=28, w=28, k=64, r=1, s=1)
        chosen = plan(pointwise, "cuda:0", workspace_limit=0, db=db_url,
                      algorithm="im2col_gemm")
        assert chosen.workspace_bytes == 0, chosen.config  # chunk=all: straight GEMMs
        return chosen
    if case == "workspace":
        chosen = plan(PROBLEM, "cuda:0", db=db_url, algorithm="im2col_gemm")
        assert chosen.workspace_bytes > 0, chosen.config
        return chosen
    from algorithms.registry import get_algorithm
    from tuner.plans import Plan
    from tuner.results import AlgorithmResult

    tc = get_algorithm("cuda", "implicit_gemm_tc")
    config = next(c for c in tc.configs(PROBLEM) if "-k" in c)  # split K: counters
    choice = AlgorithmResult(algorithm=tc.name, config=config, status="ok", time_ms=1.0,
                             workspace_bytes=tc.workspace_bytes(PROBLEM, config))
    return Plan(PROBLEM, "cuda:0", choice, tc, runtime)


# PyTorch's own capture pattern: warm up on a side stream, capture on torch.cuda.graph's
# default capture stream, where the plan never ran. The stream's plan workspace, cuBLAS
# workspace and split K's counters are made inside the capture, which torch.cuda.graph runs
# in the global mode, refusing allocations: made with the capture mode relaxed (_lanes).
@pytest.mark.parametrize("case", ["gemm_only", "workspace", "split_k"])
def test_a_plan_captures_on_a_stream_it_never_ran_on(db_url: str, runtime: Any,
                                                     case: str) -> None:
    torch = pytest.importorskip("torch")
    chosen = _never_ran_there(case, db_url, runtime)
    problem = chosen.problem
    x = torch.randn(problem.input_shape, device="cuda")
    w = torch.randn(problem.filter_shape, device="cuda")
    y = torch.empty(problem.output_shape, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        chosen(x, w, out=y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # its own capture stream
        chosen(x, w, out=y)
    for _ in range(2):  # split K's counters must be back at zero after each replay
        x.copy_(torch.randn_like(x))
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = reference_conv(x.cpu().numpy(), w.cpu().numpy(), problem)
        error = relative_error(y.cpu().numpy(), ref)
        assert error <= tolerance(problem.dtype, chosen.algorithm), f"{chosen}: {error:.3g}"
