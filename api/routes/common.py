"""Checks shared by the routes that may allocate or measure: size limits and device memory."""

from __future__ import annotations

from fastapi import HTTPException, status

from algorithms.problem import ConvProblem
from api.settings import Settings
from tuner.devices import parse_device
from tuner.service import Service


def enforce_limits(
    facade: Service, problem: ConvProblem, device: str, workspace_limit: int | None,
    settings: Settings,
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
    memory = facade.memory_bytes(device)
    if memory is None:
        return
    workspace = facade.largest_workspace(problem, device, workspace_limit)
    needed = problem.buffer_bytes + workspace
    if needed > memory:
        raise HTTPException(
            too_large,
            f"problem too large for {device}: its buffers ({problem.buffer_bytes} bytes) and "
            f"workspace ({workspace} bytes) need {needed} bytes, the device has {memory}",
        )


def request_device(facade: Service, requested: str | None, settings: Settings) -> str:
    """The device a request runs on: its own, else the server's, which must be usable.

    A device the client names and this host lacks is the client's mistake (422, from the
    library); the server's own device missing is the server's state (503).
    """
    device = parse_device(requested or settings.device)
    if requested is None:
        ok, why = facade.availability(device)
        if not ok:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                f"the server's device {device} is unavailable: {why}")
    return device
