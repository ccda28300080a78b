"""torch CUDA tensors and streams as CuPy sees them, kept across plan calls (issue 9).

A plan call with torch tensors needs a CuPy view of each tensor and, for ordering, torch's
current stream as a CuPy stream. Both are built from raw pointers, not from torch's
protocols, and both are kept, so that a model that passes the same tensors and runs on the
same stream again builds nothing.
"""

from __future__ import annotations

import functools
from typing import Any

#: torch dtypes a CUDA tensor is viewed as without a copy (bfloat16 as its uint16 bits).
_VIEW_DTYPES = {"float32": "float32", "float16": "float16", "float64": "float64",
                "bfloat16": "uint16", "uint16": "uint16"}
#: Most views and stream wrappers a bridge keeps (then it starts over).
_KEPT = 256


def is_torch(array: Any) -> bool:
    """Whether `array` is a torch tensor (without importing torch)."""
    return type(array).__module__.partition(".")[0] == "torch"


@functools.cache
def _view_dtype(dtype: Any) -> str | None:
    # Keyed by the torch dtype object: naming it (str() and a prefix strip) on every
    # operand of every plan call cost about a microsecond.
    return _VIEW_DTYPES.get(str(dtype).removeprefix("torch."))


class TorchBridge:
    """Views of torch CUDA tensors and wrappers of torch's streams on one GPU."""

    def __init__(self, cupy: Any, index: int) -> None:
        self._cupy = cupy
        self._index = index
        self._views: dict[tuple[int, tuple[int, ...], str], Any] = {}
        self._streams: dict[int, Any] = {}

    def view(self, tensor: Any) -> Any | None:
        """A CuPy view of a C-contiguous torch CUDA tensor, or None for anything else.

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
        key = (tensor.data_ptr(), tuple(tensor.shape), dtype)
        view = self._views.get(key)
        if view is None:
            if len(self._views) >= _KEPT:
                self._views.clear()
            cupy = self._cupy
            nbytes = tensor.numel() * tensor.element_size()
            memory = cupy.cuda.UnownedMemory(key[0], nbytes, None, tensor.device.index)
            view = self._views[key] = cupy.ndarray(key[1], dtype,
                                                   cupy.cuda.MemoryPointer(memory, 0))
        return view

    def stream(self) -> Any | None:
        """torch's current stream on this GPU as a CuPy stream, or None when it is already
        CuPy's current one (call with the GPU current)."""
        import torch

        # Inductor's generated code reads the raw pointer this way (no Stream object built
        # per call); the public call is the fallback.
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        ptr = int(raw(self._index) if raw is not None
                  else torch.cuda.current_stream(self._index).cuda_stream)
        if ptr == int(self._cupy.cuda.get_current_stream().ptr):
            return None
        stream = self._streams.get(ptr)
        if stream is None:
            if len(self._streams) >= _KEPT:
                self._streams.clear()
            stream = self._streams[ptr] = self._cupy.cuda.ExternalStream(ptr, self._index)
        return stream
