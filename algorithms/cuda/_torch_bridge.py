"""torch CUDA tensors and streams as CuPy sees them, kept across plan calls (issue 9).

A plan call with torch tensors needs each tensor's device address and, for ordering, torch's
current stream. The usual call (plain C-contiguous tensors of the plan's shapes and dtype,
torch's current stream also CuPy's) takes the addresses as they are (`ready`). Any other
goes the checked way: a CuPy view of each tensor and torch's stream as a CuPy stream, both
built from raw pointers, not from torch's protocols, and both kept, so that a model that
passes the same tensors and runs on the same stream again builds nothing.
"""

from __future__ import annotations

import functools
from typing import Any

from algorithms.runtime import is_torch, out_overlaps

#: torch dtypes a CUDA tensor is viewed as without a copy (bfloat16 as its uint16 bits).
_VIEW_DTYPES = {"float32": "float32", "float16": "float16", "float64": "float64",
                "bfloat16": "uint16", "uint16": "uint16"}
#: Most views and stream wrappers a bridge keeps (then it starts over).
_KEPT = 256
#: The torch dtype a storage dtype's tensors arrive in: _VIEW_DTYPES read backwards, a
#: uint16 storage holding bfloat16 (plans take no uint16 problems).
_TORCH_DTYPES = {storage: name for name, storage in _VIEW_DTYPES.items() if name != "uint16"}


@functools.cache
def _view_dtype(dtype: Any) -> str | None:
    # Keyed by the torch dtype object: naming it (str() and a prefix strip) on every
    # operand of every plan call cost about a microsecond.
    return _VIEW_DTYPES.get(str(dtype).removeprefix("torch."))


