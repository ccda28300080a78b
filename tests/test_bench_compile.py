"""benchmarks/bench_compile.py: what a network's tuning compiles, and how it is timed."""

from __future__ import annotations

from typing import Any

from algorithms.cuda import shipped_kernels
from algorithms.registry import algorithms_for
from benchmarks import bench_compile as bench
from tuner.candidates import enumerate_candidates
from tuner.networks import network_problems


def test_a_networks_kernels_are_shipped_instances_and_fft_is_left_out() -> None:
    found = bench.network_kernels("vgg16", 1, "float32", "fp32")
    shipped = {(f, n) for f, names in shipped_kernels().items() for n in names}
    assert found.instances and set(found.instances) <= shipped
    assert len(set(found.instances)) == len(found.instances)
    offered = [c for _, p in network_problems("vgg16", 1)
               for c in enumerate_candidates(tuple(algorithms_for("cuda")), p, "cuda")[0]]
    assert found.candidates == len(offered) and found.layers == 9
    assert found.unlisted == sum(c.algorithm.name == "fft" for c in offered)


def test_the_compiler_compiles_one_name_alone_for_the_files_arch() -> None:
    calls: list[tuple[Any, ...]] = []

    class Nvrtc:
        def createProgram(self, src: str, name: str, headers: Any, includes: Any) -> str:
            calls.append(("create", name, "implicit_gemm_wgmma" in src or "winograd" in src))
            return "program"

        def addNameExpression(self, program: str, name: str) -> None:
            calls.append(("name", name))

        def compileProgram(self, program: str, options: tuple[str, ...]) -> None:
            calls.append(("compile", options[-1]))

        def destroyProgram(self, program: str) -> None:
            calls.append(("destroy",))

        # What the loader's compile also reads (not part of what is asserted).
        NVRTCError = RuntimeError

        def getLoweredName(self, program: str, name: str) -> str:
            return name

        def getCUBIN(self, program: str) -> bytes:
            return b"cubin"

    compiler = bench.Compiler(Nvrtc(), "sm_90")
    compiler("winograd.cu", "winograd_input<float, 2>")
    compiler("implicit_gemm_wgmma.cu", "k")
    assert calls == [("create", "winograd.cu", True), ("name", "winograd_input<float, 2>"),
                     ("compile", "-arch=sm_90"), ("destroy",),
                     ("create", "implicit_gemm_wgmma.cu", True), ("name", "k"),
                     ("compile", "-arch=sm_90a"), ("destroy",)]
    assert set(compiler.seconds) == {("winograd.cu", "winograd_input<float, 2>"),
                                     ("implicit_gemm_wgmma.cu", "k")}
    read = bench.cache_read(compiler)  # stored, then read back without compiling
    assert read["instances"] == 2 and read["bytes"] > 0 and len(calls) == 8


def test_rounds_alternate_the_thread_counts() -> None:
    assert bench.thread_order([1, 2], 1) == [1, 2]
    assert bench.thread_order([1, 2], 3) == [1, 2, 2, 1, 1, 2]


def test_per_file_sums_the_serial_seconds() -> None:
    rows = bench.per_file({("a.cu", "x"): 1.0, ("a.cu", "y"): 2.0, ("b.cu", "z"): 4.0})
    assert rows == [{"file": "b.cu", "instances": 1, "seconds": 4.0, "mean_s": 4.0},
                    {"file": "a.cu", "instances": 2, "seconds": 3.0, "mean_s": 1.5}]
