"""Stand-ins for the CUDA backend's host-side checks, which run no kernel: kernels that check
only their launch (grid, block and shared-memory limits, 32-bit scalar arguments), a cuBLAS
GEMM that checks only its arguments, buffers that are only an address and a size, and a
plain CuPy Function. Used by tests/test_cuda_launch_limits.py, tests/test_cuda_work.py,
tests/test_cuda_tf32_copies.py, tests/test_cuda_loader.py and tests/test_cuda_contexts.py.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from algorithms.cuda import _cublas, _loader

#: Facts the launch-only stand-ins record for the tests to check (cleared per test).
LAUNCHES: list[dict[str, Any]] = []


GRID_X_LIMIT, GRID_YZ_LIMIT, SMEM_LIMIT = 2**31 - 1, 65535, 48 * 1024
#: The most dynamic shared memory a kernel may opt in to on every sm_80+ GPU (sm_86, sm_89).
SMEM_OPT_IN_LIMIT = 99 * 1024


def checked_launch(filename: str, name_expression: str) -> Callable[..., None]:
    """A kernel stand-in that checks only the launch: grid and block limits, shared memory
    (beyond 48 KiB only as far as the kernel opted in), 32-bit scalar arguments (Python
    ints would be passed as 64-bit and shift the rest)."""

    def kernel(grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],
               shared_mem: int = 0) -> None:
        assert 1 <= len(grid) <= 3 and 1 <= len(block) <= 3
        assert all(isinstance(v, int) and v >= 1 for v in (*grid, *block))
        assert grid[0] <= GRID_X_LIMIT and all(v <= GRID_YZ_LIMIT for v in grid[1:])
        limit = getattr(kernel, "max_dynamic_shared_size_bytes", SMEM_LIMIT)
        assert int(np.prod(block)) <= 1024 and 0 <= shared_mem <= limit <= SMEM_OPT_IN_LIMIT
        for a in args:
            if isinstance(a, np.void):  # a structure by value: ConvShape alone so far
                assert a.dtype == _loader.CONV_SHAPE, a.dtype
            elif isinstance(a, np.generic):
                assert isinstance(a, (np.int32, np.uint32, np.uint64, np.float32,
                                      np.float64)), a
            else:
                assert hasattr(a, "data"), f"kernel argument {a!r} is not an array or scalar"
        LAUNCHES.append({"file": filename, "kernel": name_expression, "grid": grid,
                         "block": block})

    return kernel


def checked_gemm(dtype: str, transa: int, transb: int, m: int, n: int, k: int,
                  a: int, lda: int, sa: int, b: int, ldb: int, sb: int,
                  c: int, ldc: int, sc: int, batch: int, accumulate: bool = False,
                  float32_c: bool = False, tf32: bool = False) -> None:
    assert min(m, n, k, batch) >= 1 and max(m, n, k, lda, ldb, ldc) <= 2**31 - 1
    assert not tf32 or dtype == "float32"
    assert batch <= _cublas.MAX_BATCH
    assert ldc >= m and lda >= (m if transa == 0 else k) and ldb >= (k if transb == 0 else n)


class Sized:
    """A buffer that exists only as an (aligned) address and a size."""

    def __init__(self, nbytes: int, ptr: int = 1 << 40) -> None:
        self.data = SimpleNamespace(ptr=ptr)
        self.size = nbytes

    def __getitem__(self, part: slice) -> Sized:
        """A byte range, as algorithms.base.workspace_view slices a workspace."""
        start = part.start or 0
        stop = self.size if part.stop is None else part.stop
        return Sized(stop - start, self.data.ptr + start)

    def view(self, dtype: Any) -> Sized:
        return self

    def reshape(self, shape: tuple[int, ...]) -> Sized:
        return self


class PlainFunction:
    """A plain cupy.cuda.function.Function: a handle, and no settable attribute."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr
