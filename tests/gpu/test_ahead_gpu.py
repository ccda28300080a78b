"""Kernels compiled ahead on a GPU (algorithms.cuda._ahead): CuPy's compiles run in threads,
and what they built is what the candidates then run (the CPU tests check the listing and
the threads with stand-ins; only a GPU has CuPy's compiler and module loads)."""

from __future__ import annotations

from typing import Any

import pytest

from algorithms.cuda import _ahead, _loader
from algorithms.problem import ConvProblem
from algorithms.registry import algorithms_for
from tuner.candidates import enumerate_candidates

#: An odd-sized problem no other GPU test tunes, so its kernels are likely not loaded yet in
#: this worker (those that are get skipped, as the tuner skips them).
PROBLEM = ConvProblem(n=3, c=24, h=11, w=13, k=40, r=3, s=3, pad=(1, 1), math="tf32")


def test_prepare_builds_in_threads_what_the_candidates_then_run(
        runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import cupy

    monkeypatch.setenv(_ahead.ENV, "8")
    offered, _ = enumerate_candidates(tuple(algorithms_for("cuda")), PROBLEM, "cuda")
    # wgmma's kernels build for compute capability 9.0 only (elsewhere they fail, as data).
    hopper = cupy.cuda.Device(runtime.index).compute_capability == "90"
    candidates = [(c.algorithm, c.config) for c in offered
                  if hopper or c.algorithm.name != "implicit_gemm_wgmma"]
    with runtime.activate():
        missing = _ahead.missing(PROBLEM, candidates, _loader.is_loaded)
        done = runtime.prepare(PROBLEM, candidates)
        assert done.failed == () and done.built == len(missing)
        assert not _ahead.missing(PROBLEM, candidates, _loader.is_loaded)
        assert runtime.prepare(PROBLEM, candidates).built == 0  # nothing left to build
    if len(missing) > 1:
        assert done.threads > 1
