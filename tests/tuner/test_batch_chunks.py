"""Problems too large for a device's kernels run in batch chunks (tuner.batch_chunks).

The CPU backend has no element limit; these tests give it one (a few images' worth), so
that the chunked plans run here exactly as a GPU's do for operands of 2**31 elements.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from algorithms.cpu.runtime import CpuRuntime
from algorithms.problem import DIRECTIONS, ConvProblem
from algorithms.reference import reference, relative_error, tolerance
from tuner import (
    convolve,
    convolve_backward_data,
    convolve_backward_filter,
    find_algorithms,
    plan,
    run_convolution,
)
from tuner.batch_chunks import FILTER_OPERAND, ChunkedPlan, chunk_sizes
from tuner.plans import Plan

PROBLEM = ConvProblem(n=5, c=3, h=7, w=6, k=4, r=3, s=3, pad=1, stride=(2, 1))


def _elements(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def _limit(problem: ConvProblem, images: int) -> int:
    """An element limit that `images` images of each batched operand fit, and not one more."""
    at = FILTER_OPERAND[problem.direction]
    return max(_elements(shape) // problem.n * images
               for index, shape in enumerate(problem.operand_shapes) if index != at)


@pytest.fixture
def limited(monkeypatch: pytest.MonkeyPatch) -> int:
    """The CPU runtime limited to two images of PROBLEM per operand, in every direction."""
    limit = max(_limit(dataclasses.replace(PROBLEM, direction=d), 2) for d in DIRECTIONS)
    monkeypatch.setattr(CpuRuntime, "max_operand_elements", limit)
    return limit


def test_chunk_sizes_are_the_fewest_near_equal_chunks_that_fit(
    rng: np.random.Generator,
) -> None:
    for _ in range(300):
        problem = ConvProblem(
            n=int(rng.integers(1, 40)), c=int(rng.integers(1, 6)), h=int(rng.integers(3, 9)),
            w=int(rng.integers(3, 9)), k=int(rng.integers(1, 6)), r=3, s=3,
            direction=str(rng.choice(DIRECTIONS)))
        shapes = problem.operand_shapes
        limit = int(rng.integers(1, max(_elements(s) for s in shapes) + 50))
        sizes = chunk_sizes(problem, limit)
        at = FILTER_OPERAND[problem.direction]

        def fits(images: int, limit: int = limit, at: int = at, p: ConvProblem = problem) -> bool:
            part = dataclasses.replace(p, n=images)
            return all(_elements(s) <= limit for s in part.operand_shapes)

        if sizes is None:  # it fits whole, or a single image (or the filter) does not
            assert fits(problem.n) or not fits(1)
            continue
        assert not fits(problem.n) and fits(1)
        assert sum(sizes) == problem.n and all(fits(size) for size in sizes)
        assert list(sizes) == sorted(sizes, reverse=True) and sizes[0] - sizes[-1] <= 1
        fewer = len(sizes) - 1  # the fewest: one chunk less would need a larger one
        assert not fits(-(-problem.n // fewer))
    assert chunk_sizes(PROBLEM, None) is None


def test_a_filter_or_an_image_too_large_alone_is_not_split() -> None:
    one_image = _limit(PROBLEM, 1)
    assert chunk_sizes(PROBLEM, one_image) == (1,) * 5
    assert chunk_sizes(PROBLEM, one_image - 1) is None
    wide = dataclasses.replace(PROBLEM, k=400, c=40)  # a filter larger than an image
    assert chunk_sizes(wide, _elements(wide.filter_shape) - 1) is None


def _operands(problem: ConvProblem, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    a_shape, b_shape, _ = problem.operand_shapes
    return (rng.standard_normal(a_shape).astype(problem.dtype),
            rng.standard_normal(b_shape).astype(problem.dtype))


def _check(result: Any, a: np.ndarray, b: np.ndarray, problem: ConvProblem,
           algorithm: str) -> None:
    got = np.asarray(result)
    assert got.shape == problem.operand_shapes[2]
    error = relative_error(got, reference(a.astype(np.float64), b.astype(np.float64), problem))
    assert error <= tolerance(problem.dtype, algorithm), error


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_a_chunked_plan_matches_the_reference_in_every_direction(
    direction: str, limited: int, db_url: str, rng: np.random.Generator,
) -> None:
    problem = dataclasses.replace(PROBLEM, direction=direction)
    chosen = plan(problem, device="cpu", db=db_url, algorithm="im2col_gemm")
    assert isinstance(chosen, ChunkedPlan)
    assert [(start, end) for start, end, _ in chosen.chunks] == [(0, 2), (2, 4), (4, 5)]
    assert {part.problem.n for _, _, part in chosen.chunks} == {2, 1}
    for _, _, part in chosen.chunks:
        assert not isinstance(part, ChunkedPlan) and part.algorithm == "im2col_gemm"
        assert max(_elements(s) for s in part.problem.operand_shapes) <= limited
    a, b = _operands(problem, rng)
    _check(chosen(a, b), a, b, problem, "im2col_gemm")
    out = np.full(problem.operand_shapes[2], np.nan, problem.dtype)
    assert chosen(a, b, out) is out  # backward_filter: the chunks summed into out
    _check(out, a, b, problem, "im2col_gemm")


def test_convolve_tunes_and_stores_each_chunk_s_problem(
    limited: int, db_url: str, rng: np.random.Generator,
) -> None:
    x, w = _operands(PROBLEM, rng)
    y = convolve(x, w, stride=(2, 1), padding=1, device="cpu", db=db_url)
    done = run_convolution(x, w, stride=(2, 1), padding=1, device="cpu", db=db_url)
    assert done.elapsed_ms is not None and done.elapsed_ms > 0
    for result in (y, done.y):
        _check(result, x, w, PROBLEM, done.algorithm)
    for images in (2, 1):  # measured, and so answered from the store now
        part = dataclasses.replace(PROBLEM, n=images)
        stored = find_algorithms(part, device="cpu", db=db_url, mode="cached")
        assert stored and stored[0].usable


def test_torch_tensors_and_the_backward_calls_chunked(
    limited: int, db_url: str, rng: np.random.Generator,
) -> None:
    torch = pytest.importorskip("torch")
    x, w = _operands(PROBLEM, rng)
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    y = convolve(tx, tw, stride=(2, 1), padding=1, device="cpu", db=db_url,
                 algorithm="direct")
    assert isinstance(y, torch.Tensor)
    expected = torch.nn.functional.conv2d(tx.double(), tw.double(), stride=(2, 1), padding=1)
    assert relative_error(y.detach().numpy(), expected.detach().numpy()) <= 1e-5
    dy = torch.randn_like(expected, dtype=torch.float32)
    expected.backward(dy.double())
    assert tx.grad is not None and tw.grad is not None
    dx = convolve_backward_data(dy, tw, tuple(x.shape), stride=(2, 1), padding=1,
                                device="cpu", db=db_url, algorithm="direct")
    dw = convolve_backward_filter(tx, dy, tuple(w.shape), stride=(2, 1), padding=1,
                                  device="cpu", db=db_url, algorithm="direct")
    assert isinstance(dx, torch.Tensor) and isinstance(dw, torch.Tensor)
    assert relative_error(dx.numpy(), tx.grad.numpy()) <= 1e-5
    assert relative_error(dw.numpy(), tw.grad.numpy()) <= 1e-5


def test_wrong_operands_are_named_with_the_whole_problem_s_shapes(
    limited: int, db_url: str, rng: np.random.Generator,
) -> None:
    chosen = plan(PROBLEM, device="cpu", db=db_url, algorithm="direct")
    x, w = _operands(PROBLEM, rng)
    with pytest.raises(ValueError, match=r"^x has shape \(4, 3, 7, 6\); this plan needs "
                       r"\(5, 3, 7, 6\)$"):
        chosen(x[:4], w)
    y = np.empty(PROBLEM.output_shape, np.float32)
    with pytest.raises(ValueError, match=r"^out has shape \(5, 4, 4, 5\); this plan needs "
                       r"\(5, 4, 4, 6\)$"):
        chosen(x, w, y[..., :5])


def test_a_problem_that_fits_gets_an_ordinary_plan(
    monkeypatch: pytest.MonkeyPatch, db_url: str,
) -> None:
    monkeypatch.setattr(CpuRuntime, "max_operand_elements", _elements(PROBLEM.input_shape))
    chosen = plan(PROBLEM, device="cpu", db=db_url, algorithm="direct")
    assert type(chosen) is Plan
