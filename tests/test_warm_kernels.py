"""benchmarks/warm_kernels.py: what it compiles and how it reports, without a GPU."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import get_context

from algorithms.cuda import shipped_kernels
from benchmarks.warm_kernels import instances, warm


def test_instances_are_every_shipped_kernel() -> None:
    listed = instances()
    assert len(listed) == len(set(listed))
    assert set(listed) == {(f, n) for f, names in shipped_kernels().items() for n in names}
    assert any("implicit_gemm_tc_conv<" in name for _f, name in listed)


def test_warm_counts_compilations_and_reports_failures() -> None:
    todo = instances()[:6]
    broken = todo[2]

    def compile_one(item: tuple[str, str]) -> float:
        if item == broken:
            raise RuntimeError("NVRTC said no")
        return 0.5

    with ThreadPoolExecutor(3) as pool:
        done, seconds, failures = warm(todo, pool, compile_one)
    assert (done, seconds) == (5, 2.5)
    assert failures == [f"{broken[0]} {broken[1]}: RuntimeError: NVRTC said no"]


def test_warm_runs_in_spawned_processes() -> None:
    # The real compile runs in spawned processes: the work item and the function must
    # cross a pickle (len stands in for the compile: a picklable builtin).
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        assert warm(instances()[:4], pool, len) == (4, 8.0, [])
