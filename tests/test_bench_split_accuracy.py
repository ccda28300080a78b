"""benchmarks/split_accuracy.py: the simulated split GEMMs against float64, on small shapes."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.reference import relative_error
from benchmarks import split_accuracy as sa


def _gemm(kind: str, method: str, k: int = 256) -> float:
    a, b = sa.inputs(kind, 32, 16, k, np.random.default_rng())
    how = sa.METHODS[method]
    assert how is not None
    with np.errstate(over="ignore", invalid="ignore"):
        return relative_error(sa.tensor_core_gemm(a, b, *how), a.astype(np.float64) @ b)


@pytest.mark.parametrize("kind", sa.KINDS)
@pytest.mark.parametrize("method", ["3xTF32 (shipped)", "3xFP16, scaled"])
def test_two_part_splits_hold_the_fp32_bar_on_every_kind_of_input(kind: str,
                                                                   method: str) -> None:
    assert _gemm(kind, method) < 3e-6


def test_unscaled_fp16_parts_fail_outside_fp16s_range() -> None:
    assert not np.isfinite(_gemm("large", "3xFP16, unscaled"))
    assert _gemm("small", "3xFP16, unscaled") > 1e-3


def test_the_scale_takes_the_peak_below_fp16s_largest_finite() -> None:
    a = np.random.default_rng().standard_normal(1000).astype(np.float32) * 3e7
    hi, lo, s = sa.split_16(sa.f16_rn, True)(a)
    assert 2.0**14 <= np.abs(a).max() * s < 2.0**15
    # Two FP16 parts carry 22 bits: the sum is the scaled value to about 2^-22.
    scaled = a.astype(np.float64) * s
    assert np.abs(hi.astype(np.float64) + lo - scaled).max() <= 2.0**-21 * np.abs(scaled).max()


def test_truncation_is_toward_zero() -> None:
    s = np.array([1.0 + 2.0**-30, -(1.0 + 2.0**-30), 3.0])
    assert sa.round_toward_zero(s).tolist() == [1.0, -1.0, 3.0]
