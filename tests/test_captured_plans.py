"""What a CUDA graph captured stays alive while the graph may replay it (issue 9: a plan
captured into a CUDA graph must replay correctly), without a GPU: a stand-in CuPy whose
streams say whether they capture, over the real CudaRuntime, Plan and cuFFT plan cache."""

from __future__ import annotations

import gc
import sys
import weakref
from collections import OrderedDict
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from algorithms.cuda import fft
from algorithms.problem import ConvProblem

pytest.importorskip("torch")  # count_plan_calls stands in for torch's CUDA tensors

from benchmarks import count_plan_calls
from tuner.plans import Plan
from tuner.results import AlgorithmResult

PROBLEM = ConvProblem(n=1, c=2, h=3, w=3, k=2, r=1, s=1)


class Streams:
    """The stand-in CuPy's current stream, the streams capturing now and every capture
    query asked."""

    def __init__(self) -> None:
        self.current = SimpleNamespace(ptr=0)
        self.capturing: set[int] = set()
        self.asked: list[int] = []

    def is_capturing(self, ptr: int) -> int:
        self.asked.append(ptr)
        return int(ptr in self.capturing)


@pytest.fixture
def modes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """This thread's capture mode as a stand-in cuThreadExchangeStreamCaptureMode sets it
    (0: global, CUDA's own)."""
    from algorithms.cuda import _lanes

    found = [0]

    def exchange(mode: int) -> int:
        found[0], previous = mode, found[0]
        return previous

    monkeypatch.setattr(_lanes, "exchange_capture_mode", exchange)
    return found


@pytest.fixture
def streams(monkeypatch: pytest.MonkeyPatch) -> Streams:
    found = Streams()
    cupy = count_plan_calls._cupy()
    cupy.cuda.get_current_stream = lambda: found.current
    cupy.cuda.runtime.streamIsCapturing = found.is_capturing
    cupy.asarray = lambda array, dtype=None: array
    cupy.ascontiguousarray = lambda array: np.ascontiguousarray(array).view(type(array))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return found


class Scratching:
    """An algorithm that needs a workspace and records the one each run gets."""

    def __init__(self) -> None:
        self.runs: list[Any] = []

    def workspace_bytes(self, problem: ConvProblem, config: str) -> int:
        return 64

    def run(self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem,
            config: str) -> None:
        self.runs.append(workspace)


def _plan(direct: bool) -> tuple[Plan, Scratching]:
    from algorithms.cuda.runtime import CudaRuntime  # with the stand-in CuPy in place

    algorithm = Scratching()
    choice = AlgorithmResult(algorithm="direct", config="c", status="ok", time_ms=1.0,
                             workspace_bytes=64)
    return Plan(PROBLEM, "cuda:0", choice, algorithm, CudaRuntime(0), direct), algorithm  # type: ignore[arg-type]


def _operands() -> list[Any]:
    return [count_plan_calls._CupyArray(shape, np.float32) for shape in PROBLEM.operand_shapes]


# Bug: a plan run inside a CUDA graph capture was kept only by its holders. convolve() and
# the torch module hold theirs in the Service's caches, which drop a plan on a re-tune, on
# another process's better result or beyond MAX_PLANS: its workspaces went back to CuPy's
# pool while the graph went on writing them on every replay.
@pytest.mark.parametrize("direct", [True, False], ids=["direct", "checked"])
def test_a_plan_run_inside_a_capture_outlives_its_holders(streams: Streams,
                                                          direct: bool) -> None:
    x, w, y = _operands()
    streams.current.ptr = 0x300
    uncaptured, _ = _plan(direct)
    uncaptured(x, w, out=y)
    gone = weakref.ref(uncaptured)
    del uncaptured
    gc.collect()
    assert gone() is None  # kept only while held: memory stays bounded

    captured, algorithm = _plan(direct)
    captured(x, w, out=y)  # the run before capturing, which gives the stream its workspace
    streams.capturing.add(0x300)
    captured(x, w, out=y)
    assert algorithm.runs[-1] is algorithm.runs[0]  # the graph holds this workspace now
    kept = weakref.ref(captured)
    del captured
    gc.collect()
    assert kept() is not None


def test_a_captured_plan_asks_no_more_and_the_legacy_stream_never(streams: Streams) -> None:
    x, w, y = _operands()
    plan, _ = _plan(direct=True)
    streams.asked.clear()  # making the plan's workspace asks once (a refusal inside one)
    for _ in range(3):
        plan(x, w, out=y)  # the legacy default stream: CUDA never captures it
    assert streams.asked == []
    streams.current.ptr = 0x300
    plan(x, w, out=y)  # the run before capturing
    streams.capturing.add(0x300)
    streams.asked.clear()
    for _ in range(3):
        plan(x, w, out=y)
    assert streams.asked == [0x300]  # kept at the first: nothing to ask afterwards


