"""The CUDA algorithms in the emulator (tests/test_cuda_emulated.py's harness) on fresh random
small problems: every direction, dtype and math mode, groups (depthwise among them), uneven
padding, stride and dilation. The fixed cases pin known edges; these find the ones nobody
listed. A failure names its problem, so it can be added to the fixed cases."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms.cuda import shipped_kernels
from algorithms.problem import DIRECTIONS
from tests.cuda_emu.build import build_all, missing_tools
from tests.cuda_emu.cases import ALGORITHMS, run_cases
from tests.precision import make_problem

_missing = missing_tools()
pytestmark = pytest.mark.skipif(_missing is not None, reason=f"cannot emulate: {_missing}")

#: Cases per run (at least every algorithm in every direction it serves): about 20-40 s on
#: two cores once the kernels are built.
CASES = 48


def _random_problem(rng: np.random.Generator, direction: str) -> dict[str, Any]:
    """ConvProblem keywords of a small random problem (may be invalid)."""
    groups = int(rng.choice([1, 1, 2, 3, 4]))
    # Channels per group of 8 let the vector and NHWC tensor-core paths in; 1 is depthwise.
    cg = int(rng.choice([1, 2, 3, 8]))
    problem: dict[str, Any] = dict(
        n=int(rng.integers(1, 9)), c=groups * cg, k=groups * int(rng.choice([1, 2, 5, 8])),
        h=int(rng.integers(1, 10)), w=int(rng.integers(1, 10)),
        r=int(rng.integers(1, 4)), s=int(rng.integers(1, 4)),
        pad=[int(v) for v in rng.integers(0, 3, 2)],
        stride=[int(v) for v in rng.integers(1, 3, 2)],
        dilation=[int(v) for v in rng.integers(1, 3, 2)], groups=groups,
        dtype=str(rng.choice(["float32", "float16", "bfloat16", "float64"])),
        direction=direction,
    )
    if problem["dtype"] == "float32" and rng.random() < 0.5:
        problem["math"] = "tf32"
    return problem


def _case(rng: np.random.Generator, name: str, direction: str) -> dict[str, Any] | None:
    """A random problem that `name` supports in `direction`; None if 2000 draws found none
    (winograd's 3x3 stride-1 layers are about 1 in 150)."""
    for _ in range(2000):
        problem = _random_problem(rng, direction)
        try:
            if ALGORITHMS[name].supports(make_problem(**problem)):
                return {"algorithm": name, "problem": problem, "offsets": None, "inputs": None}
        except ValueError:  # the dilated filter does not fit the padded input
            continue
    return None


def test_random_problems_match_reference_race_free_in_bounds() -> None:
    rng = np.random.default_rng()  # fresh problems every run
    # Every algorithm in every direction it serves, then random ones up to CASES.
    slots = [(name, d) for name in sorted(ALGORITHMS) for d in DIRECTIONS]
    slots += [(str(rng.choice(sorted(ALGORITHMS))), str(rng.choice(DIRECTIONS)))
              for _ in range(max(0, CASES - len(slots)))]
    found = [_case(rng, name, direction) for name, direction in slots]
    cases = [{**c, "id": f"random{i}-{c['algorithm']}"} for i, c in enumerate(found) if c]
    assert len(cases) >= len(ALGORITHMS) * 2
    build_all(shipped_kernels())
    verdicts = run_cases(cases)
    failed = [f"{c['algorithm']} on {c['problem']}: {verdicts[c['id']]['message'][:400]}"
              for c in cases if verdicts[c["id"]]["status"] != "ok"]
    assert not failed, "\n".join(failed)
