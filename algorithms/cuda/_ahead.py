"""Kernels compiled ahead of a tuning's first runs, several at once (issue 11: what tuning
costs on a machine that has compiled nothing yet).

Why: get_kernel compiles an instance when it is first used, in the thread that uses it. On
a machine whose kernel cache is empty (a new GPU machine, a fresh container), exhaustive
tuning compiled every candidate's kernels one after another inside its first run:
ResNet-50 b32's 825 FP32 candidates need 71 instances, 27.5 s of NVRTC on one core of the
project's CPU machine (benchmarks/bench_compile.py). NVRTC runs without holding the GIL
(CuPy's compileProgram), so threads compile at once; which instances a candidate needs is
found by a names-only dry run of its run (_recording), which asks nothing of the device and
compiles nothing.

Only algorithms that declare `replayable` are dry-run: their every GPU call goes through
_launch.enqueue or _cublas, which a dry run intercepts. The others (fft) compile at first
use as before. An instance that fails to compile here is left alone: its candidate's first
run compiles it again and the tuner records that failure, as before.
CONVTUNE_COMPILE_THREADS sets how many threads compile (0: none, compile at first use).
tests/cuda_emu checks on every emulated case that the dry run lists exactly the kernels the
real run launches.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np

from algorithms.cuda import _recording
from algorithms.cuda._launch import Address
from algorithms.cuda._loader import get_kernel, is_loaded
from algorithms.problem import ConvProblem
from algorithms.runtime import Prepared, cpus_allowed

log = logging.getLogger(__name__)

ENV = "CONVTUNE_COMPILE_THREADS"
#: Most threads by default: NVRTC is CPU-bound, and a GPU host has tens of cores.
MAX_THREADS = 32

#: A kernel instance: its file in kernels/ and its name expression.
Instance = tuple[str, str]

#: The dry run's operands and workspace: far above any device address, and apart.
_FAKE = (1 << 60, 1 << 60 | 1 << 40, 1 << 60 | 2 << 40, 1 << 60 | 3 << 40)


def instances(algorithm: Any, problem: ConvProblem, config: str,
              at: tuple[int, int, int] = _FAKE[:3]) -> tuple[Instance, ...] | None:
    """The kernel instances a run of `algorithm`'s `config` on `problem` launches, each once,
    in launch order; None where a dry run cannot tell (not replayable, or the run raised).
    `at`: the addresses of x, w and y. A kernel's vector width may follow its operands'
    alignment: the default addresses are aligned as the tuner's own arrays are."""
    if not getattr(algorithm, "replayable", False):
        return None
    x, w, y = (Address(a) for a in at)
    with _recording.recording(names_only=True) as taken:
        try:
            nbytes = algorithm.workspace_bytes(problem, config)
            workspace = _Workspace(_FAKE[3], nbytes) if nbytes else None
            algorithm.run(x, w, y, workspace, problem, config)
        except Exception:  # the real run raises it, where the tuner records it
            return None
    return tuple(dict.fromkeys(taken.kernels))


class _Workspace(Address):
    """The dry run's workspace, and its views: an address and a size, with what runs ask of
    a workspace array (slices, typed views, reshapes: algorithms.base.workspace_view)."""

    __slots__ = ("itemsize", "size")

    def __init__(self, ptr: int, size: int, itemsize: int = 1) -> None:
        super().__init__(ptr)
        self.size, self.itemsize = size, itemsize

    def __getitem__(self, part: slice) -> _Workspace:
        start, stop, _ = part.indices(self.size)
        return _Workspace(self.ptr + start * self.itemsize, stop - start, self.itemsize)

    def view(self, dtype: Any) -> _Workspace:
        itemsize = np.dtype(dtype).itemsize
        return _Workspace(self.ptr, self.size * self.itemsize // itemsize, itemsize)

    def reshape(self, *shape: Any) -> _Workspace:
        return self


def compile_ahead(todo: Sequence[Instance], load: Callable[[str, str], Any],
                  threads: int) -> Prepared:
    """`load` every instance of `todo` (get_kernel, on the caller's device), `threads` at a
    time. The first loads alone: it sets up what every compile shares once (NVRTC's library,
    CuPy's compile settings) before threads race for it."""
    began = time.perf_counter()
    failed: list[str] = []

    def one(item: Instance) -> None:
        try:
            load(*item)
        except Exception as exc:  # left to the candidate's own first run to record
            failed.append(f"{item[0]} {item[1]}: {type(exc).__name__}: {exc}"[:500])

    first, rest = todo[:1], todo[1:]
    for item in first:
        one(item)
    used = max(1, min(threads, len(rest)))
    if rest:
        with ThreadPoolExecutor(used, thread_name_prefix="convtune-compile") as pool:
            list(pool.map(one, rest))
    return Prepared(len(todo) - len(failed), tuple(failed), used,
                    time.perf_counter() - began)


def threads_from_env() -> int:
    """Threads that compile ahead: $CONVTUNE_COMPILE_THREADS, else one per CPU this process
    may run on, at most MAX_THREADS; ValueError for a value that is not a whole number >= 0."""
    value = os.environ.get(ENV)
    if value is None:
        return min(MAX_THREADS, cpus_allowed())
    try:
        threads = int(value)
    except ValueError:
        threads = -1
    if threads < 0:
        raise ValueError(f"{ENV} must be a whole number >= 0, got {value!r}")
    return threads


def missing(problem: ConvProblem, candidates: Iterable[tuple[Any, str]],
            loaded: Callable[[str, str], bool]) -> list[Instance]:
    """The instances the candidates' runs need that are not `loaded` yet, each once."""
    todo: dict[Instance, None] = {}
    for algorithm, config in candidates:
        for item in instances(algorithm, problem, config) or ():
            if item not in todo and not loaded(*item):
                todo[item] = None
    return list(todo)


def prepare(problem: ConvProblem, candidates: Iterable[tuple[Any, str]], device: int
            ) -> Prepared:
    """Compile (or load from the disk cache) ahead, on GPU `device` (current), what the
    candidates' runs of `problem` need and this process has not loaded yet; nothing where
    CONVTUNE_COMPILE_THREADS is 0."""
    threads = threads_from_env()
    todo = missing(problem, candidates, is_loaded) if threads > 0 else []
    if not todo:
        return Prepared()
    done = compile_ahead(todo, partial(_load_on, device), threads)
    log.info("%s: %d kernel instances compiled or loaded ahead in %.2f s by %d threads%s",
             problem.describe(), done.built, done.seconds, done.threads,
             f" ({len(done.failed)} failed)" if done.failed else "")
    return done


def _load_on(device: int, filename: str, name_expression: str) -> None:
    import cupy

    with cupy.cuda.Device(device):  # a new thread's current device is device 0
        get_kernel(filename, name_expression)
