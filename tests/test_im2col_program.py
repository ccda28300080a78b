"""im2col_gemm's program (algorithms/cuda/_im2col_program.py) and offer on the host, against
hand-derived counts: the configurations per batch, the 32-bit bound on a column matrix, the
images each chunk's launches cover, backward_filter's accumulation over chunks, and when two
TF32 roundings share a launch. A wrong answer here is a write past y or dW, a sum over
uninitialised memory or a wrapped 32-bit index on a GPU: the stand-ins check launches only.
"""

from __future__ import annotations

from algorithms.cuda import im2col_gemm
from algorithms.cuda._im2col_program import (
    MERGED,
    ROUND_TF32,
    ROUND_TF32_PAIR,
    column_elements,
    program,
    workspace_layout,
)
from algorithms.cuda._program import Gemm, Kernel
from algorithms.problem import ConvProblem

ALG = im2col_gemm.Im2colGemmCuda()


def test_chunks_below_the_batch_and_the_merged_gemm_for_more_than_one_image() -> None:
    # Mutation gap: which chunk sizes are offered (those below the batch, and chunk=all) and
    # the merged GEMM's n > 1 were unpinned.
    def configs(n: int) -> tuple[str, ...]:
        return ALG.configs(ConvProblem(n=n, c=3, h=6, w=6, k=4, r=3, s=3, pad=1))

    assert configs(4) == ("chunk=1", "chunk=all", MERGED)
    assert configs(5) == ("chunk=1", "chunk=4", "chunk=all", MERGED)
    assert configs(1) == ("chunk=all",)


def test_column_elements_count_every_tap_of_every_channel() -> None:
    # Mutation gap: column_elements' product was unpinned (S dropped passed).
    problem = ConvProblem(n=3, c=5, h=10, w=9, k=2, r=3, s=2)  # P, Q = 8, 8
    assert column_elements(problem, 2) == 2 * 5 * 3 * 2 * 8 * 8
    assert workspace_layout(problem, "chunk=1").byte_ranges()["col"] == slice(0, 5 * 6 * 64 * 4)


def test_one_images_column_matrix_past_32_bits_is_refused() -> None:
    # Mutation gap: supports() let through a problem whose single-image column matrix has
    # 2**31 elements or more (its tensors fit), leaving it without a configuration.
    problem = ConvProblem(n=1, c=128, h=512, w=512, k=1, r=9, s=9, pad=4)
    assert column_elements(problem, 1) == 128 * 81 * 512 * 512 > 2**31 - 1
    refused = ALG.supports(problem)
    assert not refused and "column matrix" in refused.reason


def _im2col_images(problem: ConvProblem, config: str) -> list[tuple[int, int]]:
    """(first image, images) of each im2col launch of a run."""
    return [(int(s.scalars[1]), int(s.scalars[11])) for s in program(problem, config).steps
            if isinstance(s, Kernel) and s.name.startswith("im2col<")]


def test_the_last_chunk_covers_only_the_images_left() -> None:
    # Mutation gap: the last chunk's image count (min(chunk, n - n0)) was unpinned: a full
    # chunk there writes columns and y past the batch.
    problem = ConvProblem(n=5, c=3, h=6, w=6, k=4, r=3, s=3, pad=1)
    assert _im2col_images(problem, "chunk=4") == [(0, 4), (4, 1)]
    assert _im2col_images(problem, "chunk=1") == [(i, 1) for i in range(5)]
    assert _im2col_images(problem, "chunk=all") == [(0, 5)]
    gemms = [s for s in program(problem, "chunk=4").steps if isinstance(s, Gemm)]
    assert [g.batch for g in gemms] == [4, 1]  # one GEMM per group, over the chunk's images
    item, pq = 4, 36
    assert [g.c for g in gemms] == [("out", 0), ("out", 4 * 4 * pq * item)]


def test_backward_filter_overwrites_dw_with_its_first_chunk_and_adds_the_rest() -> None:
    # Mutation gap: beta = 1 from the first chunk on passed: dW's old contents (whatever
    # the caller's buffer held) were summed in.
    problem = ConvProblem(n=5, c=3, h=6, w=6, k=4, r=3, s=3, pad=1,
                          direction="backward_filter")
    for config, chunks in (("chunk=1", 5), ("chunk=4", 2), ("chunk=all", 1)):
        gemms = [s for s in program(problem, config).steps if isinstance(s, Gemm)]
        assert [g.accumulate for g in gemms] == [False] + [True] * (chunks - 1), config


def test_a_pointwise_backward_data_pass_needs_no_column_matrix_even_in_tf32() -> None:
    # Mutation gap: _needs_columns' direction test was unpinned: under math "tf32" a pointwise
    # backward_data pass reserved (and gathered through) a column matrix it does not need.
    data = ConvProblem(n=2, c=8, h=5, w=5, k=4, r=1, s=1, math="tf32",
                       direction="backward_data")
    assert "col" not in workspace_layout(data, "chunk=all")
    assert not any(isinstance(s, Kernel) and s.name.startswith("col2im")
                   for s in program(data, "chunk=all").steps)
    forward = ConvProblem.from_key({**data.key(), "direction": "forward"})
    assert "col" in workspace_layout(forward, "chunk=all")  # x rounded into it


def test_two_leading_roundings_share_a_launch_only_below_2_31_elements() -> None:
    # Mutation gap: the pairing bound (both ranges' indices in 32 bits) was unpinned at
    # exactly 2**31 elements.
    def steps(c: int) -> list[str]:
        # w: 1024 x c; x: c x 32 x 32 (one image); both rounded to TF32 first.
        problem = ConvProblem(n=1, c=c, h=32, w=32, k=1024, r=1, s=1, math="tf32")
        return [s.name for s in program(problem, "chunk=all").steps if isinstance(s, Kernel)]

    assert steps(2**20) == [ROUND_TF32, ROUND_TF32]  # 2**30 + 2**30
    assert steps(2**20 - 1) == [ROUND_TF32_PAIR]
