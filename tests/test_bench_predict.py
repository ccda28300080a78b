"""benchmarks/bench_predict.py: its variants swap the host work in and put it back."""

from __future__ import annotations

from algorithms.problem import ConvProblem
from benchmarks import bench_predict as B
from tuner import features as F
from tuner import model as M


def test_variants_swap_the_host_work_and_restore_it() -> None:
    shipped_thread, shipped_offered = M.one_thread, F._offered
    with B.variant("threadpool_limits"):
        assert M.one_thread is not shipped_thread and F._offered is not shipped_offered
    with B.variant("controller"):
        assert M.one_thread is shipped_thread and F._offered is not shipped_offered
    with B.variant("shipped"):
        assert M.one_thread is shipped_thread and F._offered is shipped_offered
    assert (M.one_thread, F._offered) == (shipped_thread, shipped_offered)


def test_the_uncached_lookup_answers_as_the_cached_one() -> None:
    problem = ConvProblem(n=2, c=16, h=9, w=9, k=24, r=3, s=3, pad=1)
    for algorithm in ("implicit_gemm_tc", "im2col_gemm", "direct"):
        assert B._uncached_offered("cuda", algorithm, problem) == F._offered(
            "cuda", algorithm, problem)
    B.clear_caches()
    assert F._offered.cache_info().currsize == F.work_vector.cache_info().currsize == 0
