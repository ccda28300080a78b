"""torch CUDA tensors and streams as CuPy sees them, kept across plan calls (issue 9).

A plan call with torch tensors needs a CuPy view of each tensor and, for ordering, torch's
current stream as a CuPy stream. Both are built from raw pointers, not from torch's
protocols, and both are kept, so that a model that passes the same tensors and runs on the
same stream again builds nothing.
"""

from __future__ import annotations

import functools
from typing import Any

from algorithms.runtime import is_torch

#: torch dtypes a CUDA tensor is viewed as without a copy (bfloat16 as its uint16 bits).
_VIEW_DTYPES = {"float32": "float32", "float16": "float16", "float64": "float64",
                "bfloat16": "uint16", "uint16": "uint16"}
#: Most views and stream wrappers a bridge keeps (then it starts over).
_KEPT = 256


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
