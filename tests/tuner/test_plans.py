"""Plans: run with no lookup and no allocation, per-thread workspaces, the caller's arrays."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from algorithms.cpu.runtime import CpuRuntime
from algorithms.problem import ConvProblem
from algorithms.reference import reference_conv, relative_error, tolerance
from db.engine import open_store
from tests.tuner.fakes import random_inputs
from tuner import convolve, plan, run_convolution
from tuner.results import AlgorithmResult
from tuner.service import Service, service

PROBLEM = ConvProblem(n=2, c=4, h=9, w=8, k=6, r=3, s=3, pad=1)


def check(y: np.ndarray, x: np.ndarray, w: np.ndarray, problem: ConvProblem,
          algorithm: str) -> None:
    error = relative_error(y, reference_conv(x, w, problem))
    assert error <= tolerance(problem.dtype, algorithm), error


def test_plan_runs_into_out_without_lookup_or_allocation(
    db_url: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = plan(PROBLEM, device="cpu", db=db_url, algorithm="im2col_gemm")
    assert chosen.algorithm == "im2col_gemm" and chosen.workspace_bytes > 0
    chosen(*random_inputs(PROBLEM, rng))  # this thread's workspace exists from now on

    def forbidden(*_args: Any, **_kw: Any) -> None:
        raise AssertionError("the hot path allocated or looked something up")

    monkeypatch.setattr(CpuRuntime, "empty", forbidden)
    monkeypatch.setattr(CpuRuntime, "workspace", forbidden)
    monkeypatch.setattr(Service, "best", forbidden)
    out = np.full(PROBLEM.output_shape, np.nan, np.float32)
    for _ in range(2):  # fresh inputs each time: nothing stale is reused
        x, w = random_inputs(PROBLEM, rng)
        assert chosen(x, w, out=out) is out
        check(out, x, w, PROBLEM, chosen.algorithm)


def test_plans_are_cached_and_rebuilt_when_the_choice_changes(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    facade = Service(open_store(db_url))
    first = facade.plan(PROBLEM, "cpu")
    assert facade.plan(PROBLEM, "cpu") is first
    other = "direct" if first.algorithm != "direct" else "im2col_gemm"
    retuned = AlgorithmResult(algorithm=other, config="default", status="ok", time_ms=0.1,
                              workspace_bytes=0, source="measured here")
    monkeypatch.setattr(Service, "best", lambda *_a, **_k: retuned)
    rebuilt = facade.plan(PROBLEM, "cpu")
    assert rebuilt is not first and rebuilt.algorithm == other


def test_calls_reuse_their_plan_until_a_write_changes_the_answers(
    db_url: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # convolve() keeps its plan per call arguments: a later call must not look anything up,
    # and a write in this process (a re-tune) must end that at once (a stale plan would
    # keep running the old choice).
    x, w = random_inputs(PROBLEM, rng)
    run_convolution(x, w, padding=1, db=db_url, timed=False)  # tunes: a write, kept nothing
    first = run_convolution(x, w, padding=1, db=db_url, timed=False)  # kept from here on
    other = "direct" if first.algorithm != "direct" else "im2col_gemm"
    retuned = AlgorithmResult(algorithm=other, config="default", status="ok", time_ms=1e-6,
                              workspace_bytes=0, source="measured here")
    monkeypatch.setattr(Service, "best", lambda *_a, **_k: retuned)
    again = run_convolution(x, w, padding=1, db=db_url, timed=False)
    assert again.algorithm == first.algorithm  # no lookup: the patched answer is unseen
    service(db_url).tuner.find_candidates(PROBLEM, "cpu", mode="tune")  # stores: a write
    after = run_convolution(x, w, padding=1, db=db_url, timed=False)
    assert after.algorithm == other
    for y in (first.y, again.y, after.y):
        check(y, x, w, PROBLEM, after.algorithm)


def test_a_kept_call_skips_no_check_for_another_operand(
    db_url: str, rng: np.random.Generator
) -> None:
    # A kept call skips the operand checks: its key must tell apart every call those checks
    # would judge differently (another dtype, kind or place of either operand), or a
    # wrong call would run the kept plan (the messages below are the checks', not the
    # plan's own).
    torch = pytest.importorskip("torch")
    x, w = random_inputs(PROBLEM, rng)
    xt, wt = torch.from_numpy(x), torch.from_numpy(w)
    algorithm = run_convolution(x, w, padding=1, db=db_url).algorithm
    for _ in range(2):  # the second call is served from the kept plan
        check(convolve(xt, wt, padding=1, db=db_url).numpy(), x, w, PROBLEM, algorithm)
    with pytest.raises(ValueError, match="x is float32 but w is float64"):
        convolve(xt, wt.double(), padding=1, db=db_url)
    with pytest.raises(ValueError, match="x has dtype 'int32'"):
        convolve(xt.int(), wt, padding=1, db=db_url)
    with pytest.raises(ValueError, match="meta"):
        convolve(xt, wt.to("meta"), padding=1, db=db_url)
    with pytest.raises(ValueError, match="device='cuda:0' but the inputs live on cpu"):
        convolve(xt, wt, padding=1, db=db_url, device="cuda:0")
    mixed = convolve(x, wt, padding=1, db=db_url)  # NumPy and torch, both on the CPU
    check(np.asarray(mixed), x, w, PROBLEM, algorithm)


def test_a_call_with_list_geometry_still_runs(db_url: str, rng: np.random.Generator) -> None:
    # Lists are unhashable: such calls cannot be keyed, and must take the full path.
    x, w = random_inputs(PROBLEM, rng)
    for _ in range(2):
        y = convolve(x, w, padding=[1, 1], stride=[1, 1], db=db_url)
        check(y, x, w, PROBLEM, run_convolution(x, w, padding=1, db=db_url).algorithm)


def test_threads_share_a_plan_with_a_workspace_each(
    db_url: str, rng: np.random.Generator
) -> None:
    chosen = plan(PROBLEM, device="cpu", db=db_url, algorithm="im2col_gemm")
    inputs = [random_inputs(PROBLEM, rng) for _ in range(4)]
    outputs: list[Any] = [None] * 4
    workspaces: list[Any] = [None] * 4
    barrier = threading.Barrier(4)

    def work(i: int) -> None:
        barrier.wait()
        for _ in range(5):
            outputs[i] = chosen(*inputs[i])
        workspaces[i] = chosen.workspace()  # this thread's

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (x, w), y in zip(inputs, outputs, strict=True):
        check(y, x, w, PROBLEM, chosen.algorithm)
    mine = chosen.workspace()
    assert not any(np.shares_memory(a, b)
                   for i, a in enumerate([mine, *workspaces]) for b in workspaces[i:])


def test_the_plans_of_one_thread_share_its_scratch(db_url: str, rng: np.random.Generator
                                                  ) -> None:
    # Bug pinned: each CPU plan kept a workspace of its own, which the other layers of a
    # converted ResNet-50 had evicted from the caches by the time its layer came round
    # again: the convolutions took 9-11 ms more in the model's order than each alone (b1,
    # Intel Xeon, 2 cores). The plans of a thread now run in its one scratch.
    small = plan(PROBLEM, device="cpu", db=db_url, algorithm="im2col_gemm")
    wider = ConvProblem(n=2, c=6, h=11, w=10, k=5, r=3, s=3, pad=1)
    large = plan(wider, device="cpu", db=db_url, algorithm="im2col_gemm")
    assert 0 < small.workspace_bytes < large.workspace_bytes
    for _ in range(2):  # in turns, each finding the scratch as the other left it
        for chosen, problem in ((small, PROBLEM), (large, wider), (small, PROBLEM)):
            x, w = random_inputs(problem, rng)
            check(chosen(x, w), x, w, problem, chosen.algorithm)
    a, b = small.workspace(), large.workspace()
    assert (a.nbytes, b.nbytes) == (small.workspace_bytes, large.workspace_bytes)
    assert np.shares_memory(a, b) and a.ctypes.data == b.ctypes.data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"x": np.zeros((2, 4, 9, 9), np.float32)}, "x has shape"),
        ({"w": np.zeros((6, 4, 3, 3), np.float64)}, "w is float64"),
        ({"out": np.zeros((2, 6, 9, 9), np.float32)}, "out has shape"),
        ({"out": np.zeros((2, 6, 8, 9), np.float32).transpose(0, 1, 3, 2)},
         "out must be C-contiguous"),
    ],
)
def test_plan_refuses_arrays_that_do_not_fit(
    db_url: str, rng: np.random.Generator, change: dict[str, Any], message: str
) -> None:
    chosen = plan(PROBLEM, device="cpu", db=db_url)
    x, w = random_inputs(PROBLEM, rng)
    arrays = {"x": x, "w": w, "out": None, **change}
    with pytest.raises(ValueError, match=message):
        chosen(arrays["x"], arrays["w"], out=arrays["out"])


def test_convolve_writes_out_and_untimed_runs_report_no_time(
    db_url: str, rng: np.random.Generator
) -> None:
    x, w = random_inputs(PROBLEM, rng)
    out = np.empty(PROBLEM.output_shape, np.float32)
    assert convolve(x, w, padding=1, db=db_url, out=out) is out
    untimed = run_convolution(x, w, padding=1, db=db_url, timed=False)
    timed = run_convolution(x, w, padding=1, db=db_url)
    assert untimed.elapsed_ms is None and timed.elapsed_ms is not None
    assert timed.elapsed_ms > 0
    for y in (out, untimed.y, timed.y):
        check(y, x, w, PROBLEM, timed.algorithm)


def test_torch_in_torch_out(db_url: str) -> None:
    # Issue 9: a CPU torch tensor came back as a NumPy array, and one that requires grad
    # raised a raw RuntimeError.
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 4, 9, 8, requires_grad=True)
    w = torch.randn(6, 4, 3, 3)
    y = convolve(x, w, padding=1, db=db_url)
    assert isinstance(y, torch.Tensor) and y.shape == (2, 6, 9, 8)
    expected = torch.nn.functional.conv2d(x.detach().double(), w.double(), padding=1)
    assert torch.allclose(y.double(), expected, rtol=1e-4, atol=1e-4)
    out = torch.empty(2, 6, 9, 8)
    assert convolve(x, w, padding=1, db=db_url, out=out) is out
    assert torch.allclose(out, y)
    xb, wb = x.detach().bfloat16(), w.bfloat16()
    half = convolve(xb, wb, padding=1, db=db_url)
    assert half.dtype == torch.bfloat16
    # Against the same rounded inputs: what is left is bfloat16's output rounding (2**-9).
    rounded = torch.nn.functional.conv2d(xb.double(), wb.double(), padding=1)
    assert torch.allclose(half.double(), rounded, rtol=1e-2, atol=1e-2)


def test_non_finite_inputs_pass_through_unless_checked(
    db_url: str, rng: np.random.Generator
) -> None:
    # Issue 12 (9): NaN/inf flowed through with no documented policy. The policy: pass
    # through (like cuDNN) by default; check_finite=True refuses them, naming the input.
    x, w = random_inputs(PROBLEM, rng)
    x[0, 0, 0, 0] = np.nan
    y = convolve(x, w, padding=1, db=db_url)
    assert np.isnan(y).any()
    with pytest.raises(ValueError, match="x contains NaN"):
        convolve(x, w, padding=1, db=db_url, check_finite=True)
    x[0, 0, 0, 0] = 0.5
    w[0, 0, 0, 0] = np.inf
    with pytest.raises(ValueError, match="w contains NaN or infinity"):
        convolve(x, w, padding=1, db=db_url, check_finite=True)


class ReadyCpu(CpuRuntime):
    """A CPU runtime that finds NumPy float32 operands of the right shapes ready, as a GPU
    runtime finds plain tensors (tuner.plans' direct path), on a lane of its own."""

    LANE = "ready lane"
    shares_scratch = False  # as on a GPU: a workspace per plan and lane

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[Any, ...]] = []
        self.made: list[tuple[int, ...]] = []

    def ready(self, x: Any, w: Any, out: Any, shapes: tuple[tuple[int, ...], ...],
              storage: str) -> tuple[Any, Any, Any, Any] | None:
        self.asked.append((shapes, storage))
        if all(isinstance(a, np.ndarray) and a.shape == s and a.dtype == storage
               and a.flags.c_contiguous for a, s in zip((x, w, out), shapes, strict=True)):
            return self.LANE, x, w, out
        return None

    def output(self, x: Any, shape: tuple[int, ...], storage: str) -> Any | None:
        # As a GPU runtime makes a result beside its own arrays: here, beside C-ordered ones.
        self.made.append(shape)
        ordered = isinstance(x, np.ndarray) and x.flags.c_contiguous
        return np.empty(shape, storage) if ordered else None


