"""What our cuBLAS and cuBLASLt calls pass, checked on the host: a batch over cuBLAS's limit
split into calls, and, through stand-in libraries built with gcc, each argument arriving as
its C type and cuBLASLt's matmuls worked out once per shape and run with the algorithm given.
"""

from __future__ import annotations

import ctypes
import shutil
from typing import Any

import pytest

from algorithms.cuda import _cublas, _cublaslt
from benchmarks import cublas_call_cost


def test_gemm_batches_are_split_for_cublas(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch over MAX_BATCH becomes consecutive calls whose operands advance by the strides."""
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(_cublas, "_gemm", lambda *args: calls.append(args))
    batch, item = 2 * _cublas.MAX_BATCH + 5, 8
    _cublas.gemm_strided_batched("complex64", 2, 0, 3, 4, 5, 1000, 5, 15, 2000, 5, 0,
                                 3000, 3, 12, batch)
    assert [c[-4] for c in calls] == [_cublas.MAX_BATCH, _cublas.MAX_BATCH, 5]
    # beta = 0, C in the operands' type and strict FP32 unless asked otherwise.
    assert [c[-3:] for c in calls] == [(False, False, False)] * 3
    for i, call in enumerate(calls):
        first = i * _cublas.MAX_BATCH
        assert call[:6] == ("complex64", 2, 0, 3, 4, 5)
        assert call[6:15] == (1000 + first * 15 * item, 5, 15, 2000, 5, 0,
                              3000 + first * 12 * item, 3, 12)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a stand-in")
def test_cublas_receives_each_argument_as_its_c_type(tmp_path: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """_Cublas.gemm passes its 23 arguments without ctypes argtypes (they cost most of a
    call's host time): a stand-in libcublas records what arrives, 64-bit addresses and
    strides and a negative algorithm included."""
    library = cublas_call_cost.build_standin(tmp_path)
    recorder = ctypes.CDLL(str(library))
    recorder.last_values.restype = ctypes.POINTER(ctypes.c_longlong)
    recorder.last_pointers.restype = ctypes.POINTER(ctypes.c_void_p)
    blas = cublas_call_cost.standin_cublas(library)
    monkeypatch.setattr(_cublas, "_library", lambda: blas)
    a, b, c = (1 << 45) + 256, (1 << 46) + 512, (1 << 47) + 1024
    strides = (3 << 33, 5 << 33, 7 << 33)
    _cublas.gemm_strided_batched("float16", _cublas.OP_T, _cublas.OP_N, 196, 1024, 256,
                                 a, 256, strides[0], b, 256, strides[1], c, 196, strides[2],
                                 32, accumulate=True, float32_c=True)
    values = [recorder.last_values()[i] for i in range(17)]
    assert values == [1, 0, 196, 1024, 256, 2, 256, strides[0], 2, 256, strides[1], 0, 196,
                      strides[2], 32, 68, -1]
    pointers = [recorder.last_pointers()[i] for i in range(6)]
    assert pointers == [cublas_call_cost.STANDIN_HANDLE, _cublas._ONE["float16"].value, a, b,
                        _cublas._ONE["float16"].value, c]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a stand-in")
def test_cublaslt_matmul_is_worked_out_once_per_shape(tmp_path: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With CONVTUNE_CUBLASLT=1 a GEMM goes through cublasLtMatmul: its descriptors say the
    GEMM's types, transposes, layouts, batch and strides, the heuristic runs once per shape
    and gets our workspace limit, and the call passes the kept algorithm, C as D, our
    workspace and the current stream. A shape without an algorithm falls back to
    cublasGemmStridedBatchedEx."""
    monkeypatch.setenv(_cublaslt.ENV, "1")
    lt_library = cublas_call_cost.build_standin(tmp_path, cublas_call_cost.LT_STANDIN_SOURCE,
                                                "cublaslt_standin")
    library = cublas_call_cost.build_standin(tmp_path)
    blas = cublas_call_cost.standin_cublas(library, lt_library)
    monkeypatch.setattr(_cublas, "_library", lambda: blas)
    lt, recorder = ctypes.CDLL(str(lt_library)), ctypes.CDLL(str(library))
    lt.lt_last.restype = ctypes.POINTER(ctypes.c_longlong)
    recorder.last_values.restype = ctypes.POINTER(ctypes.c_longlong)
    a, b, c = (1 << 45) + 256, (1 << 46) + 512, (1 << 47) + 1024
    for _ in range(2):
        _cublas.gemm_strided_batched("float16", _cublas.OP_T, _cublas.OP_N, 196, 1024, 256,
                                     a, 256, 3 << 33, b, 256, 5 << 33, c, 196, 7 << 33, 32,
                                     accumulate=True, float32_c=True)
    got = [lt.lt_last()[i] for i in range(33)]
    # compute 32F, float scale, A^T: A is k x m (256 x 196), B k x n, C m x n (float32: 0).
    assert got[:4] == [68, 0, 1, 0]
    assert got[4:10] == [2, 256, 196, 256, 32, 3 << 33]
    assert got[10:16] == [2, 256, 1024, 256, 32, 5 << 33]
    assert got[16:22] == [0, 196, 1024, 196, 32, 7 << 33]
    assert got[22:26] == [1, _cublas.WORKSPACE_BYTES, cublas_call_cost.ALGO_MARK, a]
    assert got[26:29] == [b, c, c]
    assert got[29:33] == [cublas_call_cost.STANDIN_WORKSPACE, _cublas.WORKSPACE_BYTES,
                          cublas_call_cost.STANDIN_STREAM, 1]  # one heuristic, two calls
    lt.lt_no_algorithm(1)  # a new shape the heuristic has nothing for
    _cublas.gemm_strided_batched("float32", _cublas.OP_N, _cublas.OP_N, 8, 8, 8, a, 8, 64,
                                 b, 8, 64, c, 8, 64, 3)
    assert recorder.last_values()[2] == 8 and recorder.last_values()[14] == 3
    assert lt.lt_last()[32] == 1  # the Lt matmul was not called again


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a stand-in")
def test_cublaslt_lists_algorithms_and_runs_the_one_given(tmp_path: Any) -> None:
    """Lt.algorithms asks the heuristic for several algorithms of a matmul (the stand-in
    offers one), and Lt.run passes the one it is given, else the matmul's own."""
    library = ctypes.CDLL(str(cublas_call_cost.build_standin(
        tmp_path, cublas_call_cost.LT_STANDIN_SOURCE, "cublaslt_standin")))
    library.lt_last.restype = ctypes.POINTER(ctypes.c_longlong)
    lt = _cublaslt.Lt(library, 1024)
    matmul = lt.matmul(0, 0, 0, 68, 0, 0, 0, 8, 8, 8, 8, 64, 8, 64, 8, 64, 2)
    found = lt.algorithms(0, matmul, 4)
    assert matmul.found and len(found) == 1
    assert int.from_bytes(found[0].raw[:8], "little") == cublas_call_cost.ALGO_MARK
    other = ctypes.create_string_buffer(_cublaslt.RESULT_BYTES)
    other.raw = (0x5EED).to_bytes(8, "little") + bytes(_cublaslt.RESULT_BYTES - 8)
    for algorithm, word in ((None, cublas_call_cost.ALGO_MARK), (other, 0x5EED),
                            (found[0], cublas_call_cost.ALGO_MARK)):
        lt.run(0, matmul, _cublas._ONE["float32"], 1 << 40, 2 << 40, _cublas._ZERO["float32"],
               3 << 40, 4 << 40, 5, algorithm=algorithm)
        assert library.lt_last()[24] == word
