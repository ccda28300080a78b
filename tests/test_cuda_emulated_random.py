"""The CUDA algorithms in the emulator (tests/test_cuda_emulated.py's harness) on fresh random
small problems (tests/random_problems.py). A failure names its problem, so that it can join
the fixed cases."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms.cuda import shipped_kernels
from tests.cuda_emu.build import build_all, missing_tools
from tests.cuda_emu.cases import ALGORITHMS, run_cases
from tests.random_problems import random_cases

_missing = missing_tools()
pytestmark = pytest.mark.skipif(_missing is not None, reason=f"cannot emulate: {_missing}")

#: Cases per run (at least every algorithm in every direction it serves): about 12 s on
#: two cores once the kernels are built.
CASES = 48


def test_random_problems_match_reference_race_free_in_bounds() -> None:
    drawn = random_cases(np.random.default_rng(), ALGORITHMS, CASES)  # fresh every run
    assert len(drawn) >= 2 * len(ALGORITHMS)
    cases: list[dict[str, Any]] = [
        {"id": f"random{i}-{name}", "algorithm": name, "problem": problem, "offsets": None,
         "inputs": None} for i, (name, problem) in enumerate(drawn)]
    build_all(shipped_kernels())
    verdicts = run_cases(cases)
    failed = [f"{c['algorithm']} on {c['problem']}: {verdicts[c['id']]['message'][:400]}"
              for c in cases if verdicts[c["id"]]["status"] != "ok"]
    assert not failed, "\n".join(failed)
