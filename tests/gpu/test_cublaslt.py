"""The cuBLASLt path of our GEMMs (CONVTUNE_CUBLASLT=1, algorithms/cuda/_cublaslt.py): every
algorithm that calls cuBLAS, in every dtype and direction it takes, against the float64
reference, with the Lt matmuls it ran checked to be there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from algorithms.base import Algorithm
from algorithms.cuda import _cublas, _cublaslt, fft, im2col_gemm, winograd
from algorithms.problem import ConvProblem
from tests.cuda_shapes import SHAPES
from tests.gpu.conftest import config_failures
from tests.precision import make_problem


@pytest.fixture()
def lt(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """cuBLASLt on for one test: a fresh _Cublas that reads the switch, dropped after."""
    monkeypatch.setenv(_cublaslt.ENV, "1")
    _cublas._library.cache_clear()
    yield
    _cublas._library.cache_clear()


def _lt_matmuls() -> int:
    """How many shapes the process's _Cublas worked out through cuBLASLt, with an
    algorithm."""
    lt = _cublas._library()._lt
    assert lt is not None, "CONVTUNE_CUBLASLT=1 should have turned cuBLASLt on"
    return sum(m.found for m in lt._matmuls.values())


@pytest.mark.parametrize(("algorithm", "shape", "dtype", "math", "direction"), [
    (im2col_gemm.Im2colGemmCuda(), "odd", "float32", "fp32", "forward"),
    (im2col_gemm.Im2colGemmCuda(), "odd", "float32", "tf32", "forward"),
    (im2col_gemm.Im2colGemmCuda(), "odd", "float16", "fp32", "forward"),
    (im2col_gemm.Im2colGemmCuda(), "batch_odd_pixels", "float16", "fp32", "forward"),
    (im2col_gemm.Im2colGemmCuda(), "odd", "float64", "fp32", "forward"),
    (im2col_gemm.Im2colGemmCuda(), "stride_pair", "float32", "fp32", "backward_data"),
    (im2col_gemm.Im2colGemmCuda(), "stride_pair", "float16", "fp32", "backward_filter"),
    (winograd.WinogradCuda(), "odd", "float32", "fp32", "forward"),
    (winograd.WinogradCuda(), "odd", "float32", "tf32", "forward"),
    (fft.FftCuda(), "odd", "float32", "fp32", "forward"),
])
def test_gemms_through_cublaslt_match_the_reference(lt: None, algorithm: Algorithm, shape: str,
                                                    dtype: str, math: str,
                                                    direction: str) -> None:
    problem: ConvProblem = make_problem(**SHAPES[shape], dtype=dtype, math=math,
                                        direction=direction)
    assert algorithm.supports(problem), algorithm.supports(problem).reason
    failures = config_failures(algorithm, problem)
    assert not failures, "\n".join(failures)
    assert _lt_matmuls() > 0
