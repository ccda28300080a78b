"""Python work per run of the CUDA algorithms, without a GPU (issue 9): calls counted.

Usage: python benchmarks/count_run_calls.py [--runs N]

Replaces every kernel launch and cuBLAS call of algorithms/cuda with a no-op and runs each
listed configuration on host arrays posing as device arrays, under cProfile: what remains
is the Python a plan call pays around its launches. Prints the Python-level function calls
per run (deterministic, unlike host time on a shared CPU) and the host time per run with
the launches stubbed (this machine's, noisy; a GPU host adds the launches themselves).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.cuda import (  # noqa: E402
    _counters,
    _cublas,
    _launch,
    _loader,
    _rearrange,
    im2col_gemm,
    implicit_gemm_tc,
    implicit_gemm_wgmma,
    winograd,
)
from algorithms.problem import ConvProblem  # noqa: E402

#: issue 9's small problem, and a ResNet-50 3x3 layer (Winograd's) at batch 32
SMALL = ConvProblem(n=1, c=64, h=56, w=56, k=64, r=3, s=3, pad=1)
RES4 = ConvProblem(n=32, c=256, h=14, w=14, k=256, r=3, s=3, pad=1)
#: ResNet-50's res4.1x1b at batch 32 in float16 (a pointwise layer: no column matrix)
RES4_1X1B = ConvProblem(n=32, c=256, h=14, w=14, k=1024, r=1, s=1, dtype="float16")
RES4_BWD_FILTER = ConvProblem(n=32, c=256, h=14, w=14, k=256, r=3, s=3, pad=1,
                              direction="backward_filter")
RES4_FP16 = ConvProblem(n=32, c=256, h=14, w=14, k=256, r=3, s=3, pad=1, dtype="float16")
CASES = [
    (implicit_gemm_tc.ImplicitGemmTcCuda(), SMALL, "128x128"),
    (implicit_gemm_tc.ImplicitGemmTcCuda(), SMALL, "64x64-k3"),
    (implicit_gemm_tc.ImplicitGemmTcCuda(), SMALL, "128x128-nhwc"),
    (winograd.WinogradCuda(), RES4, "f2x2"),
    (winograd.WinogradCuda(), RES4, "f4x4"),
    (im2col_gemm.Im2colGemmCuda(), RES4, "chunk=all"),
    (im2col_gemm.Im2colGemmCuda(), RES4_1X1B, "chunk=all"),
    (im2col_gemm.Im2colGemmCuda(), RES4, "chunk=4"),
    (im2col_gemm.Im2colGemmCuda(), RES4_BWD_FILTER, "chunk=16"),
    (implicit_gemm_wgmma.ImplicitGemmWgmmaCuda(), RES4_FP16, "128x128x64-s5-f1"),
    (implicit_gemm_wgmma.ImplicitGemmWgmmaCuda(), RES4_FP16, "128x128x64-s4-k2"),
]


class _DeviceArray(np.ndarray):
    """A host array posing as a CuPy array: `.data.ptr` is its address."""

    @functools.cached_property
    def data(self) -> SimpleNamespace:  # type: ignore[override]
        # Worked out once per array, as CuPy keeps its MemoryPointer: a run reads .data.ptr
        # of each operand, which must not cost more here than on a GPU.
        return SimpleNamespace(ptr=self.__array_interface__["data"][0])


class _Kernel:
    """A kernel whose launches do nothing: called (CuPy's kernel call) or from a prepared
    buffer (algorithms.cuda._launch; a GPU's path unless CONVTUNE_PREPARED_LAUNCH=0)."""

    max_dynamic_shared_size_bytes = 0
    ptr = 1

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @staticmethod
    def launch_kernel(*args: Any) -> None:
        pass


def _stub_launches() -> None:
    kernel = _Kernel()
    for module in (implicit_gemm_tc, implicit_gemm_wgmma, winograd, im2col_gemm, _rearrange,
                   _loader):
        module.get_kernel = lambda _file, _name: kernel  # type: ignore[attr-defined]
    _cublas._gemm = lambda *args, **kwargs: None  # type: ignore[assignment]
    _launch._stream = lambda: 0  # no CuPy here
    _counters.zeros = lambda nbytes: np.zeros(nbytes, np.uint8).view(_DeviceArray)


def main() -> None:
    """Count and time each case's run; print Markdown."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    _stub_launches()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False, cwd=ROOT).stdout.strip()
    path = "CuPy's call" if os.environ.get(_launch.ENV) == "0" else "prepared buffers"
    print(f"commit {commit}; launches ({path}) and cuBLAS stubbed\n")
    print("| algorithm/config | problem | Python calls per run | host us per run |")
    print("|---|---|---|---|")
    for algorithm, problem, config in CASES:
        x, w, y = (np.zeros(shape, np.float16 if problem.itemsize == 2 else np.float32)
                   .view(_DeviceArray) for shape in problem.operand_shapes)
        nbytes = algorithm.workspace_bytes(problem, config)
        workspace = np.zeros(nbytes, np.uint8).view(_DeviceArray) if nbytes else None

        def run(algorithm: Any = algorithm, problem: ConvProblem = problem,
                config: str = config, x: Any = x, w: Any = w, y: Any = y,
                workspace: Any = workspace) -> None:
            algorithm.run(x, w, y, workspace, problem, config)

        for _ in range(20):
            run()
        best = float("inf")
        for _ in range(20):
            start = time.perf_counter()
            for _ in range(args.runs // 20):
                run()
            best = min(best, (time.perf_counter() - start) / (args.runs // 20) * 1e6)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.runs):
            run()
        profiler.disable()
        calls = pstats.Stats(profiler).total_calls / args.runs  # type: ignore[attr-defined]
        print(f"| {algorithm.name}/{config} | {problem.describe()} | {calls:.0f} | "
              f"{best:.1f} |")


if __name__ == "__main__":
    main()
