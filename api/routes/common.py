"""Checks shared by the routes that may allocate or measure: size limits and device memory."""

from __future__ import annotations

from fastapi import HTTPException, status

from algorithms.problem import ConvProblem
from api.schemas import ProblemIn
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
    _refuse_large_tensors(problem.input_shape, problem.filter_shape, problem.output_shape,
                          settings)
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


Shape = tuple[int, ...]


def _refuse_large_tensors(x: Shape, w: Shape, y: Shape, settings: Settings) -> None:
    """413 naming the first of input `x`, filter `w` and output `y` over the element limit."""
    for name, shape in (("input", x), ("filter", w), ("output", y)):
        elements = shape[0] * shape[1] * shape[2] * shape[3]
        if elements > settings.max_tensor_elements:
            raise HTTPException(
                status.HTTP_413_CONTENT_TOO_LARGE,
                f"problem too large: the {name} tensor {shape} has {elements} elements, "
                f"the limit is {settings.max_tensor_elements} (CONVTUNE_MAX_TENSOR_ELEMENTS)",
            )


def check_tensor_sizes(
    x_shape: Shape, w_shape: Shape, plane: ConvProblem, settings: Settings
) -> None:
    """413 when input (n, c, h, w), filter (k, c/groups, r, s) or output is over the limit.

    `plane` is the problem's single-image, single-channel, single-filter copy (same spatial
    fields), from which the library works out the output's height and width.
    """
    # This runs before the library builds the whole ConvProblem: its own bound (2**40
    # elements a tensor) refuses with a ValueError, a 422, so a problem far over the
    # service's limit got a 422 and one a little over it a 413. The plane's tensors are
    # small enough for that bound, and whatever else is wrong with the spatial fields (an
    # empty output, a bound) is the ValueError the whole problem would raise.
    n, k = x_shape[0], w_shape[0]
    _refuse_large_tensors(x_shape, w_shape, (n, k, *plane.out_hw), settings)


def limited_problem(spec: ProblemIn, settings: Settings) -> ConvProblem:
    """The library's ConvProblem of `spec`, after a 413 for any tensor over the limit."""
    plane = spec.model_copy(update={"n": 1, "c": 1, "k": 1, "groups": 1}).to_problem()
    check_tensor_sizes((spec.n, spec.c, spec.h, spec.w),
                       (spec.k, spec.c // spec.groups, spec.r, spec.s), plane, settings)
    return spec.to_problem()


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
