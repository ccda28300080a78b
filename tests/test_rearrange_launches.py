"""The rearranging copies' launches (algorithms/cuda/_rearrange.py) on the host, against
hand-derived arguments: the transpose's tile counts and divisors, pad_channels' divisors,
and the 3xFP16 maxima's element counts. A wrong answer is a tile copied to the wrong place,
or a scale that misses the pixels the GEMM reads, on a GPU only.
"""

from __future__ import annotations

from math import prod

import numpy as np

from algorithms.cuda import _rearrange
from algorithms.cuda._loader import fastdiv
from algorithms.problem import ConvProblem


def test_a_transpose_counts_its_32x32_tiles_and_divides_by_them() -> None:
    # Mutation gap: the row tiles' count (exact at a multiple of 32) and the divisors' order
    # (tiles per batch entry, then column tiles) were unpinned.
    launch = _rearrange._transpose_launch(3, 64, 100, 4, 0)
    scalars = [int(a) for a in launch.args[2:]]
    # rows, cols, row tiles (64 / 32), column tiles (ceil(100 / 32)), tiles in all.
    assert scalars[:5] == [64, 100, 2, 4, 3 * 2 * 4]
    assert scalars[5:9] == [*fastdiv(2 * 4), *fastdiv(4)]
    assert launch.grid == (24,)


def test_pad_channels_divides_by_the_padded_channels_then_the_pixels() -> None:
    # Mutation gap: pad_channels' divisors' order was unpinned.
    launch = _rearrange._pad_launch(2, 3, 4, 25, 4, 1)
    assert [int(a) for a in launch.args[2:6]] == [3, 4, 25, 2 * 25 * 4]
    assert [int(a) for a in launch.args[6:]] == [*fastdiv(4), *fastdiv(25)]


def test_3xfp16_maxima_cover_all_of_x_and_w() -> None:
    # Mutation gap: the maxima's element count of x was unpinned for a strided 1x1 layer,
    # whose copy gathers a quarter of x: counting only that many elements from x's start,
    # the scale missed most of the pixels the GEMM reads.
    problem = ConvProblem(n=2, c=16, h=8, w=8, k=8, r=1, s=1, stride=2, math="fp32")
    assert _rearrange.gathered(problem) != problem
    scale = _rearrange.nhwc_copies(problem, 3).scale
    assert scale is not None
    nx, nw = scale.args[2], scale.args[5]
    assert isinstance(nx, np.int32) and int(nx) == prod(problem.input_shape) == 2 * 16 * 64
    assert int(nw) == prod(problem.filter_shape)
