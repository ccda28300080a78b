"""cuBLASLt matmuls worked out once per GEMM shape, for _cublas (CONVTUNE_CUBLASLT=1).

Why: a cublasGemmStridedBatchedEx call took 17.8 us of host time on the H200 (launch_cost,
2026-11-26), of which our Python and ctypes are about 5 us (cublas_call_cost.py, this CPU).
The rest is cuBLAS choosing a kernel for the shape again on every call. cuBLASLt separates
that choice (cublasLtMatmulAlgoGetHeuristic) from the call (cublasLtMatmul), so it is
made once per shape and kept, with the descriptors it needs. This is what PyTorch does for
its Lt GEMMs.

Off by default. On an H100 (2026-11-27) the GPU tests pass with it on
(tests/gpu/test_cublaslt.py) and `gpu_session.sh launch_cost` put a call at 9.4 us of host
time against 9.9 through cublasGemmStridedBatchedEx; no model has been timed with it yet.

Operands are column-major, as _cublas.gemm_strided_batched's: A is m x k (k x m when
transposed), B k x n, C m x n, each with its leading dimension, a batch count and a batch
stride in elements. D is C (in place, beta as given). A shape the heuristic finds no
algorithm for (a type cuBLASLt does not take, say) is marked so, and _cublas calls
cublasGemmStridedBatchedEx for it.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

ENV = "CONVTUNE_CUBLASLT"

# cublasLt.h: cublasLtMatmulDescAttributes_t, cublasLtMatrixLayoutAttribute_t,
# cublasLtMatmulPreferenceAttributes_t.
_TRANSA, _TRANSB = 3, 4
_BATCH_COUNT, _BATCH_STRIDE = 5, 6
_MAX_WORKSPACE = 1
#: sizeof(cublasLtMatmulHeuristicResult_t): the algorithm (uint64_t data[8]) first, then
#: its workspace size (size_t), state (int), waves (float) and four reserved ints.
RESULT_BYTES = 96
OP_N = 0


def enabled() -> bool:
    """Whether GEMMs go through cuBLASLt (CONVTUNE_CUBLASLT=1)."""
    return os.environ.get(ENV, "0") == "1"


@dataclass(frozen=True)
class Shape:
    """What a matmul is worked out for: everything of a GEMM but its operands and scalars.
    Types are cudaDataType codes; `scale` is that of alpha and beta."""

    a_type: int
    c_type: int
    compute: int
    scale: int
    transa: int
    transb: int
    m: int
    n: int
    k: int
    lda: int
    stride_a: int
    ldb: int
    stride_b: int
    ldc: int
    stride_c: int
    batch: int


def check_status(status: int, what: str) -> None:
    """Raise RuntimeError naming `what` for a nonzero cuBLAS or cuBLASLt status."""
    if status != 0:
        raise RuntimeError(f"{what} failed with cuBLAS status {status}")


class Matmul:
    """One shape's matmul descriptor, A, B and C layouts, and the heuristic's algorithm
    (`found`: False when it had none)."""

    def __init__(self, lib: Any, handle: ctypes.c_void_p, shape: Shape,
                 workspace_bytes: int) -> None:
        self._lib = lib
        self.desc = ctypes.c_void_p()
        self.layouts = (ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p())  # A, B, C
        check_status(lib.cublasLtMatmulDescCreate(ctypes.byref(self.desc), shape.compute,
                                            shape.scale), "cublasLtMatmulDescCreate")
        for attribute, value in ((_TRANSA, shape.transa), (_TRANSB, shape.transb)):
            op = ctypes.c_int32(value)  # cublasOperation_t
            check_status(lib.cublasLtMatmulDescSetAttribute(
                self.desc, attribute, ctypes.byref(op), ctypes.c_size_t(4)),
                "cublasLtMatmulDescSetAttribute")
        a_dims = (shape.m, shape.k) if shape.transa == OP_N else (shape.k, shape.m)
        b_dims = (shape.k, shape.n) if shape.transb == OP_N else (shape.n, shape.k)
        for layout, dtype, (rows, cols), ld, stride in (
                (self.layouts[0], shape.a_type, a_dims, shape.lda, shape.stride_a),
                (self.layouts[1], shape.a_type, b_dims, shape.ldb, shape.stride_b),
                (self.layouts[2], shape.c_type, (shape.m, shape.n), shape.ldc, shape.stride_c)):
            check_status(lib.cublasLtMatrixLayoutCreate(
                ctypes.byref(layout), dtype, ctypes.c_uint64(rows), ctypes.c_uint64(cols),
                ctypes.c_int64(ld)), "cublasLtMatrixLayoutCreate")
            batch: tuple[tuple[int, ctypes.c_int32 | ctypes.c_int64], ...] = (
                (_BATCH_COUNT, ctypes.c_int32(shape.batch)),
                (_BATCH_STRIDE, ctypes.c_int64(stride)))
            for attribute, setting in batch:
                check_status(lib.cublasLtMatrixLayoutSetAttribute(
                    layout, attribute, ctypes.byref(setting),
                    ctypes.c_size_t(ctypes.sizeof(setting))), "cublasLtMatrixLayoutSetAttribute")
        found = heuristic(lib, handle, self, workspace_bytes)
        self.found = bool(found)
        self.result = found[0] if found else ctypes.create_string_buffer(RESULT_BYTES)

    def __del__(self) -> None:
        lib = getattr(self, "_lib", None)
        if lib is None:
            return
        for layout in getattr(self, "layouts", ()):
            if layout.value:
                lib.cublasLtMatrixLayoutDestroy(layout)
        if getattr(self, "desc", None) is not None and self.desc.value:
            lib.cublasLtMatmulDescDestroy(self.desc)


def heuristic(lib: Any, handle: ctypes.c_void_p, matmul: Matmul, workspace_bytes: int,
              count: int = 1) -> list[ctypes.Array[ctypes.c_char]]:
    """Up to `count` cublasLtMatmulHeuristicResult_t buffers (the algorithm first) that
    cublasLtMatmulAlgoGetHeuristic offers for `matmul`'s descriptors within
    `workspace_bytes`, best first; none where it has none."""
    preference = ctypes.c_void_p()
    check_status(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(preference)),
                 "cublasLtMatmulPreferenceCreate")
    results = ctypes.create_string_buffer(RESULT_BYTES * count)
    returned = ctypes.c_int(0)
    try:
        limit = ctypes.c_uint64(workspace_bytes)
        check_status(lib.cublasLtMatmulPreferenceSetAttribute(
            preference, _MAX_WORKSPACE, ctypes.byref(limit), ctypes.c_size_t(8)),
            "cublasLtMatmulPreferenceSetAttribute")
        status = lib.cublasLtMatmulAlgoGetHeuristic(
            handle, matmul.desc, *matmul.layouts, matmul.layouts[2], preference, count,
            results, ctypes.byref(returned))
    finally:
        lib.cublasLtMatmulPreferenceDestroy(preference)
    if status != 0:
        return []
    return [ctypes.create_string_buffer(results.raw[i * RESULT_BYTES:(i + 1) * RESULT_BYTES],
                                        RESULT_BYTES) for i in range(returned.value)]


class Lt:
    """libcublasLt through ctypes: a handle per device and a Matmul per (device, Shape)."""

    def __init__(self, lib: Any, workspace_bytes: int) -> None:
        self._lib = lib
        self._lib.cublasLtMatmul.restype = ctypes.c_int
        self._workspace_bytes = workspace_bytes
        self._handles: dict[int, ctypes.c_void_p] = {}
        self._matmuls: dict[tuple[int, ...], Matmul] = {}

    def matmul(self, device: int, *shape: int) -> Matmul:
        """The Matmul of a Shape (its fields, in order) on `device`, worked out on first
        use. Looked up by a plain tuple: on every call, a dataclass's construction and hash
        cost more than the rest of our path."""
        key = (device, *shape)
        found = self._matmuls.get(key)
        if found is None:
            handle = self._handles.get(device)
            if handle is None:
                handle = ctypes.c_void_p()
                check_status(self._lib.cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
                self._handles[device] = handle
            found = self._matmuls[key] = Matmul(
                self._lib, handle, Shape(*shape), self._workspace_bytes)
        return found

    def algorithms(self, device: int, matmul: Matmul, count: int) -> list[Any]:
        """Up to `count` algorithms the heuristic offers for `matmul` on `device` (its first
        is `matmul.result`), for `run`'s `algorithm`."""
        return heuristic(self._lib, self._handles[device], matmul, self._workspace_bytes, count)

    def run(self, device: int, matmul: Matmul, alpha: ctypes.c_void_p, a: int, b: int,
            beta: ctypes.c_void_p, c: int, workspace: int, stream: int,
            algorithm: Any = None) -> None:
        """D = C = alpha op(A) op(B) + beta C on `stream` (addresses: device; alpha, beta:
        host), with the heuristic's first algorithm or `algorithm` (one of `algorithms`)."""
        layout_a, layout_b, layout_c = matmul.layouts
        c_pointer = ctypes.c_void_p(c)
        status = self._lib.cublasLtMatmul(
            self._handles[device], matmul.desc, alpha, ctypes.c_void_p(a), layout_a,
            ctypes.c_void_p(b), layout_b, beta, c_pointer, layout_c, c_pointer, layout_c,
            matmul.result if algorithm is None else algorithm, ctypes.c_void_p(workspace),
            ctypes.c_size_t(self._workspace_bytes),
            ctypes.c_void_p(stream))
        if status:
            check_status(status, "cublasLtMatmul")
