"""Kernels built before any tuning or plan needs them (`convtune warm`): for a fleet's new
machines and fresh containers, whose first tuning or first plan call would otherwise
compile them (issue 11: what tuning costs where nothing is compiled yet)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from algorithms.problem import ConvProblem
from algorithms.registry import algorithms_for
from algorithms.runtime import Prepared
from tuner.candidates import enumerate_candidates
from tuner.devices import backend_of, get_runtime


def warm(problems: Iterable[ConvProblem], device: str) -> Prepared:
    """Build what every candidate of each problem would run on `device` (a canonical
    device string), several kernels at once; the store is not read. ValueError for a device
    whose algorithms build nothing (the CPU)."""
    backend = backend_of(device)
    if backend == "cpu":
        raise ValueError("the CPU's algorithms compile no kernels: warm a GPU (--device cuda:N)")
    runtime = get_runtime(device)
    algorithms = tuple(algorithms_for(backend))
    built = threads = 0
    failed: list[str] = []
    began = time.perf_counter()
    with runtime.activate():
        for problem in dict.fromkeys(problems):
            offered, _ = enumerate_candidates(algorithms, problem, backend)
            done = runtime.prepare(problem, [(c.algorithm, c.config) for c in offered])
            built, threads = built + done.built, max(threads, done.threads)
            failed += done.failed
    return Prepared(built, tuple(failed), threads, time.perf_counter() - began)
