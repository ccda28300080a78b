"""The CUDA runtime: CuPy buffers on one GPU, streams, verification on the device, identity;
its timing (CUDA events, L2 flushes) is event_timing's.

CuPy is imported lazily (inside `cuda_available` and `CudaRuntime`), so importing this module
works on a machine without CuPy or a GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, cast

import numpy as np

from algorithms.cuda import _ahead, _cublaslt
from algorithms.cuda._lanes import (
    PER_THREAD_STREAM,
    lane_memory,
    lane_of,
    stream_captures,
    stream_of,
)
from algorithms.cuda._loader import INT32_LIMIT
from algorithms.cuda._torch_bridge import TorchBridge
from algorithms.cuda.event_timing import EventTiming
from algorithms.problem import ConvProblem
from algorithms.reference_gemm import errors, reference_gemm
from algorithms.runtime import Prepared, is_torch, out_overlaps

_DLPACK_CUDA = 2  # kDLCUDA in DLPack's device-type enum

#: CuPy has no bfloat16: such arrays are uint16 arrays of the bits (the kernels' bf16_t).
_STORAGE = {"bfloat16": "uint16"}


@functools.cache
def _numpy_dtype(name: str) -> np.dtype[Any]:
    return np.dtype(name)


def cuda_available() -> tuple[bool, str]:
    """Whether CuPy imports and sees at least one GPU, and why not."""
    try:
        import cupy
    except ModuleNotFoundError as exc:  # not installed: say which extra brings it
        return False, f"CuPy is not installed ({exc}): pip install 'convtune[cuda]'"
    except Exception as exc:  # a CUDA install CuPy cannot load
        return False, f"CuPy is not importable: {exc}"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError: no driver, no device
        return False, f"CuPy sees no CUDA device: {exc}"
    if count < 1:
        return False, "CuPy sees no CUDA device"
    return True, f"{count} CUDA device(s), CuPy {cupy.__version__}"


class CudaRuntime(EventTiming):
    """One GPU as a tuning device (all work on CuPy's current stream of that device)."""

    backend = "cuda"
    #: A plan captured in a CUDA graph keeps its workspace's address for every replay, and
    #: a replay may run beside later work: so each plan keeps its own, per stream.
    shares_scratch = False
    captures = True
    #: Our kernels index in 32 bits: each algorithm refuses a larger operand.
    max_operand_elements: int | None = INT32_LIMIT

    def __init__(self, index: int) -> None:
        import cupy

        count = int(cupy.cuda.runtime.getDeviceCount())
        if not 0 <= index < count:
            raise ValueError(f"cuda:{index} does not exist ({count} device(s))")
        self.index = index
        self.device = f"cuda:{index}"
        self._cupy = cupy
        self._dev = cupy.cuda.Device(index)
        self._props: dict[str, Any] = cupy.cuda.runtime.getDeviceProperties(index)
        self._flush = None  # EventTiming's, allocated on the first timing
        self.last_host_ms = None
        # Per-call host costs of the plan path (tuner.plans), kept across calls.
        self._torch = TorchBridge(cupy, index)
        self._ndarray = cupy.ndarray
        self._get_device = cupy.cuda.runtime.getDevice
        self._current_stream = cupy.cuda.get_current_stream

    def prepare(self, problem: ConvProblem, candidates: Iterable[tuple[Any, str]]
                ) -> Prepared:
        """Compile the kernels the candidates' runs need, several at once (_ahead)."""
        with self._dev:
            return _ahead.prepare(problem, candidates, self.index)

    # --- buffers ---------------------------------------------------------------------------
    def storage_dtype(self, dtype: str) -> str:
        """The CuPy dtype holding `dtype`: bfloat16 as its uint16 bits, others as they are."""
        return _STORAGE.get(dtype, dtype)

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        """An uninitialised C-contiguous device array (bfloat16: uint16 bits)."""
        with self._dev:
            return self._cupy.empty(shape, dtype=self.storage_dtype(dtype))

    def scratch(self, nbytes: int) -> Any:
        """Not here: a GPU plan keeps its own workspace per stream (shares_scratch)."""
        raise NotImplementedError("GPU plans keep their own workspaces")

    def workspace(self, nbytes: int) -> Any:
        """A 1-D uint8 device workspace of `nbytes` (None for 0), also where the current
        stream captures a CUDA graph: allocated in relaxed capture mode (_lanes.relaxed),
        outside CuPy's allocator there (_lanes.lane_memory)."""
        if not nbytes:
            return None
        with self._dev:
            memory = lane_memory(self._cupy, nbytes, self._current_stream().ptr)
            return self._cupy.ndarray((nbytes,), np.uint8, memory)

    def random(self, shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> Any:
        """Standard-normal values generated on the device, seeded from `rng` (never zeros)."""
        seed = int(rng.integers(0, 2**63 - 1))
        with self._dev:
            # RandomState draws through the cuRAND library (no run-time compilation).
            gen = self._cupy.random.RandomState(seed)
            if dtype == "float64":
                return gen.standard_normal(shape, dtype=np.float64)
            # float16 has no generator of its own: draw float32 and round.
            drawn = gen.standard_normal(shape, dtype=np.float32)
            if dtype == "bfloat16":  # round to nearest even, keep the high 16 bits
                bits = drawn.view(np.uint32)
                rounded = bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))
                return (rounded >> 16).astype(np.uint16)
            return drawn.astype(dtype, copy=False)

    def to_numpy(self, array: Any, dtype: str | None = None) -> np.ndarray:
        """A host copy (synchronous); bfloat16 bits come back as NumPy bfloat16."""
        host = array if isinstance(array, np.ndarray) else self._cupy.asnumpy(array)
        if dtype in _STORAGE and host.dtype == np.dtype(_STORAGE[dtype]):
            return host.view(dtype)
        return host

    def adopt(self, array: Any) -> Any | None:
        """The caller's array as a CuPy array without a copy, or None for a host array.

        Accepts CuPy arrays and anything exposing `__cuda_array_interface__` or DLPack
        (a torch CUDA tensor, for instance). A GPU array on another device raises
        ValueError: using it here would need a copy between devices.
        """
        cupy = self._cupy
        if isinstance(array, cupy.ndarray):
            adopted = array
        elif (view := self._torch.view(array)) is not None:
            return view  # on this GPU: the bridge views no other's
        elif hasattr(array, "__cuda_array_interface__"):
            try:
                with self._dev:
                    adopted = cupy.asarray(array)  # zero-copy view of the interface
            except Exception as exc:  # torch refuses the interface when requires_grad
                fallback = self._from_dlpack(array)
                if fallback is None:
                    raise ValueError(f"cannot adopt {type(array).__name__}: {exc}") from exc
                adopted = fallback
        else:
            adopted = self._from_dlpack(array)
            if adopted is None:
                return None
        if adopted.device.id != self.index:
            raise ValueError(
                f"array lives on cuda:{adopted.device.id}, not on {self.device}"
            )
        return adopted

    def _from_dlpack(self, array: Any) -> Any | None:
        dev = getattr(array, "__dlpack_device__", None)
        if dev is None:
            return None
        try:
            kind, _index = dev()
        except Exception:  # a broken protocol object is "not ours"
            return None
        if int(kind) != _DLPACK_CUDA:
            return None
        with self._dev:
            return self._cupy.from_dlpack(array)

    def ready(self, x: Any, w: Any, out: Any, shapes: tuple[tuple[int, ...], ...],
              storage: str) -> tuple[Hashable, Any, Any, Any] | None:
        """(lane, x, w, out as a run takes them) when the three need nothing done: this
        GPU's C-contiguous arrays of `shapes` in `storage`, all CuPy arrays or all plain
        torch tensors, with this GPU current and, for tensors, torch's current stream also
        CuPy's. Else None: the plan's checked path converts, switches or names the fault.

        Tensors come as their addresses (ints), not as CuPy views: nothing is built or
        looked up per operand. A plan runs them through its algorithm's `direct_runner`
        (algorithms.cuda._replay), which replays the run at them or passes them to `run`
        as Addresses (every CUDA algorithm reads its operands' `.data.ptr` only).
        """
        if out is None:
            return None
        if type(x) is self._ndarray:
            if not (self._cupy_ready(x, shapes[0], storage)
                    and self._cupy_ready(w, shapes[1], storage)
                    and self._cupy_ready(out, shapes[2], storage)):
                return None
            if self._get_device() != self.index or out_overlaps(
                    out.data.ptr, out.nbytes, x.data.ptr, x.nbytes, w.data.ptr, w.nbytes):
                return None  # the checked path names the overlap
            stream = int(self._current_stream().ptr)
            # Inline as below: a call to lane_of on every plan call for the one rare handle.
            return (stream if stream != PER_THREAD_STREAM else lane_of(stream)), x, w, out
        found = self._torch.ready(x, w, out, shapes, storage)
        if found is None or self._get_device() != self.index:
            return None
        if found[0] != self._current_stream().ptr:
            return None  # torch's side stream: the checked path makes it CuPy's too
        if found[0] == PER_THREAD_STREAM:
            return (lane_of(found[0]), *found[1:])
        return found

    def output(self, x: Any, shape: tuple[int, ...], storage: str) -> Any | None:
        """A new CuPy array of `shape` (from the pool of CuPy's current stream) for a CuPy
        `x` on this GPU while this GPU is current, else None (the plan's checked path
        allocates, switching device).

        Why: a result allocated before the call lets a plan or `convolve` called without
        `out` take the direct path (`ready`) too, as torch tensors' results always could
        (`x.new_empty`): on the H200 of 2026-11-27 `convolve` took 44.5 us with CuPy arrays
        against 31.1 with torch tensors, the difference the checked path's.
        """
        if (type(x) is self._ndarray and x.device.id == self.index
                and self._get_device() == self.index):
            return self._cupy.empty(shape, dtype=_numpy_dtype(storage))
        return None

    def _cupy_ready(self, array: Any, shape: tuple[int, ...], storage: str) -> bool:
        return (type(array) is self._ndarray and array.shape == shape
                and array.dtype == _numpy_dtype(storage) and array.flags.c_contiguous
                and array.device.id == self.index)

    def contiguous(self, array: Any, dtype: str) -> Any:
        """C-contiguous in `dtype`'s storage on this device; a no-op when it already is."""
        storage = self.storage_dtype(dtype)
        if self._torch.built(array) == storage:
            return array  # a torch tensor's view, checked when it was built
        # dtype objects compare in C; `dtype.name` is Python code in NumPy (a microsecond
        # or two per operand on every plan call).
        if (isinstance(array, self._cupy.ndarray) and array.flags.c_contiguous
                and array.dtype == _numpy_dtype(storage) and array.device.id == self.index):
            return array  # the plan's usual case, on every call: no device switch
        if isinstance(array, np.ndarray) and array.dtype.name == dtype != storage:
            array = array.view(storage)  # host bfloat16 (ml_dtypes) to its bits
        with self._dev:
            # The copy would come from CuPy's pool and go back to it after the call, while a
            # graph captured now would go on reading and writing it at every replay.
            if stream_captures(self._cupy, int(self._current_stream().ptr)):
                raise ValueError("an operand that is not a C-contiguous array of the plan's "
                                 "dtype on this GPU needs a copy, which a CUDA graph "
                                 "capture cannot keep: pass C-contiguous operands when "
                                 "capturing")
            return self._cupy.ascontiguousarray(self._cupy.asarray(array, dtype=storage))

    def synchronize(self) -> None:
        """Wait for all work queued on the device."""
        self._dev.synchronize()

    def fault(self) -> str | None:
        """The error a synchronize and a tiny allocation raise now, or None.

        An illegal address or a kernel trap is sticky: the CUDA context refuses all later
        work in this process, so every later candidate would "fail" for a reason of not its
        own. A recoverable error (an invalid launch configuration, say) passes this probe.
        """
        try:
            with self._dev:
                self._dev.synchronize()
                self._cupy.zeros(1, dtype=np.uint8)
                self._dev.synchronize()
        except Exception as exc:  # CUDARuntimeError and friends
            return f"{type(exc).__name__}: {exc}"
        return None

    def activate(self) -> AbstractContextManager[None]:
        """Make this GPU current: kernels, streams, cuBLAS and cuFFT follow the current one."""
        return cast(AbstractContextManager[None], self._dev)

    # --- streams -------------------------------------------------------------------------
    def lane(self) -> Hashable:
        """The lane of CuPy's current stream on this device (what work enqueued now is
        ordered on): its handle, with the thread for the per-thread default stream."""
        with self._dev:
            return lane_of(int(self._cupy.cuda.get_current_stream().ptr))

    def capturing(self, lane: Hashable) -> bool:
        """Whether `lane`'s stream is capturing a CUDA graph now: no query for the legacy
        default stream, which is never captured (the usual eager stream of CuPy and torch)."""
        return stream_captures(self._cupy, stream_of(lane))

    @contextmanager
    def caller_stream(self, array: Any) -> Iterator[None]:
        """This GPU current, and for a torch tensor torch's current stream as CuPy's.

        PyTorch and CuPy keep separate notions of the current stream: work for a tensor
        must be ordered on torch's, or it races the ops around it.
        """
        with self._dev:
            stream = self._torch.stream() if is_torch(array) else None
            if stream is None:
                yield
                return
            with stream:
                yield

    def reference(self, a: Any, b: Any, problem: ConvProblem) -> Any:
        """The float64 reference on this GPU (per-tap cuBLAS DGEMMs), never copied out."""
        with self._dev:
            return reference_gemm(self._cupy, a, b, problem)

    def compare(self, out: Any, ref: Any, dtype: str) -> tuple[float, float]:
        """(max abs error, relative error) on this GPU; only the two scalars come back."""
        with self._dev:
            return errors(self._cupy, out, ref, dtype)

    # --- identity ------------------------------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        """What timings are valid for: GPU model, architecture, SMs, memory, software."""
        cupy = self._cupy
        props = self._props
        name = props.get("name", b"")
        return {
            "kind": "cuda",
            "name": name.decode() if isinstance(name, bytes) else str(name),
            "arch": f"{props['major']}.{props['minor']}",
            "units": int(props["multiProcessorCount"]),
            "memory_bytes": int(props["totalGlobalMem"]),
            "l2_bytes": self.l2_bytes,
            "driver": int(cupy.cuda.runtime.driverGetVersion()),
            "runtime": int(cupy.cuda.runtime.runtimeGetVersion()),
            "cupy": cupy.__version__,
            **self._libraries(),
            # Timings through cuBLASLt (CONVTUNE_CUBLASLT=1) are not those of cuBLAS's GEMMs.
            "gemm": "cublaslt" if _cublaslt.enabled() else "cublas",
        }

    def _libraries(self) -> dict[str, Any]:
        """The versions of the GPU libraries this process loaded: "runtime" is the one CuPy
        was built against, so a cuBLAS, cuFFT or NVRTC upgrade kept old times (and old
        compile failures) as measured here (a review of keys and fingerprints,
        2026-11-30). None where a library cannot say."""

        def cublas() -> int:
            from cupy_backends.cuda.libs import cublas

            with self._dev:
                return int(cublas.getVersion(self._cupy.cuda.device.get_cublas_handle()))

        def cufft() -> int:
            from cupy.cuda import cufft

            return int(cufft.getVersion())

        def nvrtc() -> str:
            # cublas and nvrtc are not submodules of cupy.cuda (an import of
            # "cupy.cuda.cublas" fails): CuPy's own modules, as _cublas and _binaries read.
            from cupy_backends.cuda.libs import nvrtc

            major, minor = nvrtc.getVersion()
            return f"{major}.{minor}"

        found: dict[str, Any] = {}
        for name, read in (("cublas", cublas), ("cufft", cufft), ("nvrtc", nvrtc)):
            try:
                found[name] = read()
            except Exception:  # an older CuPy, or a library that did not load
                found[name] = None
        return found

    def memory_bytes(self) -> int | None:
        """Free device memory, counting what CuPy's pool holds but does not use."""
        with self._dev:
            free, _total = self._cupy.cuda.runtime.memGetInfo()
            pool_free = self._cupy.get_default_memory_pool().free_bytes()
        return int(free) + int(pool_free)

