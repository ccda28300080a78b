"""A strided 1x1 layer's NHWC copy gathers only the pixels its filter reads."""

from __future__ import annotations

from algorithms.base import WorkspaceLayout
from algorithms.cuda import _rearrange
from algorithms.problem import ConvProblem
from benchmarks.nhwc_copy_bytes import copy_bytes


def test_a_strided_1x1_layer_runs_as_the_stride_1_layer_over_its_pixels() -> None:
    problem = ConvProblem(n=2, c=32, h=9, w=11, k=24, r=1, s=1, stride=(2, 3), dilation=2,
                          groups=2, dtype="float16")
    run = _rearrange.gathered(problem)
    assert (run.h, run.w, run.stride, run.dilation, run.pad) == (5, 4, (1, 1), (1, 1), (0, 0))
    assert run.out_hw == problem.out_hw and run.output_shape == problem.output_shape
    assert (run.n, run.c, run.k, run.groups, run.dtype) == (2, 32, 24, 2, "float16")
    # The workspace holds the gathered pixels only, in both parts of 3xTF32.
    layout = _rearrange.add_nhwc_operands(WorkspaceLayout(), problem, parts=2)
    assert layout.byte_ranges()["x"].stop == 2 * 2 * 5 * 4 * 32 * 2


def test_every_other_layer_runs_as_it_is() -> None:
    for other in (ConvProblem(n=1, c=8, h=9, w=9, k=8, r=1, s=1),  # stride 1
                  ConvProblem(n=1, c=8, h=9, w=9, k=8, r=1, s=1, pad=1, stride=2),  # padded
                  ConvProblem(n=1, c=8, h=9, w=9, k=8, r=3, s=3, stride=2)):  # 3x3
        assert _rearrange.gathered(other) == other
        # Regression: nhwc_copies told the two apart by identity, and the cache hands back
        # an equal problem made earlier, so an unstrided layer's x took the strided copy.
        equal = ConvProblem.from_key(other.key())
        assert _rearrange.nhwc_copies(equal).x_launch.name == "transpose<unsigned int, 0>"


def test_copy_bytes_counts_the_rows_a_gather_touches() -> None:
    # float32, 56x56 at stride 2: a third of the bytes with two parts (whole rows read at
    # every other row: half of x; a quarter of x written per part).
    problem = ConvProblem(n=1, c=1, h=56, w=56, k=1, r=1, s=1, stride=2)
    x = 56 * 56 * 4
    assert copy_bytes(problem, 2) == (3 * x, x // 2 + 2 * x // 4)


# Bug (a review of index overflow, 2026-11-30): a strided 1x1 layer with one output row
# whose stride_h * W passes 2**31 made np.int32 raise in the gathered copy's launch, so
# every NHWC tc and wgmma configuration of it failed; with one row that step is unused.
# And wgmma's supports() raised a ValueError where the channel-padded copy passed the
# problem model's limits, instead of answering unsupported.
def test_huge_strides_and_paddings_are_answered_not_raised() -> None:
    from algorithms.cuda import _rearrange
    from algorithms.cuda.implicit_gemm_wgmma import ImplicitGemmWgmmaCuda, _run_plan
    from algorithms.problem import ConvProblem

    one_row = ConvProblem(n=1, c=8, h=1, w=32768, k=8, r=1, s=1, stride=(65536, 1),
                          dtype="float16")
    _rearrange.nhwc_copies(one_row)
    wgmma = ImplicitGemmWgmmaCuda()
    _run_plan(one_row, wgmma.configs(one_row)[0])
    huge = ConvProblem(n=1, c=1, h=2**19, w=2**19, k=1, r=1, s=1, dtype="float16")
    assert not wgmma.supports(huge)
