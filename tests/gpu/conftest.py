"""GPU tests: everything under tests/gpu, or marked `gpu`, skips with the reason when CuPy
or a GPU is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from algorithms.cuda.runtime import cuda_available
from algorithms.problem import ConvProblem
from algorithms.reference import reference

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests under tests/gpu as `gpu`; skip every `gpu` test when no GPU is usable."""
    ok, why = cuda_available()
    skip = pytest.mark.skip(reason=f"no usable GPU: {why}")
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.gpu)
        if not ok and item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def runtime() -> Any:
    """The first GPU."""
    from algorithms.cuda.runtime import CudaRuntime

    return CudaRuntime(0)


_inputs: dict[ConvProblem, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def host_case(problem: ConvProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fresh random operands of the problem's direction (in its dtype) and their float64
    reference, made once per problem."""
    if problem not in _inputs:
        rng = np.random.default_rng()
        a_shape, b_shape, _ = problem.operand_shapes
        a = rng.standard_normal(a_shape).astype(problem.dtype)
        b = rng.standard_normal(b_shape).astype(problem.dtype)
        _inputs[problem] = (a, b, reference(a, b, problem))
    return _inputs[problem]
