"""Fresh random small convolution problems for the CUDA algorithms (in the emulator and on
the GPU): every direction, dtype and math mode, groups (depthwise among them), uneven
padding, stride and dilation. The fixed shapes pin known edges; these find the ones nobody
listed."""

from __future__ import annotations

from typing import Any

import numpy as np

from algorithms.base import Algorithm
from algorithms.problem import DIRECTIONS
from tests.precision import make_problem


def random_problem(rng: np.random.Generator, direction: str) -> dict[str, Any]:
    """ConvProblem keywords of a small random problem in `direction` (may be invalid)."""
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
    return _maybe_tf32(rng, problem)


def wider_problem(rng: np.random.Generator, direction: str) -> dict[str, Any]:
    """Like random_problem's, with the sizes the tensor-core kernels tile by: channels up to
    160 (several 32-channel K-steps, multiples of 4 and 8 among them), up to 96 output
    channels a group (72 and 96: the 96-row wgmma tiles), images up to 14 wide, 5x5 filters;
    emulated in seconds. tests/cuda_emu/fuzz.py draws them."""
    groups = int(rng.choice([1, 1, 1, 1, 2, 4]))
    r = int(rng.choice([1, 1, 2, 3, 3, 5]))
    problem: dict[str, Any] = dict(
        n=int(rng.choice([1, 1, 2, 3])),
        c=groups * int(rng.choice([1, 3, 4, 5, 8, 12, 16, 20, 32, 40])),
        k=groups * int(rng.choice([1, 2, 3, 4, 7, 8, 16, 24, 33, 72, 96])),
        h=int(rng.integers(1, 15)), w=int(rng.integers(1, 15)),
        r=r, s=r if rng.random() < 0.8 else int(rng.choice([1, 3, 5])),
        pad=[int(v) for v in rng.integers(0, 3, 2)],
        stride=[int(v) for v in rng.choice([1, 1, 2], 2)],
        dilation=[1, 1] if rng.random() < 0.8 else [int(v) for v in rng.integers(1, 3, 2)],
        groups=groups, dtype=str(rng.choice(["float32", "float32", "float16", "bfloat16"])),
        direction=direction,
    )
    if rng.random() < 0.1:  # depthwise, with a channel multiplier of 1 or more
        problem["groups"] = problem["c"]
        problem["k"] = problem["c"] * int(rng.choice([1, 2]))
    return _maybe_tf32(rng, problem)


def _maybe_tf32(rng: np.random.Generator, problem: dict[str, Any]) -> dict[str, Any]:
    """`problem` at math "tf32" half the time where it is float32 with 32 outputs or more
    (`_outputs` says why not fewer)."""
    if problem["dtype"] == "float32" and rng.random() < 0.5 and _outputs(problem) >= 32:
        problem["math"] = "tf32"
    return problem


def _outputs(problem: dict[str, Any]) -> int:
    """Elements of the problem's result (0 if the problem is invalid).

    TF32's 1e-3 is a norm-wise bound: over a handful of sums one cancelling sum can carry
    the whole norm (about 0.1% of such draws exceeded it with correctly rounded TF32
    operands, all with 1-12 outputs), so tiny problems draw TF32 no more.
    """
    try:
        return int(np.prod(make_problem(**problem).operand_shapes[2]))
    except ValueError:
        return 0


def supported_problem(rng: np.random.Generator, algorithm: Algorithm,
                      direction: str, wide: bool = False) -> dict[str, Any] | None:
    """A random problem that `algorithm` supports in `direction`; None if 2000 draws found
    none (winograd's 3x3 stride-1 layers are about 1 in 150)."""
    draw = wider_problem if wide else random_problem
    for _ in range(2000):
        problem = draw(rng, direction)
        try:
            if algorithm.supports(make_problem(**problem)):
                return problem
        except ValueError:  # the dilated filter does not fit the padded input
            continue
    return None


def random_cases(rng: np.random.Generator, algorithms: dict[str, Algorithm],
                 count: int, wide: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """(algorithm name, problem keywords): every algorithm in every direction it serves,
    then random algorithms and directions up to `count` (`wide`: wider_problem's sizes)."""
    names = sorted(algorithms)
    slots = [(name, d) for name in names for d in DIRECTIONS]
    slots += [(str(rng.choice(names)), str(rng.choice(DIRECTIONS)))
              for _ in range(max(0, count - len(slots)))]
    found = [(name, supported_problem(rng, algorithms[name], d, wide)) for name, d in slots]
    return [(name, problem) for name, problem in found if problem is not None]
