"""Kernels compiled ahead of a tuning's first runs (algorithms.cuda._ahead): the dry run that
lists a candidate's kernels without compiling any, the threads that then compile them, and
the tuner asking for it before its first run. Every emulated case checks the listing
against the kernels its real run launches (tests/cuda_emu/cases.py)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from algorithms.cpu.runtime import CpuRuntime
from algorithms.cuda import (
    _ahead,
    _counters,
    _loader,
    fft,
    implicit_gemm_tc,
    implicit_gemm_wgmma,
    shipped_kernels,
    winograd,
)
from algorithms.problem import ConvProblem
from algorithms.registry import get_algorithm
from algorithms.runtime import Prepared, TimingPolicy
from tuner.candidates import Candidate
from tuner.measuring import Measurer

SHIPPED = {(f, name) for f, names in shipped_kernels().items() for name in names}


def _never(filename: str, name: str) -> Any:
    raise AssertionError(f"a dry run looked up {filename} {name}")


@pytest.fixture
def no_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kernel lookup and counter allocation fails the test: a dry run makes none."""
    for module in (winograd, implicit_gemm_tc, implicit_gemm_wgmma):
        monkeypatch.setattr(module, "get_kernel", _never)
    monkeypatch.setattr(_counters, "zeros", lambda nbytes: _never("counters", str(nbytes)))


@pytest.mark.usefixtures("no_lookups")
def test_a_dry_run_lists_a_runs_kernels_in_launch_order_without_compiling() -> None:
    problem = ConvProblem(n=2, c=8, h=6, w=6, k=8, r=3, s=3, pad=(1, 1))
    listed = _ahead.instances(winograd.WinogradCuda(), problem, "f2x2")
    assert listed == (("winograd.cu", "winograd_filter<float, 2>"),
                      ("winograd.cu", "winograd_input<float, 2>"),
                      ("winograd.cu", "winograd_output<float, 2>"))
    assert set(listed) <= SHIPPED


@pytest.mark.usefixtures("no_lookups")
def test_a_split_k_run_lists_its_kernel_and_allocates_no_counters() -> None:
    # Split K's tile counters are device memory kept per workspace address: a dry run's
    # workspace is not real, so nothing may be allocated for it.
    problem = ConvProblem(n=1, c=256, h=7, w=7, k=64, r=1, s=1)
    tc = implicit_gemm_tc.ImplicitGemmTcCuda()
    split = [c for c in tc.configs(problem) if "-k" in c]
    assert split, tc.configs(problem)
    listed = _ahead.instances(tc, problem, split[0])
    assert listed and set(listed) <= SHIPPED
    assert any(f == "implicit_gemm_tc.cu" for f, _ in listed)


@pytest.mark.usefixtures("no_lookups")
def test_backward_runs_list_their_copies_too() -> None:
    # by_forward's runs slice their workspace into typed views: the dry run's stand-in must
    # take slices, views and reshapes.
    problem = ConvProblem(n=2, c=8, h=6, w=6, k=8, r=3, s=3, pad=(1, 1), math="tf32",
                          direction="backward_data")
    listed = _ahead.instances(implicit_gemm_wgmma.ImplicitGemmWgmmaCuda(), problem,
                              "64x128x32-s4")
    assert listed is not None and len(listed) >= 2
    assert set(listed) <= SHIPPED


@pytest.mark.usefixtures("no_lookups")
def test_the_listing_follows_the_operands_alignment() -> None:
    # The emulator's misaligned cases (test_cuda_emulated's "-offset") found it: a tensor-core
    # tile's vector width follows its operands' alignment, so the default, aligned as the
    # tuner's own arrays, lists another instance than operands one element off do.
    problem = ConvProblem(n=3, c=40, h=4, w=6, k=40, r=1, s=1)
    tc = implicit_gemm_tc.ImplicitGemmTcCuda()
    aligned = _ahead.instances(tc, problem, "128x128")
    off = _ahead.instances(tc, problem, "128x128", (1 << 40 | 4, 2 << 40 | 4, 3 << 40 | 4))
    assert aligned and off and aligned != off
    assert set(aligned) | set(off) <= SHIPPED


def test_what_a_dry_run_cannot_list_is_none() -> None:
    problem = ConvProblem(n=1, c=4, h=8, w=8, k=4, r=3, s=3, pad=(1, 1))
    # fft calls CuPy and cuFFT itself: not replayable, so not dry-run (it would launch).
    assert _ahead.instances(fft.FftCuda(), problem, "default") is None
    # A run that raises (here: a configuration that does not exist) lists nothing.
    assert _ahead.instances(winograd.WinogradCuda(), problem, "f9x9") is None


def test_missing_lists_each_unloaded_instance_once() -> None:
    problem = ConvProblem(n=2, c=8, h=6, w=6, k=8, r=3, s=3, pad=(1, 1))
    algorithm = winograd.WinogradCuda()
    loaded = {("winograd.cu", "winograd_filter<float, 2>")}
    todo = _ahead.missing(problem, [(algorithm, "f2x2"), (algorithm, "f2x2"),
                                    (fft.FftCuda(), "default")],
                          lambda f, n: (f, n) in loaded)
    assert todo == [("winograd.cu", "winograd_input<float, 2>"),
                    ("winograd.cu", "winograd_output<float, 2>")]


