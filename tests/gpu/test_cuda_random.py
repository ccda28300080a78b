"""The CUDA algorithms on the GPU on fresh random small problems (tests/random_problems.py):
every configuration against the float64 reference, as tests/test_cuda_emulated_random.py
does in the emulator. A disagreement between the two runs is a gap in the emulation.
Skipped, with the reason, where CuPy or a GPU is missing (see conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.base import Algorithm
from algorithms.registry import algorithms_for
from tests.gpu.conftest import config_failures
from tests.precision import make_problem
from tests.random_problems import random_cases

pytestmark = pytest.mark.gpu

#: Cases per run: seconds on a GPU (the float64 references on the host take most of it).
CASES = 160


def test_random_problems_match_reference() -> None:
    algorithms: dict[str, Algorithm] = {a.name: a for a in algorithms_for("cuda")}
    drawn = random_cases(np.random.default_rng(), algorithms, CASES)  # fresh every run
    assert len(drawn) >= 2 * len(algorithms)
    failed = []
    for name, keywords in drawn:
        problem = make_problem(**keywords)
        failed += [f"{name} on {keywords}: {line}"
                   for line in config_failures(algorithms[name], problem)]
    assert not failed, "\n".join(failed)
