"""The launch of the implicit-GEMM tensor-core kernels (algorithms.cuda._gemm_launch), checked
on the host against hand-derived geometry: the paired epilogue stores' alignment, split K's
tile counters and the kernel's fast-division arguments. A wrong answer here is a misaligned
store or a wrong index on a GPU, which no CPU run of the host code would show.
"""

from __future__ import annotations

import numpy as np

from algorithms.cuda import implicit_gemm_tc as tc
from algorithms.cuda._gemm_launch import pair_bytes, paired_stores
from algorithms.cuda._launch import INT32, POINTER
from algorithms.cuda._loader import CONV_SHAPE, fastdiv
from algorithms.problem import ConvProblem


def test_pairs_are_two_elements_of_the_stored_type_where_p_times_q_is_even() -> None:
    # Mutation gap: pair_bytes' parity test (P*Q, not P+Q) and its two elements were
    # unpinned.
    even = ConvProblem(n=1, c=8, h=3, w=4, k=8, r=1, s=1, dtype="float16")  # 3 x 4
    odd = ConvProblem(n=1, c=8, h=3, w=3, k=8, r=1, s=1, dtype="float16")  # 3 x 3
    assert pair_bytes(even, 2) == 4 and pair_bytes(even, 4) == 8
    assert pair_bytes(odd, 2) == pair_bytes(odd, 4) == 0


def test_paired_stores_need_the_address_aligned_to_both_elements() -> None:
    # Mutation gap: paired_stores' alignment test was unpinned: a y one float off an 8-byte
    # boundary took 8-byte stores (a misaligned-address fault on a GPU).
    assert paired_stores(8, 0x1000) and paired_stores(8, 0x1008)
    assert not paired_stores(8, 0x1004) and not paired_stores(4, 0x1002)
    assert not paired_stores(0, 0x1000)  # P*Q odd: never


def test_split_k_pairs_its_float32_partial_sums_whatever_the_dtype() -> None:
    # Mutation gap: a split launch's pairs were sized by the problem's element (4 bytes
    # for float16) where the kernel stores float32 partial sums in pairs of 8.
    problem = ConvProblem(n=1, c=832, h=8, w=8, k=16, r=1, s=1, dtype="float16")
    split = next(c for c in tc.ImplicitGemmTcCuda().configs(problem) if "-k" in c)
    whole = split.partition("-k")[0]
    widths = tc.vector_widths(problem)
    assert tc._launch(problem, split, widths).pair_bytes == 8
    assert tc._launch(problem, whole, widths).pair_bytes == 4


def test_split_k_keeps_one_counter_per_tile_of_the_grid() -> None:
    # Mutation gap: the counters' count (grid x times grid y: one per output tile) was
    # unpinned; fewer and two tiles' last splits would share one.
    problem = ConvProblem(n=2, c=1024, h=7, w=7, k=256, r=1, s=1, groups=2)
    config = "64x64-k2"
    assert tc.k_splits(problem, tc.CONFIGS["64x64"]) >= 2
    gx, gy, gz = tc.launch_grid(problem, config)
    # 2 * 49 = 98 pixels in 64-wide tiles: 2; 2 groups x 128 channels in 64-row tiles: 4.
    assert (gx, gy) == (2, 4) and gz == 2
    launch = tc._launch(problem, config, tc.vector_widths(problem))
    assert launch.counters == 8 and launch.part_bytes is not None
    assert tc._launch(problem, "64x64", tc.vector_widths(problem)).counters == 0


def test_the_gemm_kernel_gets_its_divisors_in_order() -> None:
    # Mutation gap: the order of the kernel's fast divisions after ConvShape (the K index's
    # first divisor, S, P*Q, Q) was unpinned: S and Q swapped passed on every test layer.
    problem = ConvProblem(n=2, c=6, h=11, w=9, k=8, r=3, s=2, pad=1, stride=(1, 2))
    p, q = problem.out_hw
    assert (p, q) == (11, 5) and problem.s != q
    launch = tc._launch(problem, "64x64", tc.vector_widths(problem)).gemm
    args = launch.args
    assert args[:3] == (POINTER,) * 3 and args[3].dtype == CONV_SHAPE
    divisors = [int(a) for a in args[4:12]]
    want: list[int] = []
    for d in (problem.r * problem.s, problem.s, p * q, q):  # NCHW: K runs (c, r, s)
        want += fastdiv(d)
    assert divisors == want
    assert args[12:14] == (POINTER, POINTER) and args[15] is INT32
    assert isinstance(args[14], np.int32)
