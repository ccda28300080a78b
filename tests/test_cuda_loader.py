"""Host-side checks of algorithms.cuda._loader that need no GPU: the fast-division constants
the kernels use, the ConvShape structure they take, and the opt-in to more than 48 KiB of
dynamic shared memory (once per kernel, and through the driver for a plain Function).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from algorithms.cuda import _loader
from algorithms.cuda._loader import fastdiv
from algorithms.problem import ConvProblem
from tests.cuda_kernel_standins import SMEM_LIMIT, PlainFunction, Sized


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


def test_fastdiv_takes_every_divisor_below_2_31_and_no_other() -> None:
    # Mutation gap: fastdiv's upper bound (d = 2**31 - 1 refused) was unpinned.
    d = 2**31 - 1  # the largest 32-bit signed divisor, e.g. a P*Q or a plane count
    mul, shift = fastdiv(d)
    n = np.array([0, 1, d - 1, d, 2**30, 12345678], dtype=np.int64)
    np.testing.assert_array_equal(fdiv(n, mul, shift), n // d)
    for bad in (0, -1, 2**31):
        with pytest.raises(ValueError, match="fastdiv divisor"):
            fastdiv(bad)


def test_fastdiv_args_are_mul_then_shift_per_divisor_as_uint32() -> None:
    # Mutation gap: the order of fastdiv_args' (mul, shift) pairs (kernels/common.cuh
    # fast_div(n, mul, shift)) was unpinned.
    args = _loader.fastdiv_args(7, 1024, 3)
    assert all(type(a) is np.uint32 for a in args)
    for (mul, shift), d in zip(zip(args[::2], args[1::2], strict=True), (7, 1024, 3),
                               strict=True):
        n = np.arange(0, 5000, dtype=np.int64)
        np.testing.assert_array_equal(fdiv(n, mul, shift), n // d)
    assert args[3] == 10  # 1024 = 2**10: shift 10


def test_shape_struct_holds_every_field_in_the_headers_order() -> None:
    # Mutation gap: the last seven ConvShape fields (pads, strides, dilations, groups) were
    # never compared with their values: a swap of pad and stride went unnoticed.
    header = (_loader.KERNELS_DIR / "common.cuh").read_text(encoding="utf-8")
    found = re.search(r"struct ConvShape \{\s*int ([^;]+);", header)
    assert found is not None
    assert tuple(f.strip() for f in found.group(1).split(",")) == _loader.CONV_SHAPE.names
    problem = ConvProblem(n=2, c=6, h=20, w=30, k=4, r=3, s=2, pad=(1, 4), stride=(2, 3),
                          dilation=(5, 7), groups=2)
    # P = (20 + 2 - 5*2 - 1) // 2 + 1 = 6, Q = (30 + 8 - 7*1 - 1) // 3 + 1 = 11.
    want = {"N": 2, "C": 6, "H": 20, "W": 30, "K": 4, "R": 3, "S": 2, "P": 6, "Q": 11,
            "pad_h": 1, "pad_w": 4, "str_h": 2, "str_w": 3, "dil_h": 5, "dil_w": 7,
            "groups": 2}
    (packed,) = _loader.shape_struct(problem)
    assert {name: int(packed[name]) for name in _loader.CONV_SHAPE.names} == want
    assert [int(v) for v in _loader.shape_args(problem)] == list(want.values())


def test_tensors_fit_int32_counts_the_output_and_the_extra_buffers() -> None:
    # Mutation gap: dropping y, or the scratch buffers, from the 32-bit check survived.
    limit = 2**31 - 1
    # x has 2**30 elements, w 2, y (two channels) 2**31: y alone is past 32-bit indexing.
    wide = ConvProblem(n=1, c=1, h=2**15, w=2**15, k=2, r=1, s=1)
    assert not _loader.tensors_fit_int32(wide)
    assert _loader.tensors_fit_int32(ConvProblem(n=1, c=1, h=2**15, w=2**15, k=1, r=1, s=1))
    small = ConvProblem(n=1, c=1, h=4, w=4, k=1, r=1, s=1)
    assert _loader.tensors_fit_int32(small, 10, limit)
    assert not _loader.tensors_fit_int32(small, 10, limit + 1)


def test_grid_stride_blocks_cover_every_element_with_at_least_one_block() -> None:
    # Mutation gap: rounding the block count down (a tail of elements no block reaches
    # when the grid is below the cap) and a zero-block grid for nothing to do survived.
    assert _loader.grid_stride_blocks(0) == 1  # a launch needs at least one block
    assert _loader.grid_stride_blocks(1) == 1
    assert _loader.grid_stride_blocks(256) == 1
    assert _loader.grid_stride_blocks(257) == 2
    assert _loader.grid_stride_blocks(1000, threads=1) == 1000
    assert _loader.grid_stride_blocks(10**9) <= 65536  # the rest loop: within grid.x


def test_more_than_48_kib_of_dynamic_shared_memory_is_opted_in() -> None:
    # Mutation gap: DEFAULT_SMEM_LIMIT was unpinned: a block asking for a little more than
    # CUDA's 48 KiB default without the opt-in fails to launch on every GPU.
    kernel = _Function()
    _loader.allow_shared_memory(kernel, 48 * 1024 + 16)
    assert kernel.writes == [48 * 1024 + 16]


def test_require_aligned_refuses_a_misaligned_address_only() -> None:
    # Mutation gap: the alignment check of a caller's buffer was unpinned here.
    _loader.require_aligned("ws", Sized(1, ptr=0x1000), 16)
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        _loader.require_aligned("ws", Sized(1, ptr=0x1008), 16)
    _loader.require_aligned("ws", Sized(1, ptr=0x1008), 8)
