"""Replayed runs (algorithms.cuda._replay): a run's GPU calls worked out from two dry runs,
then made at other operand addresses, against the same run made directly. The emulated
cases (tests/test_cuda_emulated.py) check every replayable algorithm the same way."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest

from algorithms.cuda import _cublas, _lanes, _replay
from algorithms.cuda._base import CudaAlgorithm
from algorithms.cuda._launch import INT32, POINTER, Address, KernelLaunch, enqueue
from algorithms.problem import ConvProblem

PROBLEM = ConvProblem(n=1, c=4, h=4, w=4, k=4, r=1, s=1)
WORKSPACE = Address(0x7000_0000)
#: What every stand-in below did, in order: ("launch", stream, args) or ("gemm", args).
CALLS: list[tuple[Any, ...]] = []


class Kernel:
    """A kernel that launches from a buffer (two pointers and a 32-bit flag), recording
    the parameters as the driver would read them."""

    name = "stand_in"
    signature = "ppi"
    sizes = (8, 8, 4)
    ptr = 0x99

    def launch_kernel(self, function: int, gx: int, gy: int, gz: int, bx: int, by: int,
                      bz: int, shared_mem: int, stream: int, params: int, extra: int) -> None:
        at = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        CALLS.append(("launch", stream, ctypes.c_void_p.from_address(at[0]).value,
                      ctypes.c_void_p.from_address(at[1]).value,
                      ctypes.c_int32.from_address(at[2]).value))


KERNEL = Kernel()
LAUNCH = KernelLaunch("stand_in.cu", "stand_in", (1,), (32,), (POINTER, POINTER, INT32))


def _get_kernel(_file: str, _name: str) -> Any:
    return KERNEL


class Stand(CudaAlgorithm):
    """A run of two launches and a GEMM, its flag read off y's alignment modulo `modulo`,
    as the tensor-core kernels' vector widths and paired stores are."""

    name = "stand_in"
    replayable = True

    def __init__(self, modulo: int = 16, get_kernel: Any = _get_kernel) -> None:
        self.modulo = modulo
        self.get_kernel = get_kernel

    def run(self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem,
            config: str) -> None:
        region = Address(workspace.data.ptr + 256)
        enqueue(LAUNCH, self.get_kernel, x, region, int(y.data.ptr % self.modulo == 0))
        _cublas.gemm_strided_batched("float32", 0, 1, 4, 4, 4, region.ptr, 4, 16,
                                     w.data.ptr + 64, 4, 16, y.data.ptr, 4, 16, 1)
        enqueue(LAUNCH, self.get_kernel, region, Address(y.data.ptr + 32), 7)


@pytest.fixture(autouse=True)
def _stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    CALLS.clear()
    monkeypatch.setattr(_cublas, "_gemm", lambda *args: CALLS.append(("gemm", *args)))
    monkeypatch.setattr("algorithms.cuda._launch._stream", lambda: 5)


def _direct(algorithm: Any, stream: int, x: int, w: int, y: int) -> list[tuple[Any, ...]]:
    """The calls of one run made as it is, on `stream`."""
    CALLS.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("algorithms.cuda._launch._stream", lambda: stream)
        algorithm.run(Address(x), Address(w), Address(y), WORKSPACE, PROBLEM, "default")
    return list(CALLS)


def test_a_replay_makes_the_runs_calls_at_other_addresses() -> None:
    algorithm = Stand()
    replay = _replay.record(algorithm, PROBLEM, "default", 0x1000, 0x2000, 0x3000, WORKSPACE)
    assert replay is not None
    assert CALLS == []  # the dry runs made no call
    for x, w, y in ((0x1000, 0x2000, 0x3000), (0x8_0010, 0x9_0020, 0xA_0030)):
        CALLS.clear()
        replay(11, x, w, y)
        replayed = list(CALLS)  # _direct starts CALLS afresh
        assert replayed == _direct(algorithm, 11, x, w, y)
    launch, gemm, last = replayed
    assert launch == ("launch", 11, 0x8_0010, WORKSPACE.ptr + 256, 1)
    assert gemm[1:4] == ("float32", 0, 1)
    assert gemm[7::3][:3] == (WORKSPACE.ptr + 256, 0x9_0020 + 64, 0xA_0030)  # A, B, C
    assert last == ("launch", 11, WORKSPACE.ptr + 256, 0xA_0030 + 32, 7)


def test_a_run_that_tests_a_larger_alignment_is_not_replayed() -> None:
    # Its flag differs between the dry runs (the shifts keep addresses modulo 16 only).
    assert _replay.record(Stand(modulo=32), PROBLEM, "default", 0x1000, 0x2000, 0x3000,
                          WORKSPACE) is None
    assert _replay.record(Stand(modulo=16), PROBLEM, "default", 0x1000, 0x2000, 0x3000,
                          WORKSPACE) is not None


