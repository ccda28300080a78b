"""GPU tests: everything under tests/gpu, or marked `gpu`, skips with the reason when CuPy
or a GPU is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from algorithms.cuda.runtime import cuda_available

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
