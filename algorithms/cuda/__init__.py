"""The CUDA backend: four GPU convolution algorithms behind the common interface.

Importing this package registers the algorithms and needs neither a GPU nor CuPy:
`supports`, `configs` and `workspace_bytes` are plain Python. CuPy is imported the first
time an algorithm runs, and a clear RuntimeError says why when it cannot be.
"""

from __future__ import annotations

from algorithms.cuda import direct, fft, im2col_gemm, implicit_gemm
from algorithms.cuda.direct import DirectCuda
from algorithms.cuda.fft import FftCuda
from algorithms.cuda.im2col_gemm import Im2colGemmCuda
from algorithms.cuda.implicit_gemm import ImplicitGemmCuda
from algorithms.registry import register

register(DirectCuda())
register(Im2colGemmCuda())
register(ImplicitGemmCuda())
register(FftCuda())


def shipped_kernels() -> dict[str, tuple[str, ...]]:
    """Kernel file -> every template instance the Python side can compile from it.

    tests/test_kernels_compile.py compiles exactly these with nvcc, so the list cannot drift
    from what runs.
    """
    return {
        direct.KERNEL_FILE: direct.shipped_kernels(),
        im2col_gemm.KERNEL_FILE: im2col_gemm.shipped_kernels(),
        implicit_gemm.KERNEL_FILE: implicit_gemm.shipped_kernels(),
        fft.KERNEL_FILE: fft.shipped_kernels(),
    }


__all__ = ["DirectCuda", "FftCuda", "Im2colGemmCuda", "ImplicitGemmCuda", "shipped_kernels"]
