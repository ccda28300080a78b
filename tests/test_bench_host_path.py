"""The plan host-path benchmark on the CPU backend: its steps add up, its rows are real."""

from __future__ import annotations

from typing import Any

import pytest

from algorithms.cpu.runtime import CpuRuntime
from algorithms.problem import ConvProblem
from benchmarks import bench_host_path as B

TINY = ConvProblem(n=1, c=4, h=6, w=6, k=4, r=3, s=3, pad=1)


def test_host_us_synchronises_between_bursts_never_inside_one() -> None:
    events: list[str] = []
    got = B.host_us(lambda: events.append("call"), lambda: events.append("sync"),
                    budget_s=0.0)
    assert got > 0
    bursts = "".join("c" if e == "call" else "|" for e in events).split("|")
    # The first two calls probe (each followed by a sync); then 5 bursts of equal size.
    assert bursts[:2] == ["c", "c"] and len(set(bursts[2:-1])) == 1
    assert len(bursts[2:-1]) == 5 and len(bursts[2]) > 1


def test_plan_steps_add_up_to_the_whole_call() -> None:
    runtime = CpuRuntime()
    plan = B.make_plan(TINY, "cpu", "direct", "default")
    times = B.step_times(plan, B.native_operands(runtime, TINY), runtime.synchronize)
    steps = [k for k in times if not k.startswith(("whole plan call", "unaccounted",
                                                    "device current", "ready"))]
    assert len(steps) == 7 and all(times[k] > 0 for k in steps)
    assert times["unaccounted"] == pytest.approx(
        times["whole plan call, checked path"] - sum(times[k] for k in steps))
    assert times["whole plan call"] > 0


def test_a_layer_names_its_problem() -> None:
    problem = B.layer_problem("resnet50:res5.1x1a.rest", 32, "float32", "tf32")
    assert (problem.n, problem.c, problem.h, problem.k, problem.r) == (32, 2048, 7, 512, 1)
    assert problem.math == "tf32"
    with pytest.raises(SystemExit, match="no layer"):
        B.layer_problem("resnet50:nope", 32, "float32", "fp32")


def test_every_configuration_gets_a_row_and_a_failure_is_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A configuration that raises is a row with its error; the others still run.
    from algorithms.registry import get_algorithm

    fft = get_algorithm("cpu", "fft")

    def broken(*args: Any) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(fft, "run", broken)
    rows = B.algorithm_rows(TINY, "cpu", CpuRuntime(), lambda: None)
    names = {(r["algorithm"], r["config"]) for r in rows}
    assert ("direct", "default") in names and ("fft", "default") in names
    failed = [r for r in rows if "error" in r]
    assert [r["algorithm"] for r in failed] == ["fft"] and "injected" in failed[0]["error"]
    assert all(r["host_us"] > 0 and r["wall_us"] > 0 and r["launches"] >= 1
               for r in rows if "error" not in r)
    text = B.report({"date": "d", "device": "cpu", "commit": "c", "problem": "p",
                     "operands": ["native"], "plans": {}, "algorithms": rows})
    assert "| fft/default | | failed: RuntimeError: injected | |" in text


def test_a_runs_prepared_launches_are_taken_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    # A CUDA run over stand-in kernels (launches that do nothing) on host arrays posing as
    # CuPy arrays: each piece is timed over the run's launches, and the methods come back.
    import numpy as np

    from algorithms.cuda import _launch, _rearrange, implicit_gemm_tc
    from benchmarks.count_run_calls import _DeviceArray, _Kernel

    for module in (implicit_gemm_tc, _rearrange):
        monkeypatch.setattr(module, "get_kernel", lambda _file, _name: _Kernel())
    monkeypatch.setattr(_launch, "_stream", lambda: 0)
    problem = ConvProblem(n=1, c=64, h=56, w=56, k=64, r=3, s=3, pad=1)
    # NHWC: two copies and the GEMM kernel, which sums its K splits itself.
    algorithm, config = implicit_gemm_tc.ImplicitGemmTcCuda(), "64x64-nhwc-k3"
    assert algorithm.work(problem, config).launches == 3
    x, w, y = (np.zeros(shape, np.float32).view(_DeviceArray)
               for shape in problem.operand_shapes)
    workspace = np.zeros(algorithm.workspace_bytes(problem, config), np.uint8)
    workspace = workspace.view(_DeviceArray)
    bind, call = _launch.KernelLaunch.bind, _launch.Launch.__call__
    found = B.launch_steps(lambda: algorithm.run(x, w, y, workspace, problem, config),
                           lambda: None)
    assert found is not None and found["launches"] == 3
    # Each piece is timed; the run's own Python is what the whole run leaves over, a
    # difference of two medians that may fall to zero or below on a busy machine (it did in
    # a clean-clone CI run of 2026-11-28, once the run's Python had shrunk).
    rest = "the run's own Python (whole run less the three above it)"
    assert all(us > 0 for name, us in found.items() if name not in ("launches", rest))
    timed = ("prepared launches found (bind, lookups included)", "current stream queries",
             "prepared launches alone (the driver call included)")
    assert found[rest] == pytest.approx(found["whole run"] - sum(found[k] for k in timed))
    assert (_launch.KernelLaunch.bind, _launch.Launch.__call__) == (bind, call)
    report = B.report({"date": "d", "device": "cpu", "commit": "c", "problem": "p",
                       "operands": [], "plans": {}, "launch_steps": {"tc": found},
                       "algorithms": []})
    assert "its 3 prepared launch(es)" in report and "| current stream queries |" in report
    # The CPU backend launches nothing: no table.
    assert B.launch_steps(lambda: None, lambda: None) is None


def test_a_cached_convolve_is_taken_apart_on_the_kept_plan(tmp_path: Any) -> None:
    # convolve finds the plan kept under its call's key: nothing is tuned or stored.
    from db.engine import open_store
    from db.find import count_timed_measurements

    runtime = CpuRuntime()
    plan = B.make_plan(TINY, "cpu", "direct", "default")
    db = f"sqlite:///{tmp_path}/calls.db"
    times = B.convolve_steps(plan, B.native_operands(runtime, TINY), runtime.synchronize, db)
    steps = [k for k in times if k not in ("whole convolve call", "unaccounted")]
    assert len(steps) == 5 and all(times[k] > 0 for k in steps)
    assert times["unaccounted"] == pytest.approx(
        times["whole convolve call"] - sum(times[k] for k in steps))
    with open_store(db).session() as session:
        assert count_timed_measurements(session=session, kind="cpu") == 0
    text = B.report({"date": "d", "device": "cpu", "commit": "c", "problem": "p",
                     "operands": [], "plans": {}, "convolve": {"direct/default":
                                                               {"native": times}},
                     "algorithms": []})
    assert "A cached convolve() with plan direct/default" in text
    assert "| the result allocated |" in text
