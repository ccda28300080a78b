"""What the CUDA algorithms share: the backend, the dtype check, the run-time checks."""

from __future__ import annotations

from typing import ClassVar

from algorithms.base import AlgorithmBase
from algorithms.cuda._loader import CTYPES


class CudaAlgorithm(AlgorithmBase):
    """A CUDA implementation: CuPy arrays in and out, work enqueued on the current stream.

    A subclass sets `name` and `dtypes`, puts its other limits in `_limits`, and
    implements `_run` (and `configs` / `_workspace` where it has variants or a workspace).
    No CUDA kernel computes a backward direction yet (the base class says so).
    """

    backend: ClassVar[str] = "cuda"
    #: The storage dtypes the kernels are instantiated for.
    dtypes: ClassVar[tuple[str, ...]] = tuple(CTYPES)
