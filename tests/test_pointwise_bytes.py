"""benchmarks/pointwise_bytes.py: the bytes a wgmma run of a pointwise layer moves with NHWC
copies and with the NCHW configurations, against arithmetic done here by hand."""

from __future__ import annotations

import pytest

from benchmarks.pointwise_bytes import moved
from tests.precision import make_problem

#: ResNet-50's res4.1x1a.rest at batch 32: x 32x1024x14x14, w 256x1024, y 32x256x14x14.
RES4: dict[str, int] = dict(n=32, c=1024, h=14, w=14, k=256, r=1, s=1)


@pytest.mark.parametrize(("math", "parts"), [("tf32", 1), ("fp32", 2)])
def test_nhwc_moves_the_copies_and_nchw_only_the_operands(math: str, parts: int) -> None:
    x, w, y = 32 * 1024 * 196 * 4, 256 * 1024 * 4, 32 * 256 * 196 * 4
    nhwc, nchw = moved(make_problem(**RES4, dtype="float32", math=math))
    # Copies read each operand and write `parts` copies; the GEMM reads the copies.
    assert nhwc == (x + w) * (1 + 2 * parts) + y
    assert nchw == x + w + y


@pytest.mark.parametrize(("math", "parts"), [("tf32", 1), ("fp32", 2)])
def test_nchw_with_taps_moves_the_operands_and_the_transpose_of_w(math: str,
                                                                    parts: int) -> None:
    # VGG-16's conv3_2 at batch 16: x 16x256x56x56, w 256x256x3x3, y 16x256x56x56.
    x, w, y = 16 * 256 * 56 * 56 * 4, 256 * 256 * 9 * 4, 16 * 256 * 56 * 56 * 4
    nhwc, nchw = moved(make_problem(n=16, c=256, h=56, w=56, k=256, r=3, s=3, pad=1,
                                    dtype="float32", math=math))
    assert nhwc == (x + w) * (1 + 2 * parts) + y
    assert nchw == x + 3 * w + y  # w read and written by its transpose, read by the GEMM
