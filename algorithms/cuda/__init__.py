"""The CUDA backend: GPU convolution algorithms behind the common interface.

Importing this package registers the algorithms and needs neither a GPU nor CuPy:
`supports`, `configs` and `workspace_bytes` are plain Python. CuPy is imported the first
time an algorithm runs or a runtime is made, and a clear RuntimeError says why when it
cannot be. Devices are "cuda:N"; the runtime is `algorithms.cuda.runtime.CudaRuntime`; the
kernel sources live in the repository's kernels/ folder (`_loader.KERNELS_DIR`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import ModuleType

from algorithms.cuda import (
    _loader,
    _rearrange,
    _wgmma_nchw,
    depthwise,
    direct,
    fft,
    im2col_gemm,
    implicit_gemm,
    implicit_gemm_tc,
    implicit_gemm_wgmma,
    spin,
    winograd,
)
from algorithms.cuda.depthwise import DepthwiseCuda
from algorithms.cuda.direct import DirectCuda
from algorithms.cuda.fft import FftCuda
from algorithms.cuda.im2col_gemm import Im2colGemmCuda
from algorithms.cuda.implicit_gemm import ImplicitGemmCuda
from algorithms.cuda.implicit_gemm_tc import ImplicitGemmTcCuda
from algorithms.cuda.implicit_gemm_wgmma import ImplicitGemmWgmmaCuda
from algorithms.cuda.winograd import WinogradCuda
from algorithms.registry import algorithm_sources, hash_sources, register
from algorithms.runtime import Runtime

register(DirectCuda())
register(Im2colGemmCuda())
register(ImplicitGemmCuda())
register(FftCuda())
register(ImplicitGemmTcCuda())
register(WinogradCuda())
register(DepthwiseCuda())
register(ImplicitGemmWgmmaCuda())

#: Devices are "cuda:N".
INDEXED = True

#: The modules that compile and launch kernels: each has KERNEL_FILE, shipped_kernels() and
#: its own `get_kernel` (which tests replace to emulate or check launches).
KERNEL_MODULES: tuple[ModuleType, ...] = (
    direct, im2col_gemm, implicit_gemm, fft, implicit_gemm_tc, winograd, depthwise, _rearrange,
    implicit_gemm_wgmma, _wgmma_nchw, spin,
)


def available() -> tuple[bool, str]:
    """Whether CuPy imports and sees at least one GPU, and why not."""
    from algorithms.cuda.runtime import cuda_available

    return cuda_available()


@functools.cache
def device_runtime(index: int) -> Runtime:
    """The runtime of GPU `index` (one per device per process)."""
    from algorithms.cuda.runtime import CudaRuntime

    return CudaRuntime(index)


def implementation_hash() -> str:
    """Hash of the CUDA algorithms' Python sources and every kernel source they compile, as
    this process imported them (see _loader.SOURCES)."""
    return _IMPLEMENTATION_HASH


def shipped_kernels() -> dict[str, tuple[str, ...]]:
    """Kernel file -> every template instance the Python side can compile from it.

    tests/test_kernels_compile.py compiles exactly these with nvcc, so the list cannot drift
    from what runs.
    """
    return {module.KERNEL_FILE: module.shipped_kernels() for module in KERNEL_MODULES}


__all__ = [
    "KERNEL_MODULES",
    "DepthwiseCuda",
    "DirectCuda",
    "FftCuda",
    "Im2colGemmCuda",
    "ImplicitGemmCuda",
    "ImplicitGemmTcCuda",
    "ImplicitGemmWgmmaCuda",
    "WinogradCuda",
    "shipped_kernels",
]


def _kept(path: Path) -> bytes:
    """A source's bytes: a kernel's as _loader.SOURCES kept it, a Python file's from disk."""
    if path.parent == _loader.KERNELS_DIR:
        return _loader.SOURCES[path.name].encode("utf-8")
    return path.read_bytes()


# Hashed at import, with the code this process runs (see _loader.SOURCES).
_IMPLEMENTATION_HASH = hash_sources(
    [*algorithm_sources(Path(__file__).resolve().parent),
     *(_loader.KERNELS_DIR / name for name in _loader.SOURCES)], _kept)
