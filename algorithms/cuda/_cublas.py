"""One cuBLAS entry point: strided-batched GEMM on the current stream, no allocations.

Called with raw device pointers so that operands can be views into the caller's workspace
(cupy.matmul may copy or allocate). Strict arithmetic: the handle's math mode is set to
CUBLAS_DEFAULT_MATH for the call (no TF32 even if CUPY_TF32 is set) and restored after.
cuBLAS keeps its own per-handle workspace, allocated once by cuBLAS, not per call.
Batches are issued in pieces of at most MAX_BATCH: some cuBLAS kernels put the batch on a
grid dimension limited to 65535 (PyTorch splits at 63 * 1024 for the same reason), and the
FFT path's batch is its frequency count, which passes 65535 for inputs of about 360 x 360.
"""

from __future__ import annotations

import numpy as np

from algorithms.cuda._loader import require_cupy

OP_N = 0
OP_T = 1
OP_C = 2

_POINTER_MODE_HOST = 0
_DEFAULT_MATH = 0
_CUDA_R_16F = 2
_CUDA_R_32F = 0
_COMPUTE_32F = 68
_GEMM_DEFAULT = -1

#: Most matrices one cuBLAS call multiplies (see the module docstring).
MAX_BATCH = 63 * 1024

# Host scalars must outlive the call; cuBLAS reads them while enqueueing.
_ALPHA: dict[str, np.ndarray] = {
    "float16": np.ones(1, np.float32),  # float32 compute for half storage
    "float32": np.ones(1, np.float32),
    "float64": np.ones(1, np.float64),
    "complex64": np.ones(1, np.complex64),
    "complex128": np.ones(1, np.complex128),
}
_BETA: dict[str, np.ndarray] = {name: np.zeros_like(one) for name, one in _ALPHA.items()}


def gemm_strided_batched(
    dtype: str, transa: int, transb: int, m: int, n: int, k: int,
    a: int, lda: int, stride_a: int,
    b: int, ldb: int, stride_b: int,
    c: int, ldc: int, stride_c: int, batch: int, accumulate: bool = False,
    float32_c: bool = False,
) -> None:
    """C_i = op(A_i) @ op(B_i) (C_i += ... when `accumulate`) for i < batch, column-major.

    `float32_c`: float16 operands with a float32 C (a sum kept in float32). Enqueued on the
    current CuPy stream.
    """
    if float32_c and dtype != "float16":
        raise ValueError(f"a float32 C is for float16 operands, not {dtype}")
    item = np.dtype(dtype).itemsize
    c_item = 4 if float32_c else item
    for first in range(0, batch, MAX_BATCH):
        _gemm(dtype, transa, transb, m, n, k, a + first * item * stride_a, lda, stride_a,
              b + first * item * stride_b, ldb, stride_b, c + first * c_item * stride_c, ldc,
              stride_c, min(MAX_BATCH, batch - first), accumulate, float32_c)


def _gemm(
    dtype: str, transa: int, transb: int, m: int, n: int, k: int,
    a: int, lda: int, stride_a: int,
    b: int, ldb: int, stride_b: int,
    c: int, ldc: int, stride_c: int, batch: int, accumulate: bool = False,
    float32_c: bool = False,
) -> None:
    """One cuBLAS strided-batched call (batch <= MAX_BATCH); beta = 1 when `accumulate`."""
    cupy = require_cupy()
    from cupy_backends.cuda.libs import cublas

    handle = cupy.cuda.device.get_cublas_handle()
    cublas.setStream(handle, cupy.cuda.get_current_stream().ptr)
    old_mode = cublas.getPointerMode(handle)
    old_math = cublas.getMathMode(handle)
    cublas.setPointerMode(handle, _POINTER_MODE_HOST)
    cublas.setMathMode(handle, _DEFAULT_MATH)
    alpha = _ALPHA[dtype].ctypes.data
    beta = (_ALPHA if accumulate else _BETA)[dtype].ctypes.data
    try:
        if dtype == "float16":
            cublas.gemmStridedBatchedEx(
                handle, transa, transb, m, n, k, alpha,
                a, _CUDA_R_16F, lda, stride_a, b, _CUDA_R_16F, ldb, stride_b, beta,
                c, _CUDA_R_32F if float32_c else _CUDA_R_16F, ldc, stride_c, batch,
                _COMPUTE_32F, _GEMM_DEFAULT,
            )
        else:
            fn = {
                "float32": cublas.sgemmStridedBatched,
                "float64": cublas.dgemmStridedBatched,
                "complex64": cublas.cgemmStridedBatched,
                "complex128": cublas.zgemmStridedBatched,
            }[dtype]
            fn(handle, transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
               beta, c, ldc, stride_c, batch)
    finally:
        cublas.setPointerMode(handle, old_mode)
        cublas.setMathMode(handle, old_math)
