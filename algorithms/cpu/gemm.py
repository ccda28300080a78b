"""The CPU algorithms' GEMMs: NumPy's BLAS, or PyTorch's when the caller works in torch.

In a process that runs PyTorch operators, torch's OpenMP threads spin for a while after
each operator, and NumPy's BLAS threads then compete with them for the cores: a converted
ResNet-50 (b1, AMD EPYC, 2 cores) ran its forward pass in 634-650 ms with our GEMMs in
NumPy's BLAS, 121-126 ms with them on torch's own threads, and 81-85 ms all in PyTorch
(benchmarks/bench_torch_threads.py; BENCHMARKS.md, "Our CPU work on torch's threads").
So the work a CPU plan runs for torch tensors (`CpuRuntime.caller_stream`) routes its
GEMMs through `torch.matmul`, on torch's thread pool. Tuning measures with NumPy's BLAS
either way: its operands are NumPy's.
"""

from __future__ import annotations

import os
from contextvars import ContextVar, Token
from types import ModuleType
from typing import Any

import numpy as np

#: "0" keeps the GEMMs of work for torch tensors in NumPy's BLAS (CpuRuntime reads it once).
SWITCH_ENV = "CONVTUNE_CPU_TORCH_GEMM"
#: The torch module while work runs for torch tensors (`torch_gemms`), else None.
_TORCH: ContextVar[ModuleType | None] = ContextVar("convtune_cpu_gemm_torch", default=None)
#: The dtypes torch.matmul serves here; NumPy computes the rest.
_ROUTED = frozenset({"float32", "float64", "complex64", "complex128"})
#: The fewest multiply-adds per matrix product (m * n * k) routed to torch. OpenBLAS (NumPy's
#: BLAS) computes products up to 65536 * 4 of them on the calling thread alone
#: (interface/gemm.c: SMP_THRESHOLD_MIN times GEMM_MULTITHREAD_THRESHOLD), so they compete
#: with no torch thread, and torch's call costs more than they do: a plan call on
#: n1 c4 4x4 -> k4 1x1 with torch tensors took 40-44 us routed against 26-29 us not
#: (BENCHMARKS.md, "Ready operands go to the kernels as they are").
ROUTE_FROM_MNK = 65536 * 4 + 1


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """`a @ b` with NumPy's broadcasting, into `out` where given: through `torch.matmul`
    inside `torch_gemms`, else `np.matmul`."""
    torch = _TORCH.get()
    if torch is None or not _routable(a, b, out):
        return np.matmul(a, b, out=out)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    if out is None:
        return torch.matmul(ta, tb).numpy()
    torch.matmul(ta, tb, out=torch.from_numpy(out))
    return out


def _routable(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> bool:
    """Whether torch should and can take these arrays as they are: a product large enough
    for NumPy's BLAS to thread (ROUTE_FROM_MNK), one routed dtype in native byte order, no
    negative strides (torch.from_numpy refuses both), writable (it warns), a C-contiguous
    `out`."""
    if a.ndim < 2 or b.ndim < 2 or a.shape[-2] * a.shape[-1] * b.shape[-1] < ROUTE_FROM_MNK:
        return False
    arrays = (a, b) if out is None else (a, b, out)
    return (all(x.dtype == a.dtype for x in arrays) and a.dtype.name in _ROUTED
            and a.dtype.isnative
            and (out is None or out.flags.c_contiguous)
            and all(x.flags.writeable and min(x.strides, default=0) >= 0 for x in arrays))


def gemms_switch() -> bool:
    """Whether $CONVTUNE_CPU_TORCH_GEMM lets torch take the GEMMs (anything but "0")."""
    return os.environ.get(SWITCH_ENV, "1") != "0"


class torch_gemms:  # lower case: a context manager, named like contextlib's
    """Inside: the GEMMs of the CPU work done go through `torch`, unless torch's float32
    matmul precision is not "highest" (below it, torch may compute float32 GEMMs in bfloat16
    on CPUs that have it: not the FP32 accuracy a CPU problem promises).

    A class, not a generator: it is entered on every plan call for torch tensors, where
    contextlib's generator machinery costs microseconds (BENCHMARKS.md, "The torch path of
    a CPU plan call").
    """

    __slots__ = ("_token", "_torch")

    def __init__(self, torch: ModuleType) -> None:
        self._torch = torch
        self._token: Token[ModuleType | None] | None = None

    def __enter__(self) -> None:
        if self._torch.get_float32_matmul_precision() == "highest":
            self._token = _TORCH.set(self._torch)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _TORCH.reset(self._token)
            self._token = None


def routed() -> Any:
    """The torch module the GEMMs go through now, or None (NumPy's BLAS)."""
    return _TORCH.get()
