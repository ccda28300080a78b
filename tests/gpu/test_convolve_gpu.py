"""convolve() and its two gradients on a GPU (issue 9): the caller's kind of array back, `out`
written and returned, the work ordered on the caller's stream (torch's for tensors), each
result against the float64 reference."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from algorithms.problem import ConvProblem
from algorithms.reference import reference, relative_error, tolerance
from tuner import convolve, convolve_backward_data, convolve_backward_filter, plan

PROBLEM = ConvProblem(n=2, c=8, h=12, w=10, k=12, r=3, s=3, pad=1, stride=(2, 1))
GEOMETRY: dict[str, Any] = {"stride": (2, 1), "padding": 1}


def _host(array: Any) -> np.ndarray:
    import cupy

    return array.cpu().numpy() if hasattr(array, "cpu") else cupy.asnumpy(array)


def _arrays(kind: str, *shapes: tuple[int, ...]) -> list[Any]:
    """Fresh standard-normal float32 arrays on GPU 0: CuPy arrays or torch tensors."""
    if kind == "torch":
        torch = pytest.importorskip("torch")
        return [torch.randn(shape, device="cuda") for shape in shapes]
    import cupy

    rng = cupy.random.default_rng()
    return [rng.standard_normal(shape, dtype=np.float32) for shape in shapes]


def _check(result: Any, a: Any, b: Any, direction: str, db_url: str) -> None:
    problem = replace(PROBLEM, direction=direction)
    chosen = plan(problem, "cuda:0", db=db_url)  # the choice convolve ran, from the store
    error = relative_error(_host(result), reference(_host(a), _host(b), problem))
    assert error <= tolerance(problem.dtype, chosen.algorithm), f"{chosen.algorithm}: {error:.3g}"


@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_every_direction_gives_the_callers_kind_and_fills_out(db_url: str, kind: str) -> None:
    x, w, dy = _arrays(kind, PROBLEM.input_shape, PROBLEM.filter_shape, PROBLEM.output_shape)
    calls = [
        ("forward", x, w, lambda out: convolve(x, w, **GEOMETRY, db=db_url, out=out)),
        ("backward_data", dy, w, lambda out: convolve_backward_data(
            dy, w, PROBLEM.input_shape, **GEOMETRY, db=db_url, out=out)),
        ("backward_filter", x, dy, lambda out: convolve_backward_filter(
            x, dy, PROBLEM.filter_shape, **GEOMETRY, db=db_url, out=out)),
    ]
    for (direction, a, b, call), like in zip(calls, (dy, x, w), strict=True):
        made = call(None)
        assert type(made) is type(like) and tuple(made.shape) == tuple(like.shape)
        assert str(made.dtype).endswith("float32")
        _check(made, a, b, direction, db_url)
        out = _arrays(kind, tuple(like.shape))[0]
        assert call(out) is out
        _check(out, a, b, direction, db_url)


# convolve enqueues on torch's current stream: behind a slow producer on a side stream, it
# must read what the producer wrote.
def test_convolve_runs_behind_the_work_on_torchs_stream(db_url: str) -> None:
    torch = pytest.importorskip("torch")
    x, w = _arrays("torch", PROBLEM.input_shape, PROBLEM.filter_shape)
    convolve(x, w, **GEOMETRY, db=db_url)  # tuned and planned before the timing matters
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # about 30 ms of spinning on `side`
        x.fill_(0.5)
        y = convolve(x, w, **GEOMETRY, db=db_url)
    side.synchronize()
    assert float(x[0, 0, 0, 0]) == 0.5
    _check(y, x, w, "forward", db_url)


def test_a_bfloat16_problem_is_tuned_and_its_verification_sees_unwritten_outputs(
        db_url: str) -> None:
    # Bug (found by reading, 2026-11-30): the tuner filled a candidate's output with
    # fill(nan) before verifying it, which on bfloat16's uint16 storage is no NaN: an
    # output left unwritten went unseen. Now tuned in bfloat16 on the GPU, against float64.
    torch = pytest.importorskip("torch")
    from tuner import find_algorithms

    problem = replace(PROBLEM, dtype="bfloat16")
    found = find_algorithms(problem, "cuda:0", db=db_url)
    usable = [r for r in found if r.usable]
    assert usable and all((r.rel_error or 0.0) <= tolerance("bfloat16", r.algorithm)
                          for r in usable)
    x = torch.randn(problem.input_shape, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(problem.filter_shape, device="cuda", dtype=torch.bfloat16)
    y = convolve(x, w, db=db_url, **GEOMETRY)
    expected = reference(x.double().cpu().numpy(), w.double().cpu().numpy(), problem)
    assert y.dtype == torch.bfloat16
    assert relative_error(y.double().cpu().numpy(), expected) <= tolerance("bfloat16", "x")
