"""Python work per plan call on a GPU with torch tensors, without a GPU (issue 9).

Usage: python benchmarks/count_plan_calls.py [--calls N]

A plan call with torch CUDA tensors either takes their addresses as they are (the direct
path, `Runtime.ready`) or adopts each (a CuPy view kept by address, its shape and dtype
read back), enters the device, compares streams and finds the lane's workspace (the checked
path, CONVTUNE_FAST_PLAN_CALL=0); the direct path replays the run's calls where the
algorithm offers it (algorithms.cuda._replay), or runs it (CONVTUNE_REPLAY=0). This runs
the three over a stand-in CuPy and stand-in CUDA tensors, with every kernel launch and
cuBLAS call a no-op (count_run_calls.py's stubs),
under cProfile: Python-level calls per plan call, deterministic. Each stand-in method
stands for one call into torch's or CuPy's C code, which cProfile counts as one call too;
attribute reads are not calls either way. The host time per call is this machine's, with
stand-ins in place of torch and CuPy: only the calls are comparable with a GPU host.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.cuda import KERNEL_MODULES, _counters, _cublas, _launch, _replay  # noqa: E402
from algorithms.problem import ConvProblem  # noqa: E402
from algorithms.registry import get_algorithm  # noqa: E402
from benchmarks.count_run_calls import SMALL, _DeviceArray, _Kernel  # noqa: E402
from tuner.plans import Plan  # noqa: E402
from tuner.results import AlgorithmResult  # noqa: E402

#: bench_call_path's tiny problem, and issue 9's small one (split K: two launches).
TINY = ConvProblem(n=1, c=4, h=4, w=4, k=4, r=1, s=1)
CASES = [("direct", TINY, "8x8k16"), ("implicit_gemm_tc", SMALL, "64x64-k3"),
         ("im2col_gemm", SMALL, "chunk=all")]


class Tensor:
    """A stand-in torch CUDA tensor on GPU 0 over a host buffer: each method one C call."""

    __module__ = "torch.standin"  # is_torch reads the module
    is_cuda, is_cpu, requires_grad = True, False, False

    def __init__(self, shape: tuple[int, ...]) -> None:
        self._host = np.zeros(shape, np.float32)
        self.shape, self.dtype = shape, torch.float32
        self._ptr = self._host.__array_interface__["data"][0]

    def is_contiguous(self) -> bool:
        return True

    def get_device(self) -> int:
        return 0

    def data_ptr(self) -> int:
        return int(self._ptr)

    def numel(self) -> int:
        return int(self._host.size)

    def element_size(self) -> int:
        return 4


class _CupyArray(_DeviceArray):
    """A host array posing as a CuPy array on GPU 0; built as `cupy.ndarray(shape, dtype,
    memptr)` builds one (NumPy's third argument is a buffer: None allocates)."""

    @property
    def device(self) -> SimpleNamespace:  # type: ignore[override]
        return _GPU0


_GPU0 = SimpleNamespace(id=0)


def _cupy() -> SimpleNamespace:
    """What CudaRuntime and its TorchBridge call of CuPy, on GPU 0's null stream."""
    stream = SimpleNamespace(ptr=0)
    return SimpleNamespace(
        ndarray=_CupyArray, empty=lambda shape, dtype: _CupyArray(shape, dtype),
        cuda=SimpleNamespace(
            runtime=SimpleNamespace(getDeviceCount=lambda: 1,
                                    getDeviceProperties=lambda index: {},
                                    getDevice=lambda: 0, streamIsCapturing=lambda ptr: 0),
            Device=lambda index: nullcontext(), get_current_stream=lambda: stream,
            UnownedMemory=lambda *args: None, Memory=bytearray, alloc=bytearray,
            MemoryPointer=lambda memory, offset: memory))


def _install() -> None:
    """The stand-in CuPy, torch's stream query and no-op launches."""
    sys.modules["cupy"] = _cupy()  # type: ignore[assignment]
    torch._C._cuda_getCurrentRawStream = lambda device: 0  # type: ignore[attr-defined,unused-ignore]
    kernel = _Kernel()
    for module in KERNEL_MODULES:
        module.get_kernel = lambda _file, _name: kernel  # type: ignore[attr-defined]
    _cublas._gemm = lambda *args, **kwargs: None  # type: ignore[assignment]
    _launch._stream = lambda: 0
    _counters.zeros = lambda nbytes: np.zeros(nbytes, np.uint8).view(_CupyArray)


def _plan(name: str, problem: ConvProblem, config: str, runtime: Any, direct: bool,
          replay: bool = False) -> Plan:
    """The plan, its direct path replaying runs or not (read when a plan is made)."""
    implementation = get_algorithm("cuda", name)
    choice = AlgorithmResult(algorithm=name, config=config, status="ok", time_ms=1.0,
                             workspace_bytes=implementation.workspace_bytes(problem, config))
    before = os.environ.get(_replay.ENV)
    os.environ[_replay.ENV] = "1" if replay else "0"
    try:
        return Plan(problem, "cuda:0", choice, implementation, runtime, direct)
    finally:
        if before is None:
            del os.environ[_replay.ENV]
        else:
            os.environ[_replay.ENV] = before


def measure(plan: Plan, operands: list[Tensor], calls: int) -> tuple[float, float]:
    """(Python-level calls, host us) per plan call; host time the best of 20 bursts."""
    x, w, y = operands
    for _ in range(20):
        plan(x, w, out=y)
    best = float("inf")
    for _ in range(20):
        start = time.perf_counter()
        for _ in range(calls // 20):
            plan(x, w, out=y)
        best = min(best, (time.perf_counter() - start) / (calls // 20) * 1e6)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        plan(x, w, out=y)
    profiler.disable()
    return pstats.Stats(profiler).total_calls / calls, best  # type: ignore[attr-defined]


def main() -> None:
    """Count and time both paths per case; print Markdown."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    _install()
    from algorithms.cuda.runtime import CudaRuntime

    runtime = CudaRuntime(0)
    runtime._torch._tensor_types = (Tensor,)  # the stand-in is the plain tensor type
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False, cwd=ROOT).stdout.strip()
    print(f"commit {commit}; stand-in CuPy and torch tensors, launches and cuBLAS stubbed\n")
    print("| algorithm/config | problem | Python calls per plan call, checked / direct / "
          "direct replayed | host us per call (stand-ins), checked / direct / direct "
          "replayed |")
    print("|---|---|---|---|")
    for name, problem, config in CASES:
        operands = [Tensor(shape) for shape in problem.operand_shapes]
        found = [measure(_plan(name, problem, config, runtime, direct, replay), operands,
                         args.calls)
                 for direct, replay in ((False, False), (True, False), (True, True))]
        print(f"| {name}/{config} | {problem.describe()} | "
              f"{' / '.join(f'{calls:.0f}' for calls, _us in found)} | "
              f"{' / '.join(f'{us:.1f}' for _calls, us in found)} |")


if __name__ == "__main__":
    main()
