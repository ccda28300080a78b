"""One emulated case: an algorithm on a problem, kept only where the algorithm supports it."""

from __future__ import annotations

from typing import Any

from tests.cuda_emu.cases import ALGORITHMS
from tests.precision import make_problem

#: A case as tests/cuda_emu/cases.py runs it: its id, the algorithm's name, the problem
#: (make_problem's keyword arguments), `offsets` (x, w and y placed that many bytes past a
#: 256-byte boundary; None: exact-size blocks) and `inputs` (a kind of operands cases.py
#: draws; None: random ones).
Case = dict[str, Any]


def case(case_id: str, name: str, problem: dict[str, Any],
         offsets: list[int] | None = None, inputs: str | None = None) -> Case | None:
    """The case, or None where the algorithm does not support the problem."""
    if not ALGORITHMS[name].supports(make_problem(**problem)):
        return None
    return {"id": case_id, "algorithm": name, "problem": problem, "offsets": offsets,
            "inputs": inputs}
