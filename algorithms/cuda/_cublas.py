"""One cuBLAS entry point: strided-batched GEMM on the current stream, no allocations.

Called with raw device pointers so that operands can be views into the caller's workspace
(cupy.matmul may copy or allocate). Strict arithmetic unless a call asks for TF32: the
handle's math mode is CUBLAS_DEFAULT_MATH (no TF32 even if CUPY_TF32 is set), and a call with
`tf32=True` (float32 only, for math "tf32" problems) computes in
CUBLAS_COMPUTE_32F_FAST_TF32. The handles and their 32 MiB workspaces are ours (a handle
per thread and device, a workspace per stream), called through ctypes (see _Cublas), so CUDA
graphs can capture the calls.
Batches are issued in pieces of at most MAX_BATCH: some cuBLAS kernels put the batch on a
grid dimension limited to 65535 (PyTorch splits at 63 * 1024 for the same reason), and the
FFT path's batch is its frequency count, which passes 65535 for inputs of about 360 x 360.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from algorithms.cuda import _cublaslt, _loader, _recording
from algorithms.cuda._cublaslt import check_status
from algorithms.cuda._lanes import lane_memory, lane_of, relaxed
from algorithms.cuda._loader import require_cupy

OP_N = 0
OP_T = 1
OP_C = 2

_POINTER_MODE_HOST = 0
_DEFAULT_MATH = 0
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
#: Their host addresses as the void pointers a call passes (the arrays live as long as the
#: module), made once: `.ctypes.data` builds a ctypes object on every read.
_ONE = {name: ctypes.c_void_p(one.ctypes.data) for name, one in _ALPHA.items()}
_ZERO = {name: ctypes.c_void_p(zero.ctypes.data) for name, zero in _BETA.items()}


def gemm_strided_batched(
    dtype: str, transa: int, transb: int, m: int, n: int, k: int,
    a: int, lda: int, stride_a: int,
    b: int, ldb: int, stride_b: int,
    c: int, ldc: int, stride_c: int, batch: int, accumulate: bool = False,
    float32_c: bool = False, tf32: bool = False,
) -> None:
    """C_i = op(A_i) @ op(B_i) (C_i += ... when `accumulate`) for i < batch, column-major.

    `float32_c`: float16 operands with a float32 C (a sum kept in float32). `tf32`: float32
    operands read as TF32 by the tensor cores. Enqueued on the current CuPy stream.
    """
    if float32_c and dtype != "float16":
        raise ValueError(f"a float32 C is for float16 operands, not {dtype}")
    if tf32 and dtype != "float32":
        raise ValueError(f"TF32 is for float32 operands, not {dtype}")
    item = np.dtype(dtype).itemsize
    c_item = 4 if float32_c else item
    taking = _recording.active()  # a dry run (_replay): write the calls down, make none
    for first in range(0, batch, MAX_BATCH):
        args = (dtype, transa, transb, m, n, k, a + first * item * stride_a, lda, stride_a,
                b + first * item * stride_b, ldb, stride_b, c + first * c_item * stride_c,
                ldc, stride_c, min(MAX_BATCH, batch - first), accumulate, float32_c, tf32)
        if taking is None:
            _gemm(*args)
        else:
            taking.add(_gemm, args)


#: cudaDataType and cublasComputeType_t of each storage dtype (library_types.h, cublas_api.h).
_DATA_TYPE = {"float32": 0, "float64": 1, "float16": 2, "complex64": 4, "complex128": 5}
_COMPUTE = {"float32": 68, "float16": 68, "complex64": 68, "float64": 70, "complex128": 70}
#: CUBLAS_COMPUTE_32F_FAST_TF32: FP32 accumulation of operands read as TF32.
_COMPUTE_FAST_TF32 = 77
#: The cudaDataType of alpha and beta (_ALPHA's) per storage dtype, as cuBLASLt's
#: descriptor names it: float for float16 and float32 (and TF32), else the dtype's own.
_SCALE = {"float16": 0, "float32": 0, "float64": 1, "complex64": 4, "complex128": 5}
#: cuBLAS's recommended workspace on Hopper; ours, so no call allocates (graph capture).
WORKSPACE_BYTES = 32 << 20


@dataclass
class _Bound:
    """A cuBLAS handle of one thread and device, and the stream it is bound to (None: not
    yet bound, so not yet given our workspace either)."""

    handle: ctypes.c_void_p
    stream: int | None = None


class _ThreadHandles(dict[int, _Bound]):
    """One thread's handles by device. When the thread ends, its thread-local storage goes
    and with it this dict: its handles go back to the pool for the next new thread."""

    def __init__(self, free: dict[int, list[ctypes.c_void_p]]) -> None:
        super().__init__()
        self._free = free

    def __del__(self) -> None:
        # No lock: this may run wherever a thread ends; list.append is atomic.
        for device, bound in self.items():
            self._free.setdefault(device, []).append(bound.handle)


class _Cublas:
    """libcublas through ctypes: a handle per thread and device, a workspace per stream.

    CuPy's cuBLAS wrappers re-bind the handle to CuPy's current stream on every call and
    refuse to while that stream is capturing a CUDA graph. PyTorch binds its handle and a
    workspace of its own before each call instead, which capture allows; so do we, and as
    PyTorch does, with a handle per thread (a handle that one thread binds to its stream
    runs another thread's GEMM on that stream, unordered with that thread's own work) and
    a workspace per stream (two streams' GEMMs at once must not share scratch memory).
    Threads on one stream share its workspace: the stream runs their GEMMs in turn. The
    workspaces are kept for the process, 32 MiB a stream that ran a GEMM, as PyTorch keeps
    its own.
    """

    def __init__(self, cupy: Any, lib: Any = None, lt: Any = None,
                 make_current: Callable[[], None] | None = None) -> None:
        """`lib`, `lt`: libcublas and libcublasLt (stand-ins in tests), else the process's;
        cuBLASLt only where _cublaslt.enabled(). `make_current`: makes this thread's CUDA
        context current unless one is (default _loader.ensure_context; stand-ins in tests)."""
        self._cupy = cupy
        self._make_current = make_current
        self._lib = lib or load_library(cupy)
        self._lt = None
        if _cublaslt.enabled():
            self._lt = _cublaslt.Lt(lt or load_library(cupy, "libcublasLt"), WORKSPACE_BYTES)
        # No argtypes: converting the call's 23 arguments through them took about 3 of the
        # 4 us a call costs here (a no-op stand-in, 2026-11-26); `gemm` passes each as its
        # C type instead (ints as int, addresses as c_void_p, strides as c_longlong).
        # tests/test_cublas_calls.py pins what arrives.
        self._gemm_ex = self._lib.cublasGemmStridedBatchedEx
        self._gemm_ex.restype = ctypes.c_int
        self._local = threading.local()
        self._free: dict[int, list[ctypes.c_void_p]] = {}  # finished threads' handles
        self._workspaces: dict[tuple[int, Hashable], Any] = {}  # (device, lane) -> workspace
        self._lock = threading.Lock()

    def handle(self) -> ctypes.c_void_p:
        """This thread's handle on the current device, bound to the current stream with
        that stream's workspace."""
        device = self._cupy.cuda.runtime.getDevice()  # no Device object per call
        bound = self._bound(device)
        stream = self._cupy.cuda.get_current_stream().ptr
        if stream != bound.stream:  # only this thread binds this handle
            # Setting the stream resets cuBLAS to its default workspace: give ours.
            check_status(self._lib.cublasSetStream_v2(bound.handle, ctypes.c_void_p(stream)),
                         "cublasSetStream")
            workspace = self._workspace(device, stream)
            check_status(self._lib.cublasSetWorkspace_v2(
                bound.handle, ctypes.c_void_p(workspace.ptr),
                ctypes.c_size_t(WORKSPACE_BYTES)), "cublasSetWorkspace")
            bound.stream = stream
        return bound.handle

    def _workspace(self, device: int, stream: int) -> Any:
        """The workspace of GEMMs on `stream` of `device`, allocated on its first GEMM, in
        relaxed capture mode (_lanes.relaxed): a stream first used while it captures a CUDA
        graph (PyTorch's warm-up-elsewhere pattern) gets its own there too, outside CuPy's
        allocator (_lanes.lane_memory)."""
        key = (device, lane_of(stream))
        found = self._workspaces.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._workspaces.get(key)
            if found is None:
                found = self._workspaces[key] = lane_memory(self._cupy, WORKSPACE_BYTES,
                                                            stream)
        return found

    def _thread_handles(self) -> _ThreadHandles:
        """This thread's handles, made (and a CUDA context made current) on its first GEMM."""
        handles = getattr(self._local, "handles", None)
        if handles is None:
            # A pooled handle skips cublasCreate, and cuBLAS launches some kernels through
            # the driver API, which a thread without a current context (a worker whose
            # first CUDA call this is) has refused (pytorch/pytorch#120131).
            (self._make_current or _loader.ensure_context)()
            handles = self._local.handles = _ThreadHandles(self._free)
        return handles

    def _bound(self, device: int) -> _Bound:
        """This thread's handle on `device`: a finished thread's, else a new one."""
        handles = self._thread_handles()
        bound = handles.get(device)
        if bound is None:
            bound = handles[device] = _Bound(self._reused(device) or self._created())
        return bound

    def _reused(self, device: int) -> ctypes.c_void_p | None:
        try:
            return self._free.get(device, []).pop()  # atomic, as _ThreadHandles' append
        except IndexError:
            return None

    def _created(self) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        with relaxed():  # cublasCreate allocates: a thread's first GEMM may be in a capture
            check_status(self._lib.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
        check_status(self._lib.cublasSetPointerMode_v2(handle, _POINTER_MODE_HOST),
                     "cublasSetPointerMode")
        # Strict arithmetic: no TF32 even where CUPY_TF32 or NVIDIA_TF32_OVERRIDE asks.
        check_status(self._lib.cublasSetMathMode(handle, _DEFAULT_MATH), "cublasSetMathMode")
        return handle

    def gemm(self, dtype: str, c_type: str, compute: int, transa: int, transb: int, m: int,
             n: int, k: int, alpha: ctypes.c_void_p, a: int, lda: int, stride_a: int, b: int,
             ldb: int, stride_b: int, beta: ctypes.c_void_p, c: int, ldc: int, stride_c: int,
             batch: int) -> None:
        """cublasGemmStridedBatchedEx on the current stream (`alpha`, `beta`: host
        addresses; a, b, c: device addresses; all ints below 2**31 but the strides), or
        cuBLASLt's matmul for the shape where it is on and has an algorithm for it."""
        if self._lt is not None:
            self._thread_handles()  # its first GEMM makes this thread's context current
            device = self._cupy.cuda.runtime.getDevice()
            matmul = self._lt.matmul(  # _cublaslt.Shape's fields
                device, _DATA_TYPE[dtype], _DATA_TYPE[c_type], compute, _SCALE[dtype], transa,
                transb, m, n, k, lda, stride_a, ldb, stride_b, ldc, stride_c, batch)
            if matmul.found:
                stream = self._cupy.cuda.get_current_stream().ptr
                self._lt.run(device, matmul, alpha, a, b, beta, c,
                             self._workspace(device, stream).ptr, stream)
                return
        status = self._gemm_ex(
            self.handle(), transa, transb, m, n, k, alpha,
            ctypes.c_void_p(a), _DATA_TYPE[dtype], lda, ctypes.c_longlong(stride_a),
            ctypes.c_void_p(b), _DATA_TYPE[dtype], ldb, ctypes.c_longlong(stride_b), beta,
            ctypes.c_void_p(c), _DATA_TYPE[c_type], ldc, ctypes.c_longlong(stride_c), batch,
            compute, _GEMM_DEFAULT)
        if status:
            check_status(status, f"cublasGemmStridedBatchedEx ({dtype})")


def load_library(cupy: Any, stem: str = "libcublas") -> ctypes.CDLL:
    """The library `stem` ("libcublas", "libcublasLt") that this process has loaded (found in
    its maps: CuPy loads libcublas, which loads libcublasLt), else one by soname."""
    from cupy_backends.cuda.libs import cublas  # noqa: F401  (loads libcublas)

    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if f"/{stem}.so" in line}
    except OSError:
        paths = set()
    major = cupy.cuda.runtime.runtimeGetVersion() // 1000
    for name in [*sorted(paths), f"{stem}.so.{major}", f"{stem}.so"]:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise RuntimeError(f"{stem} could not be loaded")


@functools.cache
def _library() -> _Cublas:
    """The process's one _Cublas, made on first use."""
    return _Cublas(require_cupy())


def _gemm(
    dtype: str, transa: int, transb: int, m: int, n: int, k: int,
    a: int, lda: int, stride_a: int,
    b: int, ldb: int, stride_b: int,
    c: int, ldc: int, stride_c: int, batch: int, accumulate: bool = False,
    float32_c: bool = False, tf32: bool = False,
) -> None:
    """One cuBLAS strided-batched call (batch <= MAX_BATCH); beta = 1 when `accumulate`."""
    alpha = _ONE[dtype]
    beta = (_ONE if accumulate else _ZERO)[dtype]
    compute = _COMPUTE_FAST_TF32 if tf32 else _COMPUTE[dtype]
    _library().gemm(dtype, "float32" if float32_c else dtype, compute, transa, transb, m, n,
                    k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c,
                    batch)
