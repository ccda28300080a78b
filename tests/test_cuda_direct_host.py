"""The direct CUDA algorithm's host side without a GPU, against hand-derived geometry: which
problems its grid limits let through (65535 in y and z), how many input channels a forward
block stages in 48 KB of shared memory, and each direction's grid and arguments. A wrong
answer is a launch a GPU refuses, or a block that overruns its shared memory.
"""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.cuda import direct
from algorithms.cuda._loader import DEFAULT_SMEM_LIMIT, fastdiv
from algorithms.problem import ConvProblem

ALG = direct.DirectCuda()


def test_the_batch_is_on_the_grid_up_to_65535_images_except_for_backward_filter() -> None:
    # Mutation gap: the batch bound (gridDim.z <= 65535) and backward_filter's exemption
    # (its blocks loop over the images) were unpinned.
    def tiny(n: int, direction: str) -> ConvProblem:
        return ConvProblem(n=n, c=1, h=1, w=1, k=1, r=1, s=1, direction=direction)

    for direction in ("forward", "backward_data"):
        assert ALG.supports(tiny(65535, direction))
        refused = ALG.supports(tiny(65536, direction))
        assert not refused and "65535" in refused.reason
    assert ALG.supports(tiny(70000, "backward_filter"))


def test_a_forward_block_stages_the_channels_whose_patches_fit_48_kb() -> None:
    # Mutation gap: channel_words' and channels_per_step's arithmetic (dilated filter extent,
    # the width's own stride, KPT filter slices, 8-byte float64 words, the 48 KB bound) was
    # unpinned: a block could stage more than the shared memory it may take.
    problem = ConvProblem(n=1, c=16, h=200, w=200, k=8, r=3, s=3, stride=(1, 2), dilation=20)
    # 16x16 outputs of 8 channels: rows 15 * 1 + 41, columns 15 * 2 + 41, and 8 x 3 x 3 taps.
    assert direct.channel_words(problem, "16x16k8") == 56 * 71 + 8 * 9 == 4048
    assert direct.channels_per_step(problem, "16x16k8") == DEFAULT_SMEM_LIMIT // (4048 * 4) == 3
    wide = ConvProblem.from_key({**problem.key(), "dtype": "float64"})
    assert direct.channels_per_step(wide, "16x16k8") == 1  # 4048 x 8 bytes a channel
    for p in (problem, wide):
        for config in ALG.configs(p):
            launch = direct._launch(p, config)
            assert 0 < launch.shared_mem <= DEFAULT_SMEM_LIMIT
    # Few channels, small footprint: all of them, at most 16.
    small = ConvProblem(n=1, c=40, h=8, w=8, k=8, r=3, s=3, pad=1)
    assert direct.channels_per_step(small, "8x8k16") == 16
    assert direct.channels_per_step(ConvProblem.from_key({**small.key(), "c": 5}), "8x8k16") == 5


def test_a_forward_grid_has_a_row_of_channel_blocks_per_group() -> None:
    # Mutation gap: the forward grid's y (groups x channel blocks of each group) was unpinned.
    problem = ConvProblem(n=3, c=6, h=20, w=20, k=18, r=3, s=3, groups=3)
    # 18 x 18 outputs in 16x16 tiles: 2 x 2; 6 channels a group in blocks of 8: 1 per group.
    assert direct._grid(problem, "16x16k8") == (4, 3, 3)
    many = ConvProblem(n=1, c=70000, h=2, w=2, k=70000, r=1, s=1, groups=70000)
    assert ALG.configs(many) == ()


def test_backward_data_grid_covers_every_pixel_and_channel_block_of_every_group() -> None:
    # Mutation gap: the backward_data grid (pixel blocks rounded up; groups x channel blocks
    # within 65535) was unpinned.
    problem = ConvProblem(n=2, c=12, h=15, w=20, k=6, r=3, s=3, groups=3,
                          direction="backward_data")
    launch = direct._launch(problem, "gather_c4")
    assert launch.grid == (2, 3 * 1, 2)  # 300 pixels in 256-thread blocks; 4 channels / 4
    assert launch.args[-1] == np.int32(1)
    assert direct._launch(problem, "gather_c1").grid == (2, 3 * 4, 2)
    # 16384 groups of 4 channels: one channel a thread needs 65536 rows, four 16384.
    grouped = ConvProblem(n=1, c=65536, h=1, w=1, k=16384, r=1, s=1, groups=16384,
                          direction="backward_data")
    assert ALG.configs(grouped) == ("gather_c4",)
    over = ConvProblem(n=1, c=70000, h=1, w=1, k=70000, r=1, s=1, groups=70000,
                       direction="backward_data")
    refused = ALG.supports(over)
    assert not refused and "grid limit" in refused.reason


@pytest.mark.parametrize("config", list(direct.FILTER_CONFIGS))
def test_backward_filter_divides_its_pixels_by_p_times_q_then_q(config: str) -> None:
    # Mutation gap: backward_filter's divisors (P*Q, then Q) were unpinned.
    problem = ConvProblem(n=2, c=4, h=9, w=6, k=2, r=3, s=2, direction="backward_filter")
    p, q = problem.out_hw
    assert (p, q) == (7, 5)
    launch = direct._launch(problem, config)
    assert launch.grid == (2 * 4 * 3 * 2, 1, 1)
    assert [int(a) for a in launch.args[-4:]] == [*fastdiv(p * q), *fastdiv(q)]
