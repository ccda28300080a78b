"""implicit_gemm's (our own FP32 tiled GEMM's) host side without a GPU, against hand-derived
limits: the 16-bit packing of a padded pixel's (h, w), the float4 output stores' conditions
and the kernel's fast divisions. A wrong answer is a wrapped index or a misaligned vector
store on a GPU, which no CPU run of the host code would show.
"""

from __future__ import annotations

from typing import Any

import pytest

from algorithms.cuda import implicit_gemm as ig
from algorithms.cuda._launch import INT32
from algorithms.cuda._loader import fastdiv
from algorithms.problem import ConvProblem
from tests.cuda_kernel_standins import Sized

ALG = ig.ImplicitGemmCuda()


def test_a_padded_side_of_16384_pixels_is_refused() -> None:
    # Mutation gap: the packing bound (a padded side below 2**14: (h, w) in signed 16-bit
    # halves with room for a sentinel), its comparison and both pads were unpinned.
    def problem(h: int, pad: int) -> ConvProblem:
        return ConvProblem(n=1, c=1, h=h, w=4, k=1, r=1, s=1, pad=(pad, 0))

    assert ALG.supports(problem(16383, 0))
    assert ALG.supports(problem(16381, 1))
    for h, pad in ((16384, 0), (16382, 1), (16380, 2), (20000, 0)):
        refused = ALG.supports(problem(h, pad))
        assert not refused and "16384" in refused.reason, (h, pad)
    wide = ConvProblem(n=1, c=1, h=4, w=16382, k=1, r=1, s=1, pad=(0, 1))
    assert not ALG.supports(wide)


def _vec_out(monkeypatch: pytest.MonkeyPatch, problem: ConvProblem, y_ptr: int) -> bool:
    taken: list[Any] = []
    monkeypatch.setattr(ig, "enqueue", lambda launch, get_kernel, *ops: taken.append(ops))
    ALG._run(Sized(1), Sized(1), Sized(1, ptr=y_ptr), None, problem, "64x64x8")
    (operands,) = taken
    return bool(operands[3])


def test_outputs_are_stored_in_vectors_where_p_times_q_and_y_allow(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Mutation gap: vec_out's conditions (P*Q a multiple of 4, not Q; y aligned to four
    # elements, 16 bytes in float32) were unpinned: an 8-byte-off y took float4 stores.
    square = ConvProblem(n=2, c=4, h=2, w=2, k=8, r=1, s=1)  # P*Q = 4, Q = 2
    assert _vec_out(monkeypatch, square, 0x1000)
    assert not _vec_out(monkeypatch, square, 0x1008)
    assert not _vec_out(monkeypatch, square, 0x1004)
    half = ConvProblem.from_key({**square.key(), "dtype": "float16"})
    assert _vec_out(monkeypatch, half, 0x1008)  # four halves: 8 bytes
    assert not _vec_out(monkeypatch, half, 0x1004)
    assert not _vec_out(monkeypatch, ConvProblem(n=2, c=4, h=3, w=3, k=8, r=1, s=1), 0x1000)


def test_the_kernel_gets_its_divisors_in_order() -> None:
    # Mutation gap: the fast divisions after the vec_out flag (R*S, S, P*Q, Q) were unpinned:
    # R in S's place passed.
    problem = ConvProblem(n=2, c=3, h=10, w=9, k=4, r=3, s=2, pad=1)
    p, q = problem.out_hw
    launch = ig._launch(problem, "64x64x8")
    assert launch.args[4] is INT32
    want: list[int] = []
    for d in (3 * 2, 2, p * q, q):
        want += fastdiv(d)
    assert [int(a) for a in launch.args[5:]] == want
    assert launch.block == (ig.CONFIGS["64x64x8"].threads,) == ((64 // 4) * (64 // 4),)
