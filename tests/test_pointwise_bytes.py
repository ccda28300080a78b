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
