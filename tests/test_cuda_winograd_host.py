"""The CUDA Winograd algorithm's host side without a GPU, against hand-derived sizes: its
U, V and M regions (elements, 256-byte offsets), the 32-bit bound over both tile sizes,
the workspace's alignment, the transforms' divisors, and where its GEMM reads TF32. A
wrong answer is a region overrun, a wrapped index or a wrong tile on a GPU.
"""

from __future__ import annotations

import pytest

from algorithms.cuda import winograd as wg
from algorithms.cuda._loader import fastdiv
from algorithms.problem import ConvProblem
from tests.cuda_kernel_standins import Sized

ALG = wg.WinogradCuda()
#: 7 x 11 outputs: f2x2 tiles 4 x 6, f4x4 2 x 3 (padding 0: P, Q = H - 2, W - 2).
PROBLEM = ConvProblem(n=2, c=5, h=9, w=13, k=3, r=3, s=3)


def test_regions_hold_u_v_and_m_each_on_a_256_byte_boundary() -> None:
    # Mutation gap: M's count (k, not c, rows per point) and the regions' 256-byte offsets
    # were unpinned.
    tiles = 2 * 4 * 6  # n x tiles_h x tiles_w of f2x2
    u, v, m = 16 * 3 * 5 * 4, 16 * 5 * tiles * 4, 16 * 3 * tiles * 4  # float32 bytes
    assert wg.workspace_layout(PROBLEM, "f2x2") == {
        "u": (0, u), "v": (1024, v), "m": (1024 + 15360, m)}
    assert u == 960 and v == 15360  # 960 -> 1024; 15360 is whole
    assert ALG.workspace_bytes(PROBLEM, "f2x2") == 1024 + 15360 + 9216
    f4 = wg.workspace_layout(PROBLEM, "f4x4")
    assert f4["m"] == (2304 + 8704, 36 * 3 * 12 * 4)  # 2160 -> 2304; 8640 -> 8704


def test_a_buffer_past_32_bits_in_either_tile_size_is_refused() -> None:
    # Mutation gap: _limits over F(2x2)'s buffers alone passed: F(4x4)'s U (36 points, not
    # 16) passes 2**31 elements first on wide layers.
    problem = ConvProblem(n=1, c=8192, h=4, w=4, k=8192, r=3, s=3, pad=1)
    assert 16 * 8192 * 8192 < 2**31 <= 36 * 8192 * 8192
    refused = ALG.supports(problem)
    assert not refused and "Winograd buffer" in refused.reason


def test_a_float64_workspace_must_be_8_byte_aligned() -> None:
    # Mutation gap: the workspace's alignment (8 bytes for float64's GEMM) was unpinned.
    problem = ConvProblem.from_key({**PROBLEM.key(), "dtype": "float64"})
    with pytest.raises(ValueError, match="8-byte aligned"):
        ALG._run(Sized(1), Sized(1), Sized(1), Sized(1 << 20, ptr=0x1004), problem, "f2x2")


def test_the_transforms_divide_by_tiles_then_tiles_w_then_tiles_h() -> None:
    # Mutation gap: the input and output transforms' divisors' order was unpinned.
    plan = wg._launches(PROBLEM, "f2x2")
    want = [*fastdiv(48), *fastdiv(6), *fastdiv(4)]
    for kernel in plan.kernels[1:]:
        assert [int(a) for a in kernel.args[-6:]] == want


def test_only_f2x2_reads_tf32_under_math_tf32() -> None:
    # Mutation gap: tf32_gemm's F(2x2)-only rule was unpinned: F(4x4)'s transforms amplify
    # TF32's rounding past math "tf32"'s 1e-3.
    tf32 = ConvProblem.from_key({**PROBLEM.key(), "math": "tf32"})
    assert wg.tf32_gemm(tf32, "f2x2") and not wg.tf32_gemm(tf32, "f4x4")
    assert not wg.tf32_gemm(PROBLEM, "f2x2")
    plan = wg._launches(tf32, "f4x4")
    assert not plan.tf32 and not any(", true" in k.name for k in plan.kernels)
