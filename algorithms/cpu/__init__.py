"""The CPU backend: NumPy/BLAS implementations of every algorithm, registered on import.

One device ("cpu"); its runtime is `algorithms.cpu.runtime.CpuRuntime`.
"""

from __future__ import annotations

import functools
from pathlib import Path

from algorithms.cpu.depthwise import DepthwiseConv
from algorithms.cpu.direct import DirectConv
from algorithms.cpu.fft import FftConv
from algorithms.cpu.gpu_only import ImplicitGemmTcConv, ImplicitGemmWgmmaConv
from algorithms.cpu.im2col_gemm import Im2colGemmConv
from algorithms.cpu.implicit_gemm import ImplicitGemmConv
from algorithms.cpu.winograd import WinogradConv
from algorithms.registry import algorithm_sources, hash_sources, register
from algorithms.runtime import Runtime

for _algorithm in (DirectConv(), Im2colGemmConv(), ImplicitGemmConv(), FftConv(),
                   ImplicitGemmTcConv(), WinogradConv(), DepthwiseConv(), ImplicitGemmWgmmaConv()):
    register(_algorithm)

#: "cpu" names the one host device; there is no "cpu:N".
INDEXED = False


def available() -> tuple[bool, str]:
    """The host can always run the CPU backend."""
    return True, "NumPy on the host"


@functools.cache
def device_runtime(index: int = 0) -> Runtime:
    """The host's runtime (one per process)."""
    from algorithms.cpu.runtime import CpuRuntime

    return CpuRuntime()


def implementation_hash() -> str:
    """Hash of the CPU algorithms' sources, as they were when this process imported them."""
    return _IMPLEMENTATION_HASH


# Hashed at import, with the code this process runs: hashed at the first tuning, a source
# changed on disk meanwhile (an upgrade under a running server) stored the old code's times
# under the new code's hash (a review of keys, 2026-11-30).
_IMPLEMENTATION_HASH = hash_sources(algorithm_sources(Path(__file__).resolve().parent))


__all__ = ["DepthwiseConv", "DirectConv", "FftConv", "Im2colGemmConv", "ImplicitGemmConv",
           "ImplicitGemmTcConv", "ImplicitGemmWgmmaConv", "WinogradConv"]
