"""The CPU backend: NumPy/BLAS implementations of every algorithm, registered on import."""

from algorithms.cpu.direct import DirectConv
from algorithms.cpu.fft import FftConv
from algorithms.cpu.im2col_gemm import Im2colGemmConv
from algorithms.cpu.implicit_gemm import ImplicitGemmConv
from algorithms.registry import register

for _algorithm in (DirectConv(), Im2colGemmConv(), ImplicitGemmConv(), FftConv()):
    register(_algorithm)

__all__ = ["DirectConv", "FftConv", "Im2colGemmConv", "ImplicitGemmConv"]
