"""Checks shared by the routes that may allocate or measure: size limits and device memory."""

from __future__ import annotations

import functools

from fastapi import HTTPException, status

from algorithms.problem import ConvProblem
from api.settings import Settings
from db.engine import open_store
from tuner.devices import backend_of, get_runtime
from tuner.tuning import Tuner


@functools.lru_cache(maxsize=4096)
def largest_workspace(
    problem: ConvProblem, backend: str, workspace_limit: int | None, db_url: str
) -> int:
    """The largest workspace a tuning of `problem` would allocate under the limit."""
    # Candidates depend only on the problem and the registry (cached: finds repeat).
    candidates, _ = Tuner(open_store(db_url)).candidates(problem, backend)
    sizes = [
        c.workspace_bytes for c in candidates
        if workspace_limit is None or c.workspace_bytes <= workspace_limit
    ]
    return max(sizes, default=0)


def enforce_limits(
    problem: ConvProblem, device: str, workspace_limit: int | None, settings: Settings
) -> None:
    """413 when the problem is over the configured size limits or the device's memory.

    Runs before anything is allocated; the device memory check counts the input, filter and
    output buffers plus the largest workspace a candidate under the limit would need.
    """
    too_large = status.HTTP_413_CONTENT_TOO_LARGE
    tensors = {
        "input": problem.input_shape, "filter": problem.filter_shape,
        "output": problem.output_shape,
    }
    for name, shape in tensors.items():
        elements = shape[0] * shape[1] * shape[2] * shape[3]
        if elements > settings.max_tensor_elements:
            raise HTTPException(
                too_large,
                f"problem too large: the {name} tensor {shape} has {elements} elements, "
                f"the limit is {settings.max_tensor_elements} (CONVTUNE_MAX_TENSOR_ELEMENTS)",
            )
    if problem.flops > settings.max_problem_flops:
        raise HTTPException(
            too_large,
            f"problem too large: {problem.flops} FLOPs, the limit is "
            f"{settings.max_problem_flops} (CONVTUNE_MAX_PROBLEM_FLOPS)",
        )
    memory = get_runtime(device).memory_bytes()
    if memory is None:
        return
    workspace = largest_workspace(problem, backend_of(device), workspace_limit, settings.db_url)
    needed = problem.buffer_bytes + workspace
    if needed > memory:
        raise HTTPException(
            too_large,
            f"problem too large for {device}: its buffers ({problem.buffer_bytes} bytes) and "
            f"workspace ({workspace} bytes) need {needed} bytes, the device has {memory}",
        )
