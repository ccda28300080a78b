"""The CUDA depthwise algorithm's host side without a GPU, against hand-derived sizes: a
tile's staged input footprint and taps in shared memory (within 48 KB), and the flat
instances' grid and divisors. A wrong answer is a shared-memory overrun, outputs no thread
computes, or a wrong index on a GPU.
"""

from __future__ import annotations

from algorithms.cuda import depthwise as dw
from algorithms.cuda._loader import DEFAULT_SMEM_LIMIT, fastdiv
from algorithms.problem import ConvProblem

ALG = dw.DepthwiseCuda()


def test_a_tile_stages_its_receptive_field_and_the_channels_taps() -> None:
    # Mutation gap: smem_bytes' terms were unpinned: the footprint's rows (TH x PH outputs,
    # not TH), the channel multiplier's taps (K/C filters a channel) and float64's 8-byte
    # words.
    problem = ConvProblem(n=1, c=4, h=64, w=64, k=8, r=3, s=3, groups=4)
    # 32x32p4: 32 x 32 outputs, 34 x 34 inputs at stride 1, and 2 x 3 x 3 taps.
    assert dw.footprint(problem, "32x32p4") == (34, 34)
    assert dw.smem_bytes(problem, "32x32p4") == (34 * 34 + 2 * 9) * 4
    wide = ConvProblem.from_key({**problem.key(), "dtype": "float64"})
    assert dw.smem_bytes(wide, "32x32p4") == (34 * 34 + 2 * 9) * 8
    strided = ConvProblem(n=1, c=4, h=64, w=64, k=4, r=5, s=3, stride=(2, 1), dilation=(1, 2),
                          groups=4)
    # 16x16p2: 16 rows (8 x 2) at stride 2 of a 5-row filter; 16 columns of a 5-wide one.
    assert dw.footprint(strided, "16x16p2") == (15 * 2 + 5, 15 * 1 + 5)


def test_tiles_are_offered_only_within_48_kb_of_shared_memory() -> None:
    # Mutation gap: the 48 KB bound on the offered tiles was unpinned.
    problem = ConvProblem(n=1, c=2, h=200, w=200, k=2, r=7, s=7, stride=2, dilation=3,
                          groups=2, dtype="float64")
    # 32x32p4: (31 x 2 + 19)**2 = 6561 words + 49 taps, 52880 bytes: not offered.
    assert dw.smem_bytes(problem, "32x32p4") == (81 * 81 + 49) * 8 > DEFAULT_SMEM_LIMIT
    offered = ALG.configs(problem)
    assert "32x32p4" not in offered and "16x16p2" in offered
    for config in offered:
        if config in dw.CONFIGS:
            assert dw._launch(problem, config).shared_mem <= DEFAULT_SMEM_LIMIT


def test_flat_instances_launch_a_thread_for_every_group_of_outputs() -> None:
    # Mutation gap: the flat grid's block count (rounded up) and the divisors' order
    # (column groups, P, K, K/C) were unpinned.
    problem = ConvProblem(n=1, c=3, h=7, w=5, k=6, r=3, s=3, pad=1, groups=3)  # 7 x 5 out
    launch = dw._launch(problem, "flat_q1")
    total = 6 * 7 * 5  # n x K x P x ceil(Q / 1)
    assert launch.grid == (1, 1, 1) and int(launch.args[-1]) == total
    assert [int(a) for a in launch.args[-9:-1]] == [
        *fastdiv(5), *fastdiv(7), *fastdiv(6), *fastdiv(2)]
    big = ConvProblem(n=4, c=8, h=9, w=9, k=8, r=3, s=3, pad=1, groups=8)
    assert dw._launch(big, "flat_q1").grid == (-(-(4 * 8 * 81) // 256), 1, 1) == (11, 1, 1)
