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
    # The first instance loads alone, then min(threads, the rest) threads take the rest.
    if len(missing) > 2:
        assert done.threads > 1


#: A child process: `config_failures` of the direct and tc algorithms' first configurations
#: on a small problem, and how many kernels it compiled (the rest it read from the disk cache).
_CHILD = """
import json
from algorithms.cuda import _binaries
from algorithms.problem import ConvProblem
from algorithms.registry import algorithms_for
from tests.gpu.conftest import config_failures

compiled = []
compile_ = _binaries.nvrtc_compile
_binaries.nvrtc_compile = lambda *args: compiled.append(args[2]) or compile_(*args)
problem = ConvProblem(n=2, c=12, h=9, w=7, k=20, r=3, s=3, pad=(1, 1), math="tf32")
failures = []
for algorithm in algorithms_for("cuda"):
    if algorithm.name in ("direct", "implicit_gemm_tc") and algorithm.supports(problem):
        failures += config_failures(algorithm, problem)
print(json.dumps({"compiled": compiled, "failures": failures}))
"""


def _child(cache: Any) -> dict[str, Any]:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                          env={**os.environ, "CUPY_CACHE_DIR": str(cache)},
                          cwd=Path(__file__).resolve().parents[2], timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


# Bug: every kernel went through CuPy's RawModule with a name expression, and CuPy never
# reads its disk cache back for those, so each process compiled every kernel it used again.
def test_a_second_process_reads_the_kernels_the_first_compiled(tmp_path: Any) -> None:
    first = _child(tmp_path)
    assert first["failures"] == [] and first["compiled"]
    second = _child(tmp_path)
    assert second == {"compiled": [], "failures": []}
