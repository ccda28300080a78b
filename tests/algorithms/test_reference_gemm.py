"""The per-tap GEMM reference (what the CUDA runtime runs with CuPy), with NumPy standing in.

The oracle is algorithms.reference (einsum windows and tap loops, itself checked against
loops by the definition in test_reference.py): a different formulation of the same sums.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from algorithms.problem import DIRECTIONS, ConvProblem
from algorithms.reference import max_abs_error, reference, relative_error
from algorithms.reference_gemm import as_float64, errors, reference_gemm
from tests.algorithms.test_reference import PROBLEMS


def _operands(p: ConvProblem, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    a_shape, b_shape, _ = p.operand_shapes
    return (rng.standard_normal(a_shape).astype(p.dtype),
            rng.standard_normal(b_shape).astype(p.dtype))


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_gemm_reference_matches_the_host_reference(
    name: str, direction: str, rng: np.random.Generator
) -> None:
    p = replace(PROBLEMS[name], direction=direction)
    a, b = _operands(p, rng)
    expected = reference(a, b, p)
    got = reference_gemm(np, a, b, p)
    assert got.dtype == np.float64 and got.shape == expected.shape
    assert relative_error(got, expected) < 1e-13
    # One image per chunk gives the same sums (backward_filter accumulates across chunks).
    assert relative_error(reference_gemm(np, a, b, p, chunk_bytes=1), expected) < 1e-13


def test_bfloat16_bits_widen_exactly(rng: np.random.Generator) -> None:
    p = ConvProblem(n=2, c=4, h=6, w=5, k=3, r=3, s=3, pad=1, dtype="bfloat16")
    a, b = _operands(p, rng)  # ml_dtypes bfloat16 on the host
    bits_a, bits_b = a.view(np.uint16), b.view(np.uint16)  # what CuPy holds
    assert np.array_equal(as_float64(np, bits_a, "bfloat16"), a.astype(np.float64))
    expected = reference(a, b, p)
    assert relative_error(reference_gemm(np, bits_a, bits_b, p), expected) < 1e-13


def test_errors_match_the_host_measures_and_catch_nan(rng: np.random.Generator) -> None:
    ref = rng.standard_normal((2, 3, 4, 5))
    out = (ref + 1e-3 * rng.standard_normal(ref.shape)).astype(np.float32)
    max_abs, rel = errors(np, out, ref, "float32")
    assert max_abs == pytest.approx(max_abs_error(out, ref), rel=1e-12)
    assert rel == pytest.approx(relative_error(out, ref), rel=1e-12)
    out[0, 0, 0, 0] = np.nan  # an unwritten (poisoned) element
    assert not np.isfinite(errors(np, out, ref, "float32")[1])
    with pytest.raises(ValueError, match="shapes"):
        errors(np, out[:1], ref, "float32")


def test_wrong_operand_shapes_are_refused(rng: np.random.Generator) -> None:
    p = PROBLEMS["plain"]
    a, b = _operands(p, rng)
    with pytest.raises(ValueError, match="do not match"):
        reference_gemm(np, a[:, :1], b, p)


def test_fill_nan_fills_bfloat16_bits_with_a_nan() -> None:
    # Bug: the tuner's verification and bench_gpu filled outputs with fill(nan), which on a
    # GPU's bfloat16 storage (uint16 bits) is no NaN (NumPy refuses it; CuPy casts), so an
    # output a bfloat16 candidate left unwritten did not show.
    import numpy as np

    from algorithms.reference_gemm import as_float64, fill_nan

    bits = np.zeros(4, np.uint16)
    fill_nan(bits)
    assert np.isnan(as_float64(np, bits, "bfloat16")).all()
    floats = np.zeros(4, np.float32)
    fill_nan(floats)
    assert np.isnan(floats).all()