def test_compile_ahead_loads_two_at_once_after_the_first_alone() -> None:
    todo = [("a.cu", f"k<{i}>") for i in range(5)]
    both = threading.Barrier(2, timeout=10)
    order: list[str] = []

    def load(filename: str, name: str) -> None:
        order.append(f"start {name}")
        if name != "k<0>":
            both.wait()  # one compile at a time would wait here alone, and break it
        order.append(f"end {name}")

    found = _ahead.compile_ahead(todo, load, threads=2)
    assert (found.built, found.failed, found.threads) == (5, (), 2)
    assert order[:2] == ["start k<0>", "end k<0>"] and len(order) == 10


def test_compile_ahead_reports_failures_instead_of_raising() -> None:
    def load(filename: str, name: str) -> None:
        if name == "bad":
            raise RuntimeError("NVRTC said no")

    found = _ahead.compile_ahead([("a.cu", "good"), ("a.cu", "bad"), ("b.cu", "fine")], load,
                                 threads=4)
    assert found.built == 2
    assert found.failed == ("a.cu bad: RuntimeError: NVRTC said no",)
    assert found.threads == 2  # no more threads than instances after the first


@pytest.mark.parametrize(("value", "threads"), [("0", 0), ("3", 3), ("64", 64)])
def test_threads_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str,
                                      threads: int) -> None:
    monkeypatch.setenv(_ahead.ENV, value)
    assert _ahead.threads_from_env() == threads


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_a_bad_thread_count_is_named(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(_ahead.ENV, value)
    with pytest.raises(ValueError, match=f"{_ahead.ENV} must be a whole number >= 0, got "):
        _ahead.threads_from_env()


def test_the_default_is_one_thread_per_cpu_within_the_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_ahead.ENV, raising=False)
    assert 1 <= _ahead.threads_from_env() <= _ahead.MAX_THREADS


def test_get_kernel_compiles_two_instances_at_once_and_one_only_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # One lock per instance: two threads asking for different kernels compile at once (the
    # barrier needs both inside a compile), two asking for the same one compile it once.
    both = threading.Barrier(2, timeout=10)
    compiled: list[str] = []

    def build(cupy: Any, filename: str, name: str) -> str:
        compiled.append(name)
        if name != "same":
            both.wait()
        return f"kernel {name}"

    class Runtime:
        @staticmethod
        def getDevice() -> int:
            return 7

    class Cupy:
        class cuda:
            runtime = Runtime

    monkeypatch.setattr(_loader, "require_cupy", lambda: Cupy)
    monkeypatch.setattr(_loader, "_kernels", {})
    monkeypatch.setattr(_loader, "_instance_locks", {})
    monkeypatch.setattr(_loader, "_build", build)
    got: dict[str, Any] = {}

    def ask(name: str) -> None:
        got[name] = _loader.get_kernel("direct.cu", name)

    threads = [threading.Thread(target=ask, args=(n,)) for n in ("one", "two")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {"one": "kernel one", "two": "kernel two"}
    same = [threading.Thread(target=ask, args=("same",)) for _ in range(4)]
    for t in same:
        t.start()
    for t in same:
        t.join()
    assert sorted(compiled) == ["one", "same", "two"]
    assert _loader.is_loaded("direct.cu", "same") and not _loader.is_loaded("direct.cu", "x")


class Preparing(CpuRuntime):
    """A CPU runtime that records what it was asked to prepare, and when."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[Any] = []

    def prepare(self, problem: ConvProblem, candidates: Any) -> Prepared:
        self.events.append(("prepare", problem, [(a.name, c) for a, c in candidates]))
        return Prepared()


def test_the_measurer_prepares_every_candidate_before_the_first_run() -> None:
    problem = ConvProblem(n=1, c=3, h=6, w=6, k=4, r=3, s=3, pad=(1, 1))
    runtime = Preparing()
    direct = get_algorithm("cpu", "direct")
    runs: list[str] = []

    class Recorded:
        name = "direct"

        def run(self, *args: Any) -> None:
            runs.append("run")
            runtime.events.append("run")
            direct.run(*args)

    candidates = [Candidate(Recorded(), cfg, 0, "h")  # type: ignore[arg-type]
                  for cfg in direct.configs(problem)]
    Measurer(runtime, TimingPolicy(warmup=0, budget_s=0.0, min_reps=1, max_reps=1),
             np.random.default_rng(0)).measure(problem, candidates)
    assert runtime.events[0] == ("prepare", problem,
                                 [("direct", c.config) for c in candidates])
    assert runs and runtime.events.count("run") == len(runs)


def test_compile_ahead_of_none_or_one_starts_no_thread() -> None:
    names: list[str] = []

    def load(filename: str, name: str) -> None:
        names.append(threading.current_thread().name)

    assert _ahead.compile_ahead([], load, threads=8).built == 0
    assert _ahead.compile_ahead([("a.cu", "k")], load, threads=8).built == 1
    assert names == [threading.current_thread().name]  # the caller's own thread