def _ready_plan(algorithm: str = "im2col_gemm", direct: bool | None = None
                ) -> tuple[Any, ReadyCpu]:
    from algorithms.registry import get_algorithm
    from tuner.plans import Plan

    runtime = ReadyCpu()
    implementation = get_algorithm("cpu", algorithm)
    choice = AlgorithmResult(algorithm=algorithm, config="default", status="ok", time_ms=1.0,
                             workspace_bytes=implementation.workspace_bytes(PROBLEM, "default"))
    return Plan(PROBLEM, "cpu", choice, implementation, runtime, direct), runtime


def test_ready_operands_run_as_they_are_with_their_lanes_workspace(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen, runtime = _ready_plan()
    assert chosen.workspace_bytes > 0
    out = np.full(PROBLEM.output_shape, np.nan, np.float32)
    x, w = random_inputs(PROBLEM, rng)
    assert chosen(x, w, out=out) is out
    check(out, x, w, PROBLEM, chosen.algorithm)
    assert runtime.asked == [(PROBLEM.operand_shapes, "float32")]
    lane_workspace = chosen._workspaces[ReadyCpu.LANE]  # made on the lane's first call

    def forbidden(*_args: Any, **_kw: Any) -> None:
        raise AssertionError("the direct path adopted, converted or allocated")

    for name in ("adopt", "contiguous", "caller_stream", "empty", "workspace", "lane"):
        monkeypatch.setattr(ReadyCpu, name, forbidden)
    x, w = random_inputs(PROBLEM, rng)
    out[...] = np.nan
    assert chosen(x, w, out=out) is out
    check(out, x, w, PROBLEM, chosen.algorithm)
    assert chosen._workspaces[ReadyCpu.LANE] is lane_workspace


def test_a_result_made_beside_ready_operands_takes_the_direct_path(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen, runtime = _ready_plan()
    chosen(*random_inputs(PROBLEM, rng), out=np.empty(PROBLEM.output_shape, np.float32))

    def forbidden(*_args: Any, **_kw: Any) -> None:
        raise AssertionError("the checked path ran")

    for name in ("adopt", "contiguous", "caller_stream", "empty"):
        monkeypatch.setattr(ReadyCpu, name, forbidden)
    x, w = random_inputs(PROBLEM, rng)
    y = chosen(x, w)  # no out: the runtime makes one, and the call goes direct
    check(y, x, w, PROBLEM, chosen.algorithm)
    assert runtime.made == [PROBLEM.output_shape] and len(runtime.asked) == 2


def test_ready_operands_go_through_the_algorithms_direct_runner(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A CUDA algorithm offers a direct runner (algorithms.cuda._replay); the plan makes it
    # once and runs ready operands through it with their lane, never calling `run` itself.
    from algorithms.registry import get_algorithm

    implementation = get_algorithm("cpu", "im2col_gemm")
    original = implementation.run
    made: list[tuple[Any, ...]] = []

    def direct_runner(_self: Any, problem: Any, config: str, workspace: Any) -> Any:
        def run(lane: Any, x: Any, w: Any, y: Any) -> None:
            made.append((lane, x, w, y))
            original(x, w, y, workspace(lane), problem, config)

        made.append((problem, config))
        return run

    monkeypatch.setattr(type(implementation), "direct_runner", direct_runner, raising=False)
    chosen, _runtime = _ready_plan()
    assert made == [(PROBLEM, "default")]
    monkeypatch.setattr(type(implementation), "run", None)  # only through the runner
    x, w = random_inputs(PROBLEM, rng)
    out = np.full(PROBLEM.output_shape, np.nan, np.float32)
    assert chosen(x, w, out=out) is out
    assert made[1][0] == ReadyCpu.LANE and made[1][1] is x and made[1][3] is out
    monkeypatch.undo()
    check(out, x, w, PROBLEM, chosen.algorithm)


def test_operands_not_ready_take_the_checked_path(rng: np.random.Generator) -> None:
    chosen, runtime = _ready_plan()
    x, w = random_inputs(PROBLEM, rng)
    # No out, and none made beside a Fortran-ordered x: the runtime is not asked.
    y = chosen(np.asfortranarray(x), w)
    check(y, x, w, PROBLEM, chosen.algorithm)
    assert runtime.asked == [] and runtime.made == [PROBLEM.output_shape]
    out = np.full(PROBLEM.output_shape, np.nan, np.float32)
    assert chosen(np.asfortranarray(x), w, out=out) is out  # not ready: copied
    check(out, x, w, PROBLEM, chosen.algorithm)
    assert len(runtime.asked) == 1
    with pytest.raises(ValueError, match="x has shape"):  # the checked path names it
        chosen(x[:1], w, out=out)
    assert ReadyCpu.LANE not in chosen._workspaces


def test_the_direct_path_can_be_turned_off(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner.plans import FAST_CALL_ENV

    monkeypatch.setenv(FAST_CALL_ENV, "0")
    x, w = random_inputs(PROBLEM, rng)
    out = np.empty(PROBLEM.output_shape, np.float32)
    for direct in (None, False):  # the environment's word, or the plan's own
        if direct is False:
            monkeypatch.delenv(FAST_CALL_ENV)
        chosen, runtime = _ready_plan(direct=direct)
        assert chosen(x, w, out=out) is out
        check(out, x, w, PROBLEM, chosen.algorithm)
        check(chosen(x, w), x, w, PROBLEM, chosen.algorithm)
        assert runtime.asked == [] and runtime.made == []


def test_a_thread_s_scratch_is_cut_after_a_while_of_small_needs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Bug (a review of resource lifetimes): one large call kept its scratch for the
    # thread's life (each of a server's worker threads its own largest); then (a review of
    # the session's changes) cut after 256 small calls, a deep model's pass of 300 small
    # calls cut and grew it at every pass.
    import threading

    from algorithms.cpu import runtime as cpu_runtime

    now = [1000.0]
    monkeypatch.setattr(cpu_runtime.time, "monotonic", lambda: now[0])
    seen: list[int] = []

    def work() -> None:
        runtime = cpu_runtime.CpuRuntime()
        big = runtime.scratch(1 << 22).ctypes.data
        for _ in range(1000):  # a pass of many small calls, quickly: kept
            assert runtime.scratch(1024).ctypes.data == big
        now[0] += cpu_runtime.SHRINK_AFTER_S / 2
        assert runtime.scratch(1 << 21).ctypes.data == big  # a quarter or more: renews it
        now[0] += cpu_runtime.SHRINK_AFTER_S * 0.9
        assert runtime.scratch(1024).ctypes.data == big
        now[0] += cpu_runtime.SHRINK_AFTER_S * 0.2
        seen.append(runtime.scratch(1024).nbytes)
        seen.append(cpu_runtime._SCRATCH.buffer.nbytes)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [1024, 1024]
