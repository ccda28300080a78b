"""The in-process call path of issue 9 (a cached convolve() at framework speed): what a
call's kept plan is kept under, and what ends a kept plan or a kept answer (what a call is
checked for is in test_call_checks.py).

Each test pins a gap that a mutation review of tuner/calls.py, tuner/plans.py,
tuner/service.py and tuner/answers.py found (2026-12: a mutant of the code that the suite
before these tests let pass); its first comment names the gap."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine

from algorithms.problem import ConvProblem
from algorithms.reference import reference, relative_error, tolerance
from db.engine import Store, open_store
from tests.tuner.fakes import small_problem
from tuner import (
    convolve,
    convolve_backward_data,
    convolve_backward_filter,
    plan,
    problem_for,
    run_convolution,
)
from tuner import results as R
from tuner.devices import identify
from tuner.results import AlgorithmResult
from tuner.service import Service, service
from tuner.tuning import Tuner

torch = pytest.importorskip("torch")


def _operands(rng: np.random.Generator, x_shape: tuple[int, ...] = (2, 4, 7, 6),
              w_shape: tuple[int, ...] = (5, 4, 3, 3)) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    return x, w


def _close(y: Any, a: np.ndarray, b: np.ndarray, problem: ConvProblem,
           algorithm: str = "im2col_gemm") -> None:
    """`y` is `problem`'s result of (a, b) against the float64 reference."""
    expected = reference(a.astype(np.float64), b.astype(np.float64), problem)
    got = y.numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    assert got.shape == expected.shape
    error = relative_error(got, expected)
    assert error <= tolerance(problem.dtype, algorithm, problem.math), error


def _other(algorithm: str) -> AlgorithmResult:
    """A re-tuned answer naming another algorithm than `algorithm`."""
    name = "direct" if algorithm != "direct" else "im2col_gemm"
    return AlgorithmResult(algorithm=name, config="default", status="ok", time_ms=1e-6,
                           workspace_bytes=0, source="measured here")


def _kept(x: np.ndarray, w: np.ndarray, db_url: str) -> str:
    """The algorithm of a call on (x, w) once its plan is kept (the first call tunes: a
    write, so its plan is not served later)."""
    run_convolution(x, w, padding=1, device="cpu", db=db_url, timed=False)
    return run_convolution(x, w, padding=1, device="cpu", db=db_url, timed=False).algorithm


def _foreign_write(db_url: str, problem: ConvProblem) -> None:
    """A write of another process: a re-tune through an engine of its own, which reaches no
    answer cache of this process."""
    engine = create_engine(db_url, connect_args={"timeout": 30})
    try:
        Tuner(Store(db_url, engine)).find(problem, "cpu", mode="tune")
    finally:
        engine.dispose()


WRITES = {
    "import": lambda db_url, _problem: service(db_url).import_bundle(
        service(db_url).export_bundle()),
    "prune": lambda db_url, _problem: service(db_url).prune(
        device=identify("cpu").fingerprint, delete=True),
    "another process": _foreign_write,
}


