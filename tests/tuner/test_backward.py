"""Backward-data and backward-filter: tuned, stored and run like the forward pass (issue 13)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from algorithms.problem import ConvProblem
from algorithms.reference import reference, relative_error, tolerance
from tuner import (
    convolve_backward_data,
    convolve_backward_filter,
    find_algorithms,
    find_best_algorithm,
)
from tuner import results as R

#: Stride 2 leaves holes in dx that no output reaches.
PROBLEM = ConvProblem(n=2, c=4, h=9, w=8, k=6, r=3, s=3, pad=1, stride=2, groups=2)


@pytest.mark.parametrize("direction", ["backward_data", "backward_filter"])
def test_backward_problems_are_tuned_and_stored_apart(direction: str, db_url: str) -> None:
    problem = replace(PROBLEM, direction=direction)
    results = {r.algorithm: r for r in find_algorithms(problem, "cpu", db=db_url)}
    for name in ("direct", "im2col_gemm", "implicit_gemm", "fft"):
        assert results[name].status == R.OK, results[name].error
    # An algorithm without the direction says precisely why not.
    assert results["implicit_gemm_tc"].status == R.UNSUPPORTED
    assert direction in (results["implicit_gemm_tc"].error or "")
    again = find_algorithms(problem, "cpu", db=db_url, mode="cached")
    assert {r.source for r in again if r.usable} == {R.MEASURED_HERE}
    # The forward problem of the same geometry is another problem: nothing stored for it.
    with pytest.raises(LookupError):
        find_best_algorithm(PROBLEM, "cpu", db=db_url, mode="cached")


@pytest.mark.parametrize("algorithm", [None, "direct", "im2col_gemm", "implicit_gemm", "fft"])
def test_public_backward_calls_match_the_reference(
    algorithm: str | None, db_url: str, rng: np.random.Generator
) -> None:
    x = rng.standard_normal(PROBLEM.input_shape).astype(np.float32)
    w = rng.standard_normal(PROBLEM.filter_shape).astype(np.float32)
    dy = rng.standard_normal(PROBLEM.output_shape).astype(np.float32)
    geometry: dict[str, Any] = dict(stride=2, padding=1, groups=2, db=db_url, algorithm=algorithm)
    dx = convolve_backward_data(dy, w, x.shape, **geometry)
    dw = convolve_backward_filter(x, dy, w.shape, **geometry)
    assert dx.shape == x.shape and dw.shape == w.shape
    for got, problem, operands in (
        (dx, replace(PROBLEM, direction="backward_data"), (dy, w)),
        (dw, replace(PROBLEM, direction="backward_filter"), (x, dy)),
    ):
        error = relative_error(got, reference(*operands, problem))
        assert error <= tolerance("float32", "direct"), error


def test_backward_shapes_are_checked(db_url: str, rng: np.random.Generator) -> None:
    w = rng.standard_normal(PROBLEM.filter_shape).astype(np.float32)
    wrong_dy = rng.standard_normal((2, 6, 5, 5)).astype(np.float32)
    with pytest.raises(ValueError, match="dy has shape"):
        convolve_backward_data(wrong_dy, w, PROBLEM.input_shape, stride=2, padding=1,
                               groups=2, db=db_url)


def test_module_gradients_come_from_convtune(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    from tuner.nn import Conv2d

    def not_torch(*_a: object, **_k: object) -> None:
        raise AssertionError("the CPU backward went through torch.nn.grad")

    reference_conv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2).double()
    ours = Conv2d(4, 6, 3, stride=2, padding=1, groups=2, db=db_url).double()
    ours.load_state_dict(reference_conv.state_dict())
    x = torch.randn(2, 4, 9, 8, dtype=torch.float64, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    expected_grad = torch.randn(2, 6, 5, 4, dtype=torch.float64)
    reference_conv(x_ref).backward(expected_grad)
    monkeypatch.setattr(torch.nn.grad, "conv2d_input", not_torch)
    monkeypatch.setattr(torch.nn.grad, "conv2d_weight", not_torch)
    ours(x).backward(expected_grad)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(ours.weight.grad, reference_conv.weight.grad, rtol=1e-9, atol=1e-9)