def test_a_run_with_a_call_it_cannot_record_is_not_replayed() -> None:
    def called(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("a dry run launched a kernel")

    # A kernel without a buffer path launches through its own call: refused, not made.
    assert _replay.record(Stand(get_kernel=lambda _f, _n: called), PROBLEM, "default",
                          0x1000, 0x2000, 0x3000, WORKSPACE) is None

    class Raising(Stand):
        def run(self, *args: Any) -> None:
            raise ValueError("workspace too small")

    assert _replay.record(Raising(), PROBLEM, "default", 1, 2, 3, WORKSPACE) is None
    assert CALLS == []


def test_a_replayer_keeps_a_replay_per_lane_and_alignment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    algorithm = Stand()
    workspaces: list[Any] = []

    def workspace(lane: Any) -> Any:
        workspaces.append(lane)
        return WORKSPACE

    worked_out: list[tuple[int, ...]] = []
    real = _replay.record

    def record(*args: Any) -> Any:
        worked_out.append(args[3:6])
        return real(*args)

    monkeypatch.setattr(_replay, "record", record)
    replayer = _replay.Replayer(algorithm, PROBLEM, "default", workspace)
    for lane, x in ((3, 0x1000), (3, 0x5000), (4, 0x5000), (3, 0x5008), (3, 0x6008)):
        CALLS.clear()
        replayer(lane, x, 0x2000, 0x3000)  # a tensor's addresses, as CudaRuntime.ready gives
        replayed = list(CALLS)
        assert replayed == _direct(algorithm, lane, x, 0x2000, 0x3000)
    # Worked out for lane 3, for lane 4, and for x 8 bytes past 16 (in lane 3): three times.
    assert worked_out == [(0x1000, 0x2000, 0x3000), (0x5000, 0x2000, 0x3000),
                          (0x5008, 0x2000, 0x3000)]
    assert workspaces == [3, 4, 3]


# Bug: a replay took its lane for the stream's handle, but the per-thread default stream's
# lane is (handle, thread) (algorithms.cuda._lanes): its launches would get the pair.
def test_a_replay_on_a_threads_default_stream_launches_on_its_handle() -> None:
    algorithm = Stand()
    replayer = _replay.Replayer(algorithm, PROBLEM, "default", lambda lane: WORKSPACE)
    stream = _lanes.PER_THREAD_STREAM
    for _ in range(2):  # worked out, then replayed
        CALLS.clear()
        replayer(_lanes.lane_of(stream), 0x1000, 0x2000, 0x3000)
        assert list(CALLS) == _direct(algorithm, stream, 0x1000, 0x2000, 0x3000)


class Array:
    """A CuPy-like array: its address read through `.data.ptr`."""

    def __init__(self, ptr: int) -> None:
        self.data = Address(ptr)


@pytest.mark.parametrize("kind", [int, Array])  # a tensor's address, or a CuPy array
def test_a_runner_runs_what_it_does_not_replay(kind: Any) -> None:
    ran: list[tuple[Any, ...]] = []
    for algorithm, runner in ((Stand(modulo=32), _replay.Replayer),  # cannot be replayed
                              (Stand(), _replay.Runner)):  # not offered
        made = runner(algorithm, PROBLEM, "default", lambda _lane: WORKSPACE)
        CALLS.clear()
        made(5, kind(0x1000), kind(0x2000), kind(0x3000))
        ran.append(tuple(CALLS))
        assert list(ran[-1]) == _direct(algorithm, 5, 0x1000, 0x2000, 0x3000)
    assert all(ran)


def test_replays_are_offered_by_replayable_algorithms_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from algorithms.cuda import direct, fft, implicit_gemm_tc

    def runner(algorithm: Any, config: str) -> Any:
        return algorithm.direct_runner(PROBLEM, config, lambda _lane: None)

    assert type(runner(direct.DirectCuda(), "8x8k16")) is _replay.Replayer
    assert type(runner(implicit_gemm_tc.ImplicitGemmTcCuda(), "64x64")) is _replay.Replayer
    assert type(runner(fft.FftCuda(), "default")) is _replay.Runner  # cuFFT: not recorded
    monkeypatch.setenv(_replay.ENV, "0")
    assert type(runner(direct.DirectCuda(), "8x8k16")) is _replay.Runner


class RefusedOnce(Stand):
    """A run whose first attempt meets a stream that captures a CUDA graph (split K's
    counters set up there are refused: algorithms.cuda._counters)."""

    def __init__(self) -> None:
        super().__init__()
        self.refusals = 1

    def run(self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem,
            config: str) -> None:
        if self.refusals:
            self.refusals -= 1
            raise _lanes.CaptureRefused("a cuFFT plan")
        super().run(x, w, y, workspace, problem, config)


# Bug: a refusal inside a capture was kept as "this run cannot be replayed", so after the
# caller did as the error said (a run outside the capture) that stream and alignment ran
# unreplayed for the plan's life, paying the algorithm's Python on every call.
def test_a_refusal_in_a_capture_is_passed_on_and_not_kept() -> None:
    algorithm = RefusedOnce()
    replayer = _replay.Replayer(algorithm, PROBLEM, "default", lambda lane: WORKSPACE)
    with pytest.raises(_lanes.CaptureRefused, match="run the plan once on that stream"):
        replayer(3, 0x1000, 0x2000, 0x3000)
    replayer(3, 0x1000, 0x2000, 0x3000)
    assert list(replayer._replays.values()) != [None] and len(replayer._replays) == 1
    CALLS.clear()
    replayer(3, 0x1000, 0x2000, 0x3000)
    assert list(CALLS) == _direct(algorithm, 3, 0x1000, 0x2000, 0x3000)


def test_a_replay_is_worked_out_ahead_without_running() -> None:
    algorithm = Stand()
    replayer = _replay.Replayer(algorithm, PROBLEM, "default", lambda lane: WORKSPACE)
    CALLS.clear()
    replayer.prepare(3, 0x1000, 0x2000, 0x3000)
    assert CALLS == [] and list(replayer._replays) == [(3, 0, 0, 0)]
    assert replayer._replays[(3, 0, 0, 0)] is not None
    kept = replayer._replays[(3, 0, 0, 0)]
    replayer.prepare(3, 0x5000, 0x2000, 0x3000)  # the same lane and alignment: kept
    replayer(3, 0x5000, 0x2000, 0x3000)
    assert replayer._replays == {(3, 0, 0, 0): kept}
    assert list(CALLS) == _direct(algorithm, 3, 0x5000, 0x2000, 0x3000)