@pytest.fixture
def cufft(streams: Streams, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The cuFFT plans made, over the stand-in CuPy; an empty plan cache."""
    made: list[Any] = []

    class PlanNd:
        def __init__(self, *args: Any) -> None:
            made.append(self)

    cupy = sys.modules["cupy"]
    cupy.cuda.cufft = SimpleNamespace(PlanNd=PlanNd)  # type: ignore[attr-defined]
    monkeypatch.setattr(fft, "require_cupy", lambda: cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cupy.cuda)  # `from cupy.cuda import cufft`
    monkeypatch.setattr(fft, "_plans", OrderedDict())
    monkeypatch.setattr(fft, "_captured", {}, raising=False)
    return made


# Bug: the cuFFT plans a graph captured stayed in the LRU of _PLAN_CACHE_SIZE: other
# problems' transforms dropped them, freeing the twiddles and work area the graph's nodes
# use on every replay.
def test_a_cufft_plan_a_capture_used_is_never_dropped(streams: Streams,
                                                      cufft: list[Any]) -> None:
    streams.current.ptr = 0x300
    first = fft._plan(fft.CUFFT_R2C, 4, 8, 8)
    streams.capturing.add(0x300)
    assert fft._plan(fft.CUFFT_R2C, 4, 8, 8) is first  # captured
    streams.capturing.clear()
    for batch in range(5, 5 + fft._PLAN_CACHE_SIZE + 1):  # enough to drop any kept plan
        fft._plan(fft.CUFFT_R2C, batch, 8, 8)
    assert fft._plan(fft.CUFFT_R2C, 4, 8, 8) is first
    assert len(cufft) == fft._PLAN_CACHE_SIZE + 2


def test_a_cufft_plan_is_not_made_during_a_capture(streams: Streams,
                                                   cufft: list[Any]) -> None:
    streams.current.ptr = 0x300
    streams.capturing.add(0x300)
    with pytest.raises(ValueError, match="a cuFFT plan cannot be set up while its stream "
                                         "captures"):
        fft._plan(fft.CUFFT_R2C, 4, 8, 8)
    assert cufft == []


class Strided(count_plan_calls.Tensor):
    """A stand-in strided torch CUDA tensor (channels-last, say), whose array interface
    must not be read: CuPy synchronizes the producer's stream when it consumes it."""

    __module__ = "torch.standin"  # is_torch reads the module

    def __init__(self, shape: tuple[int, ...], made: list[Any]) -> None:
        super().__init__(shape)
        self._made = made

    def is_contiguous(self) -> bool:
        return False

    def contiguous(self) -> count_plan_calls.Tensor:
        self._made.append(self)
        return count_plan_calls.Tensor(self.shape)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        raise AssertionError("read the array interface, which synchronizes the stream")


# Bug: a strided torch tensor was adopted through __cuda_array_interface__ (CuPy then
# synchronizes the producer's stream: a wait on every call) and copied into CuPy's pool,
# freed after the call while a graph captured then would go on using the copy.
def test_a_strided_tensor_is_made_contiguous_by_torch(streams: Streams,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0,
                        raising=False)
    made: list[Any] = []
    plan, algorithm = _plan(direct=True)
    x = Strided(PROBLEM.input_shape, made)
    w, y = (count_plan_calls.Tensor(shape) for shape in PROBLEM.operand_shapes[1:])
    assert plan(x, w, out=y) is y
    assert made == [x] and len(algorithm.runs) == 1


def test_an_operand_needing_a_cupy_copy_is_refused_while_capturing(streams: Streams) -> None:
    x, w, y = _operands()
    plan, algorithm = _plan(direct=True)
    streams.current.ptr = 0x300
    plan(x, w, out=y)
    n, c, h, width = PROBLEM.input_shape
    strided = np.ones((n, c, h, 2 * width), np.float32)[..., ::2].view(
        count_plan_calls._CupyArray)
    plan(strided, w, out=y)  # copied, outside a capture
    streams.capturing.add(0x300)
    with pytest.raises(ValueError, match="pass C-contiguous operands when capturing"):
        plan(strided, w, out=y)
    assert len(algorithm.runs) == 2


class Driver:
    """cuThreadExchangeStreamCaptureMode over one thread's mode, answering `status`."""

    def __init__(self, status: int = 0) -> None:
        self.mode, self.status = 0, status

    def cuThreadExchangeStreamCaptureMode(self, mode: Any) -> int:
        if not self.status:
            self.mode, mode._obj.value = mode._obj.value, self.mode
        return self.status


def test_relaxed_sets_the_mode_for_its_block_and_restores_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from algorithms.cuda import _lanes

    driver = Driver()
    monkeypatch.setattr(_lanes, "_libcuda", lambda: driver)
    driver.mode = 1  # thread-local, say
    with pytest.raises(KeyError), _lanes.relaxed():
        assert driver.mode == _lanes._RELAXED
        raise KeyError  # an allocation that fails
    assert driver.mode == 1


@pytest.mark.parametrize(("library", "status"), [(None, 0), (Driver, 3)],
                         ids=["no driver", "driver not initialised"])
def test_relaxed_is_a_no_op_where_nothing_can_capture(monkeypatch: pytest.MonkeyPatch,
                                                       library: Any, status: int) -> None:
    from algorithms.cuda import _lanes

    monkeypatch.setattr(_lanes, "_libcuda", lambda: library and library(status))
    with _lanes.relaxed():
        pass


# A driver that refused the exchange would have failed every workspace allocation, capture
# or not (a GPU session's every test and benchmark): it is said once and worked around.
def test_a_failed_mode_exchange_is_logged_once_and_changes_nothing(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from algorithms.cuda import _lanes

    driver = Driver(status=201)
    monkeypatch.setattr(_lanes, "_libcuda", lambda: driver)
    _lanes._failed.cache_clear()
    for _ in range(2):
        with _lanes.relaxed():
            assert driver.mode == 0
    assert [r.getMessage() for r in caplog.records].count(
        "cuThreadExchangeStreamCaptureMode failed (CUresult 201): allocations inside a CUDA "
        "graph capture may end it") == 1


# Bug: a call seen first inside a CUDA graph capture tuned its problem there: the timing's
# synchronisations end the capture with CUDA's own error, and each candidate's failure
# would have been stored as data. Now such a call plans from this device's stored
# measurements only, else says to run it once before capturing; nothing is measured.
def test_a_call_seen_first_inside_a_capture_plans_from_the_store_only(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import tuner.calls
    from tuner import convolve
    from tuner.service import service

    rng = np.random.default_rng()
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    tuned = convolve(x, w, padding=1, db=db_url)  # measured outside the capture
    monkeypatch.setattr(tuner.calls, "_capturing", lambda array, device: True)
    found = service(db_url)
    found._call_plans.clear()  # as after another process's write: the call is new again
    rows = found.results()[0]
    np.testing.assert_allclose(convolve(x, w, padding=1, db=db_url), tuned, rtol=1e-5)
    with pytest.raises(ValueError, match="not tuned on cpu yet, and tuning cannot run inside "
                                         "a CUDA graph capture: run the call once"):
        convolve(x, w, padding=2, db=db_url)  # another problem, never tuned
    assert found.results()[0] == rows  # nothing measured, nothing stored


# A kernel's first load may come inside a capture (a call seen first there plans from the
# store, then runs): the module load allocates, which the global capture mode refuses.
def test_a_kernel_is_built_with_the_capture_mode_relaxed(
        streams: Streams, modes: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    from algorithms.cuda import _lanes, _loader

    built: list[int] = []

    def build(*args: Any) -> object:
        built.append(modes[0])
        return object()

    monkeypatch.setattr(_loader, "require_cupy", lambda: sys.modules["cupy"])
    monkeypatch.setattr(_loader, "_kernels", {})
    monkeypatch.setattr(_loader, "_build", build)
    first = _loader.get_kernel("direct.cu", "conv_direct<float>")
    assert _loader.get_kernel("direct.cu", "conv_direct<float>") is first  # built once
    assert built == [_lanes._RELAXED] and modes == [0]


# PyTorch's own pattern: the plan warmed up on one stream, then captured on another where it
# never ran. Its workspace there is made inside the capture (relaxed), and the plan is kept.
@pytest.mark.parametrize("direct", [True, False], ids=["direct", "checked"])
def test_a_plan_captured_on_a_stream_it_never_ran_on(streams: Streams, modes: list[int],
                                                     direct: bool) -> None:
    x, w, y = _operands()
    plan, algorithm = _plan(direct)
    streams.current.ptr = 0x100
    plan(x, w, out=y)  # the warm-up stream
    streams.current.ptr = 0x300
    streams.capturing.add(0x300)
    plan(x, w, out=y)
    warm, captured = algorithm.runs
    assert captured is not warm and modes == [0]
    kept = weakref.ref(plan)
    del plan
    gc.collect()
    assert kept() is not None


class Free(Scratching):
    """An algorithm that needs no workspace."""

    def workspace_bytes(self, problem: ConvProblem, config: str) -> int:
        return 0


# Mutation gap: a plan without a workspace watched for captures like one with: it asked the
# driver on every call and was kept for good after a capture, though it holds no memory a
# graph could use.
@pytest.mark.parametrize("direct", [True, False], ids=["direct", "checked"])
def test_a_plan_without_a_workspace_is_not_kept_for_graphs(streams: Streams,
                                                           direct: bool) -> None:
    from algorithms.cuda.runtime import CudaRuntime

    x, w, y = _operands()
    choice = AlgorithmResult(algorithm="direct", config="c", status="ok", time_ms=1.0,
                             workspace_bytes=0)
    plan = Plan(PROBLEM, "cuda:0", choice, Free(), CudaRuntime(0), direct)  # type: ignore[arg-type]
    streams.current.ptr = 0x500
    streams.capturing.add(0x500)
    streams.asked.clear()
    plan(x, w, out=y)
    assert streams.asked == []
    gone = weakref.ref(plan)
    del plan
    gc.collect()
    assert gone() is None