# Mutation gap: a write of this process other than a tuning (an import, a prune) dropped the
# kept answers but left the kept call plans served (AnswerCache.clear without its
# generation step, or Service.import_bundle / prune not clearing at all), and another
# process's write, once seen by a check, did the same (_drop_all without its step).
@pytest.mark.parametrize("write", sorted(WRITES))
def test_every_write_ends_the_kept_call_plans(
    write: str, db_url: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Checks of the store's counter: never due for this process's own writes (they must
    # end the kept plans at once), at every call for another process's.
    monkeypatch.setenv("CONVTUNE_CACHE_CHECK_S", "0" if write == "another process" else "3600")
    x, w = _operands(rng)
    first = _kept(x, w, db_url)
    retuned = _other(first)
    monkeypatch.setattr(Service, "best", lambda *_a, **_k: retuned)
    assert run_convolution(x, w, padding=1, device="cpu", db=db_url).algorithm == first
    problem = problem_for(x.shape, w.shape, padding=1)
    WRITES[write](db_url, problem)
    x, w = _operands(rng)  # fresh operands of the same call
    after = run_convolution(x, w, padding=1, device="cpu", db=db_url)
    assert after.algorithm == retuned.algorithm
    _close(after.y, x, w, problem, after.algorithm)


# Mutation gap: a call's answer token taken after its planning (or replaced when kept) kept a
# plan found while another thread's write committed, and served it after that write.
def test_a_plan_found_during_a_write_is_not_served_after_it(
    db_url: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVTUNE_CACHE_CHECK_S", "3600")
    x, w = _operands(rng)
    first = _kept(x, w, db_url)
    facade = service(db_url)
    facade._call_plans.clear()  # the call is new again: it plans
    retuned = _other(first)
    real_plan = Service.plan

    def plan_during_a_write(self: Service, *args: Any, **kwargs: Any) -> Any:
        found = real_plan(self, *args, **kwargs)  # the old choice
        # Meanwhile another thread re-tuned: a new answer, its write reported.
        monkeypatch.setattr(Service, "best", lambda *_a, **_k: retuned)
        self.answers.invalidate(identify("cpu").fingerprint, found.problem)
        return found

    monkeypatch.setattr(Service, "plan", plan_during_a_write)
    assert run_convolution(x, w, padding=1, device="cpu", db=db_url).algorithm == first
    monkeypatch.setattr(Service, "plan", real_plan)
    after = run_convolution(x, w, padding=1, device="cpu", db=db_url)
    assert after.algorithm == retuned.algorithm
    _close(after.y, x, w, after.problem, after.algorithm)


# Mutation gap: Service._answer taking its answer token after the find kept an answer
# computed while this process's re-tune of the problem committed.
def test_an_answer_found_during_a_write_is_not_kept(db_url: str) -> None:
    facade = Service(open_store(db_url), cache_check_s=3600)
    problem = small_problem(h=int(np.random.default_rng().integers(5, 10)))
    facade.find(problem, "cpu")  # tunes
    real = facade.tuner.find_candidates

    def found_during_a_write(*args: Any, **kwargs: Any) -> Any:
        ranked = real(*args, **kwargs)  # read before the write below committed
        facade.answers.invalidate(identify("cpu").fingerprint, problem)
        return ranked

    facade.tuner.find_candidates = found_during_a_write  # type: ignore[method-assign]
    facade.find(problem, "cpu")
    assert facade.cached_find(problem, "cpu") is None
    facade.tuner.find_candidates = real  # type: ignore[method-assign]
    facade.find(problem, "cpu")
    assert facade.cached_find(problem, "cpu") is not None


# Mutation gap: a call key without the direction: backward_data and backward_filter calls
# whose operands and given shape all have one shape (n = c = k, a 3x3 image, filter and
# gradient, padding 1) found each other's plan.
def test_the_two_backward_directions_of_one_shape_keep_their_own_plans(
    db_url: str, rng: np.random.Generator
) -> None:
    shape = (2, 2, 3, 3)
    for _ in range(2):  # the second round is served from the kept plans
        a, b = _operands(rng, shape, shape)
        dx = convolve_backward_data(a, b, shape, padding=1, device="cpu", db=db_url,
                                    algorithm="direct")  # named: nothing to tune
        _close(dx, a, b, problem_for(shape, shape, padding=1, direction="backward_data"))
        dw = convolve_backward_filter(a, b, shape, padding=1, device="cpu", db=db_url,
                                      algorithm="direct")
        _close(dw, a, b, problem_for(shape, shape, padding=1, direction="backward_filter"))


# Mutation gap: a call key without the x shape a backward_data call is given: with stride 2,
# x of 7x7 and of 8x8 give one dy shape, so the kept 7x7 plan answered the 8x8 call.
def test_backward_data_calls_differing_in_x_shape_only_keep_their_own_plans(
    db_url: str, rng: np.random.Generator
) -> None:
    w = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
    for _ in range(2):
        for size in (7, 8):
            x_shape = (2, 4, size, size)
            problem = problem_for(x_shape, w.shape, stride=2, padding=1,
                                  direction="backward_data")
            dy = rng.standard_normal(problem.operand_shapes[0]).astype(np.float32)
            assert dy.shape == (2, 5, 4, 4)
            _close(convolve_backward_data(dy, w, x_shape, stride=2, padding=1, device="cpu",
                                          db=db_url, algorithm="direct"), dy, w, problem)


# Mutation gap: a call key without an operand's shape (x's batch, w's output channels) or a
# geometry value (stride, padding, dilation): the kept plan of another problem answered.
@pytest.mark.parametrize(("x_shape", "w_shape", "geometry"), [
    ((3, 4, 7, 6), (5, 4, 3, 3), {"padding": 1}),  # another batch
    ((2, 4, 7, 6), (6, 4, 3, 3), {"padding": 1}),  # another k
    ((2, 4, 7, 6), (5, 4, 3, 3), {"padding": 1, "stride": 2}),
    ((2, 4, 7, 6), (5, 4, 3, 3), {"padding": 2}),
    ((2, 4, 7, 6), (5, 4, 3, 3), {"padding": 1, "dilation": 2}),
])
def test_a_call_differing_from_a_kept_one_in_one_shape_or_geometry_value_runs_its_own(
    db_url: str, rng: np.random.Generator, x_shape: tuple[int, ...],
    w_shape: tuple[int, ...], geometry: dict[str, Any],
) -> None:
    for _ in range(2):  # kept from the second call on
        x, w = _operands(rng)
        _close(convolve(x, w, padding=1, device="cpu", db=db_url, algorithm="im2col_gemm"),
               x, w, problem_for(x.shape, w.shape, padding=1))  # named: nothing to tune
    for _ in range(2):
        x, w = _operands(rng, x_shape, w_shape)
        _close(convolve(x, w, device="cpu", db=db_url, algorithm="im2col_gemm", **geometry),
               x, w, problem_for(x.shape, w.shape, **geometry))


# Mutation gap: a call key without `groups`: with one x and w shape only one groups value is
# valid, and the kept plan of groups=1 ran a call with groups=2 instead of refusing it.
def test_another_groups_value_than_a_kept_call_s_is_checked(
    db_url: str, rng: np.random.Generator
) -> None:
    x, w = _operands(rng)
    _kept(x, w, db_url)
    with pytest.raises(ValueError, match=r"^shape mismatch: x has c=4 channels but w has 4 "
                                         r"input channels per group x groups=2 = 8$"):
        convolve(x, w, padding=1, groups=2, device="cpu", db=db_url)


# Mutation gap: a call key without `math`: a kept fp32 call's plan ran a tf32 call (and an
# unknown math went unchecked).
def test_a_call_with_another_math_than_a_kept_one_runs_its_own_plan(
    db_url: str, rng: np.random.Generator
) -> None:
    x, w = _operands(rng)
    _kept(x, w, db_url)
    for _ in range(2):
        ran = run_convolution(x, w, padding=1, device="cpu", db=db_url, math="tf32")
        assert ran.problem.math == "tf32"
        _close(ran.y, x, w, ran.problem, ran.algorithm)
    with pytest.raises(ValueError, match=r"^math must be one of \['fp32', 'tf32'\], got 'fp16'$"):
        convolve(x, w, padding=1, device="cpu", db=db_url, math="fp16")


# Mutation gap: a call key without the workspace limit, or without its type (False == 0):
# a kept call's plan answered a call whose limit its algorithm exceeds, or whose limit is
# no number of bytes at all.
def test_a_call_with_another_workspace_limit_than_a_kept_one_is_checked(
    db_url: str, rng: np.random.Generator
) -> None:
    x, w = _operands(rng)
    named: dict[str, Any] = {"padding": 1, "device": "cpu", "db": db_url,
                             "algorithm": "im2col_gemm"}
    for _ in range(2):  # an int limit, as the one below: only their values differ
        ran = run_convolution(x, w, workspace_limit=1 << 40, **named)
        assert ran.algorithm == "im2col_gemm"
        _close(ran.y, x, w, ran.problem)
    with pytest.raises(ValueError, match=r"^algorithm 'im2col_gemm' needs more workspace than "
                                         r"workspace_limit=0"):
        convolve(x, w, workspace_limit=0, **named)
    named["algorithm"] = "direct"
    for _ in range(2):
        ran = run_convolution(x, w, workspace_limit=0, **named)
        _close(ran.y, x, w, ran.problem, ran.algorithm)
    with pytest.raises(ValueError, match=r"^workspace_limit must be a whole number of bytes or "
                                         r"None, got False$"):
        convolve(x, w, workspace_limit=False, **named)  # type: ignore[arg-type]


# Mutation gap: a call key without the algorithm: a kept call naming one algorithm ran a
# call naming another.
def test_a_call_naming_another_algorithm_than_a_kept_one_runs_it(
    db_url: str, rng: np.random.Generator
) -> None:
    x, w = _operands(rng)
    for _ in range(2):
        for name in ("direct", "fft", "im2col_gemm"):
            ran = run_convolution(x, w, padding=1, device="cpu", db=db_url, algorithm=name)
            assert ran.algorithm == name
            _close(ran.y, x, w, ran.problem, name)


class _Foreign:
    """An array of a third library (neither NumPy nor torch) that says where it lives by
    DLPack: on the host it hands NumPy its data, on a GPU it has none to hand."""

    def __init__(self, data: np.ndarray, index: int | None = None) -> None:
        self.data, self.index = data, index
        self.shape, self.dtype = data.shape, data.dtype

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0) if self.index is None else (2, self.index)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if self.index is not None:
            raise TypeError("device memory")
        return self.data


# Mutation gap: a call key without the place of an array that is neither NumPy nor torch:
# after a kept call on the host, the same kind of array on a GPU found the host's plan.
def test_a_foreign_array_on_another_place_than_a_kept_call_s_is_checked(
    db_url: str, rng: np.random.Generator
) -> None:
    x, w = _operands(rng)
    for _ in range(2):
        _close(convolve(_Foreign(x), _Foreign(w), padding=1, db=db_url), x, w,
               problem_for(x.shape, w.shape, padding=1))
    with pytest.raises(ValueError, match=r"^x is on cuda:0 but w is on cpu$"):
        convolve(_Foreign(x, 0), _Foreign(w), padding=1, db=db_url)
    with pytest.raises(ValueError, match=r"^x is on cpu but w is on cuda:1$"):
        convolve(_Foreign(x), _Foreign(w, 1), padding=1, db=db_url)


# Mutation gap: a plan called with a torch `out` returned the NumPy view it wrote through,
# not `out` itself (convolve hid it: it returns its own `out`).
def test_a_plan_returns_a_torch_out_itself(db_url: str, rng: np.random.Generator) -> None:
    x, w = _operands(rng)
    problem = problem_for(x.shape, w.shape, padding=1)
    found = plan(problem, device="cpu", db=db_url, algorithm="direct")
    out = torch.full(problem.output_shape, float("nan"))
    assert found(torch.from_numpy(x), torch.from_numpy(w), out=out) is out
    _close(out, x, w, problem, "direct")
    mixed = torch.full(problem.output_shape, float("nan"))
    assert found(x, w, out=mixed) is mixed  # NumPy operands, a torch out
    _close(mixed, x, w, problem, "direct")


def _result(algorithm: str, config: str) -> AlgorithmResult:
    return AlgorithmResult(algorithm=algorithm, config=config, status="ok", time_ms=1e-3,
                           workspace_bytes=0, source="measured here")


# Mutation gap: a kept plan compared with a new answer by its algorithm alone: a re-tune that
# chose another configuration of the same algorithm went on running the old one.
def test_a_kept_plan_is_rebuilt_when_only_the_configuration_changes(
    db_url: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    facade = Service(open_store(db_url), cache_check_s=3600)
    x, w = _operands(rng)
    problem = problem_for(x.shape, w.shape, padding=1)
    configs = ("bn4096_bk256", "bn1024_bk64")
    monkeypatch.setattr(Service, "best", lambda *_a, **_k: _result("implicit_gemm", configs[0]))
    first = facade.plan(problem, "cpu")
    assert facade.plan(problem, "cpu") is first
    monkeypatch.setattr(Service, "best", lambda *_a, **_k: _result("implicit_gemm", configs[1]))
    rebuilt = facade.plan(problem, "cpu")
    assert (rebuilt.algorithm, rebuilt.config) == ("implicit_gemm", configs[1])
    _close(rebuilt(x, w), x, w, problem, "implicit_gemm")


# Mutation gap: plans kept without their device: one problem's plan for the CPU answered a
# plan asked for a GPU whose answer names the same algorithm and configuration.
def test_plans_are_kept_per_device(
    db_url: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from algorithms.cpu.runtime import CpuRuntime
    from tuner import service as service_module

    # The "GPU" runs the CPU's algorithms here: only which plan comes back is looked at.
    monkeypatch.setattr(service_module, "backend_of", lambda _device: "cpu")
    monkeypatch.setattr(service_module, "get_runtime", lambda _device: CpuRuntime())
    monkeypatch.setattr(Service, "best", lambda *_a, **_k: _result("direct", "default"))
    facade = Service(open_store(db_url), cache_check_s=3600)
    x, w = _operands(rng)
    problem = problem_for(x.shape, w.shape, padding=1)
    on_cpu = facade.plan(problem, "cpu")
    on_gpu = facade.plan(problem, "cuda:1")
    assert (on_cpu.device, on_gpu.device) == ("cpu", "cuda:1")
    assert facade.plan(problem, "cpu") is on_cpu and facade.plan(problem, "cuda:1") is on_gpu


def _ranked(source: str) -> list[AlgorithmResult]:
    return [AlgorithmResult(algorithm="direct", config="default", status="ok", time_ms=0.5,
                            workspace_bytes=0, source=source)]


# Mutation gap: Service._answer looked mode "tune" up in the answer cache like any other
# mode: where the tuning's answer was kept (a tuner that stored nothing), the next "tune"
# was answered from memory without measuring.
def test_mode_tune_never_answers_from_memory(db_url: str) -> None:
    facade = Service(open_store(db_url), cache_check_s=3600)
    asked: list[str] = []

    def find_candidates(*_args: Any, mode: str, **_kw: Any) -> list[AlgorithmResult]:
        asked.append(mode)  # measures, here storing nothing: no write to drop an answer
        return _ranked(R.FRESH)

    facade.tuner.find_candidates = find_candidates  # type: ignore[method-assign,assignment]
    problem = small_problem()
    for _ in range(3):
        assert facade.find(problem, "cpu", mode="tune")[0].algorithm == "direct"
    assert asked == ["tune"] * 3
    assert facade.cached_find(problem, "cpu", mode="tune") is None


# Mutation gap: an answer kept in memory went on calling what one find measured "fresh"
# (measured by this call) on every later find, instead of "measured here".
def test_a_kept_answer_calls_its_measurements_measured_here(db_url: str) -> None:
    facade = Service(open_store(db_url), cache_check_s=3600)
    facade.tuner.find_candidates = (  # type: ignore[method-assign]
        lambda *_a, **_k: _ranked(R.FRESH))
    problem = small_problem()
    facade.find(problem, "cpu")
    kept = facade.cached_find(problem, "cpu")
    assert kept is not None and [r.source for r in kept] == [R.MEASURED_HERE]
    assert [r.source for r in facade.find(problem, "cpu")] == [R.MEASURED_HERE]


# Mutation gap: answers kept without their workspace limit: after an unlimited find was kept,
# a find under workspace_limit=0 was answered with algorithms that need workspace.
def test_answers_are_kept_per_workspace_limit(db_url: str) -> None:
    facade = Service(open_store(db_url), cache_check_s=3600)
    problem = small_problem()
    facade.find(problem, "cpu")  # tunes
    for _ in range(2):  # the second from memory
        unlimited = facade.find_candidates(problem, "cpu")
        assert any(r.usable and r.workspace_bytes > 0 for r in unlimited)
    for _ in range(2):
        limited = facade.find_candidates(problem, "cpu", workspace_limit=0)
        usable = [r for r in limited if r.usable]
        assert usable and all(r.workspace_bytes == 0 for r in usable)
        assert facade.best(problem, "cpu", workspace_limit=0).workspace_bytes == 0


# Mutation gap: the Service of a store closed since (db.engine.MAX_STORES, close_stores) was
# still handed out, with its kept answers and plans, once the store was open again.
def test_a_store_opened_again_gets_a_new_service(db_url: str) -> None:
    from db.engine import close_stores
    from tuner.service import opened_service

    before = service(db_url)
    close_stores()
    assert opened_service(db_url) is None
    store = open_store(db_url)  # opened again, not through service()
    assert opened_service(db_url) is None
    again = service(db_url)
    assert again is not before and again.store is store
    assert opened_service(db_url) is again


# Mutation gap: Service.best returned a first result that is not usable (a failed or
# over-limit configuration) instead of raising NoUsableAlgorithm.
def test_best_of_unusable_results_is_no_usable_algorithm(db_url: str) -> None:
    from tuner.errors import NoUsableAlgorithm

    facade = Service(open_store(db_url), cache_check_s=3600)
    failed = AlgorithmResult(algorithm="direct", config="default", status="failed",
                             time_ms=None, workspace_bytes=0, source=R.MEASURED_HERE,
                             error="RuntimeError: broken")
    facade.tuner.find_candidates = lambda *_a, **_k: [failed]  # type: ignore[method-assign]
    for _ in range(2):  # the second from memory
        with pytest.raises(NoUsableAlgorithm):
            facade.best(small_problem(), "cpu")