class TorchBridge:
    """Views of torch CUDA tensors and wrappers of torch's streams on one GPU."""

    def __init__(self, cupy: Any, index: int, tensor_types: tuple[type, ...] | None = None
                 ) -> None:
        self._cupy = cupy
        self._index = index
        # The classes `ready` takes as they are: torch.Tensor and Parameter, found when the
        # first tensor arrives (so that a process without torch never imports it); tests
        # pass stand-ins. Subclasses (FakeTensor, DTensor...) go the checked way.
        self._tensor_types = tensor_types
        self._raw_stream: Any = None
        self._views: dict[tuple[int, tuple[int, ...], str, int], Any] = {}
        # The views by identity, with their dtype: what `built` answers from.
        self._built: dict[int, tuple[Any, str]] = {}
        self._streams: dict[int, Any] = {}

    def view(self, tensor: Any) -> Any | None:
        """A CuPy view of a C-contiguous torch tensor on this GPU, or None for anything else.

        Built from the data pointer, not `__cuda_array_interface__`: CuPy synchronizes the
        producer's stream when it consumes that interface (CUPY_CUDA_ARRAY_INTERFACE_SYNC,
        on by default), which blocked every plan call on all work queued before it (876 us
        of host time per call on an H100). Work is ordered on torch's stream instead
        (`stream`). The view owns nothing, so it is kept by address: the caller keeps the
        tensor alive for the call, and a model passes the same tensors again.
        """
        if not is_torch(tensor) or not tensor.is_cuda:
            return None
        dtype = _view_dtype(tensor.dtype)
        if dtype is None or not tensor.is_contiguous():
            return None
        # get_device() is an int from C++, cheaper than tensor.device (an object).
        key = (tensor.data_ptr(), tuple(tensor.shape), dtype, tensor.get_device())
        view = self._views.get(key)
        if view is None:
            if key[3] != self._index:
                return None  # another GPU's: the runtime's slower path names the mismatch
            if len(self._views) >= _KEPT:
                self._views.clear()
                self._built.clear()
            cupy = self._cupy
            nbytes = tensor.numel() * tensor.element_size()
            memory = cupy.cuda.UnownedMemory(key[0], nbytes, None, self._index)
            view = self._views[key] = cupy.ndarray(key[1], dtype,
                                                   cupy.cuda.MemoryPointer(memory, 0))
            self._built[id(view)] = (view, dtype)
        return view

    def built(self, array: Any) -> str | None:
        """The dtype of `array` if it is a view this bridge built (C-contiguous, on this
        GPU: nothing left to check or convert), else None.

        Why: the plan path checked each operand's flags, dtype and device again after
        adopting it, CuPy property reads of a microsecond or so each, three operands a
        call: 8 of the 70 profiled microseconds of a plan call outside its algorithm in
        the H200's host profile of 2026-11-26 (benchmarks/results/2026-11-26-h200).
        """
        found = self._built.get(id(array))
        return found[1] if found is not None and found[0] is array else None

    def ready(self, x: Any, w: Any, out: Any, shapes: tuple[tuple[int, ...], ...],
              storage: str) -> tuple[int, int, int, int] | None:
        """(torch's current stream, then the addresses of x, w and out) when all three are
        plain C-contiguous tensors on this GPU of `shapes` in the dtype `storage` holds;
        else None (the checked path then views, copies or names what is wrong).

        Why: the checked path costs about 15 Python-level steps per operand (a view kept
        by address, its shape and dtype read back, its contiguity), where a run needs only
        the address: issue 9's plan call, 30 us on an H100's host against a 15 us target.
        Every check here is one attribute read or call into torch's C++.
        """
        types = self._tensor_types
        if types is None:
            if not is_torch(x):
                return None
            import torch

            types = self._tensor_types = (torch.Tensor, torch.nn.Parameter)
        if type(x) not in types or type(w) not in types or type(out) not in types:
            return None
        dtype = _torch_dtype(storage)
        index = self._index
        a_shape, b_shape, out_shape = shapes
        if (x.dtype is not dtype or w.dtype is not dtype or out.dtype is not dtype
                or x.shape != a_shape or w.shape != b_shape or out.shape != out_shape
                or not (x.is_contiguous() and w.is_contiguous() and out.is_contiguous())
                or x.get_device() != index or w.get_device() != index
                or out.get_device() != index):
            return None
        x_at, w_at, out_at = x.data_ptr(), w.data_ptr(), out.data_ptr()
        if out_overlaps(out_at, out.nbytes, x_at, x.nbytes, w_at, w.nbytes):
            return None  # the checked path names the overlap
        return self._current_raw_stream(), x_at, w_at, out_at

    def _current_raw_stream(self) -> int:
        """torch's current stream on this GPU, as its raw handle."""
        raw = self._raw_stream
        if raw is None:
            import torch

            # Inductor's generated code reads the raw pointer this way (no Stream object
            # built per call); the public call is the fallback.
            found = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            index = self._index
            raw = self._raw_stream = found if found is not None else (
                lambda _index: torch.cuda.current_stream(index).cuda_stream)
        return int(raw(self._index))

    def stream(self) -> Any | None:
        """torch's current stream on this GPU as a CuPy stream, or None when it is already
        CuPy's current one (call with the GPU current)."""
        ptr = self._current_raw_stream()
        if ptr == int(self._cupy.cuda.get_current_stream().ptr):
            return None
        stream = self._streams.get(ptr)
        if stream is None:
            if len(self._streams) >= _KEPT:
                self._streams.clear()
            stream = self._streams[ptr] = _cupy_stream(self._cupy, ptr, self._index)
        return stream


class _RawStream:
    """A raw cudaStream_t in the CUDA stream protocol, which CuPy's Stream.from_external
    reads (version 0: the handle as an int)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return 0, self.ptr


def _cupy_stream(cupy: Any, ptr: int, index: int) -> Any:
    """A CuPy stream on the raw handle `ptr` of GPU `index`, not owned by CuPy."""
    # CuPy 14 deprecates ExternalStream (a DeprecationWarning on every new wrapper) for
    # Stream.from_external; CuPy 13, which pyproject still allows, has only the former.
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:
        return from_external(_RawStream(ptr))
    return cupy.cuda.ExternalStream(ptr, index)


@functools.cache
def _torch_dtype(storage: str) -> Any:
    """The torch dtype whose tensors a storage dtype's arrays view (None: no such tensors)."""
    import torch

    name = _TORCH_DTYPES.get(storage)
    return None if name is None else getattr(torch, name)
