"""Host-side checks of algorithms.cuda._loader that need no GPU: the fast-division constants
the kernels use, the ConvShape structure they take, and the opt-in to more than 48 KiB of
dynamic shared memory (once per kernel, and through the driver for a plain Function).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms.cuda import _loader
from algorithms.cuda._loader import fastdiv
from algorithms.problem import ConvProblem
from tests.cuda_kernel_standins import SMEM_LIMIT, PlainFunction


def fdiv(n: Any, mul: Any, shift: Any) -> np.ndarray:
    """kernels/common.cuh fast_div, in 32-bit unsigned arithmetic."""
    un = np.asarray(n, dtype=np.int64)
    assert (un >= 0).all() and (un < 2**31).all(), "fast_div needs 0 <= n < 2**31"
    u = un.astype(np.uint64)
    hi = (u * np.uint64(int(mul))) >> np.uint64(32)
    return (((hi + u) & np.uint64(0xFFFFFFFF)) >> np.uint64(int(shift))).astype(np.int64)


def test_fastdiv_matches_integer_division() -> None:
    rng = np.random.default_rng()
    divisors = [*range(1, 300), *(2**e + d for e in range(9, 31) for d in (-1, 0, 1)),
                *rng.integers(1, 2**31 - 1, 200).tolist()]
    for d in divisors:
        mul, shift = fastdiv(d)
        assert 0 <= mul < 2**32 and 0 <= shift <= 31
        n = np.concatenate([
            rng.integers(0, 2**31 - 1, 2000), [0, 1, d - 1, d, d + 1, 2**31 - 1],
            np.arange(max(0, 7 * d - 5), min(2**31 - 1, 7 * d + 5)),
        ])
        n = n[(n >= 0) & (n < 2**31)]
        np.testing.assert_array_equal(fdiv(n, mul, shift), n // d, err_msg=f"d={d}")


def test_shape_struct_holds_the_shape_ints_in_order() -> None:
    """The ConvShape structure that the implicit-GEMM, tensor-core and im2col kernels take
    carries exactly the CONV_SHAPE_PARAMS ints, in their order (32-bit, no padding)."""
    problem = ConvProblem(n=2, c=6, h=9, w=7, k=4, r=3, s=2, pad=(1, 0), stride=(2, 1),
                          dilation=(1, 2), groups=2)
    (packed,) = _loader.shape_struct(problem)
    assert packed.dtype.itemsize == 16 * 4
    assert packed.tobytes() == np.array(_loader.shape_args(problem), np.int32).tobytes()
    assert [int(v) for v in packed.item()][:9] == [2, 6, 9, 7, 4, 3, 2, 5, 5]


class _Function:
    """CuPy's RawKernel, as far as the opt-in goes: counts the attribute's writes."""

    def __init__(self) -> None:
        self.writes: list[int] = []

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self.writes[-1] if self.writes else SMEM_LIMIT

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, nbytes: int) -> None:
        self.writes.append(nbytes)


def test_shared_memory_opt_in_is_set_once_per_kernel_and_only_beyond_48_kib() -> None:
    first, second = _Function(), _Function()
    _loader.allow_shared_memory(first, SMEM_LIMIT)  # within the default: no driver call
    assert first.writes == []
    for _ in range(3):  # runs sit in timed regions: one attribute write, not one per run
        _loader.allow_shared_memory(first, 80 * 1024)
    _loader.allow_shared_memory(first, 64 * 1024)  # less than it already has
    _loader.allow_shared_memory(second, 90 * 1024)
    _loader.allow_shared_memory(first, 90 * 1024)  # more: set again
    assert first.writes == [80 * 1024, 90 * 1024] and second.writes == [90 * 1024]


def test_shared_memory_opt_in_of_a_plain_function_goes_through_the_driver(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Bug (H100, 2026-11-25): every implicit_gemm_wgmma launch failed with "'Function' object
    # has no attribute 'max_dynamic_shared_size_bytes'": the NVRTC-built sm_90a kernels are
    # plain Functions, which lack RawKernel's property.
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(_loader, "_func_set_attribute", lambda *a: calls.append(a))
    kernel = PlainFunction(0x7F00)
    _loader.allow_shared_memory(kernel, 160 * 1024)
    _loader.allow_shared_memory(kernel, 100 * 1024)  # already allowed more: no call
    assert calls == [(0x7F00, _loader.MAX_DYNAMIC_SHARED_SIZE_BYTES, 160 * 1024)]
