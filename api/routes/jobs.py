"""POST /v1/jobs and GET /v1/jobs/{id}: tune many problems in the background."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, status

from api.deps import JobsDep, RequireToken, ServiceDep, SettingsDep
from api.jobs import JobItem, JobQueueFull, JobsStopped
from api.routes.common import enforce_limits, limited_problem, request_device
from api.schemas import READ_RESPONSES, WRITE_RESPONSES, ErrorOut, JobOut, JobRequest
from api.settings import Settings
from tuner.networks import network_problems

router = APIRouter(prefix="/v1", tags=["jobs"])


@router.post(
    "/jobs",
    response_model=JobOut,
    status_code=status.HTTP_202_ACCEPTED,
    dependencies=[RequireToken],
    responses={
        **WRITE_RESPONSES,
        413: {"model": ErrorOut, "description": "A problem over the size limits or memory."},
        422: {"model": ErrorOut, "description": "Invalid network, problems or device."},
        429: {"model": ErrorOut, "description": "Too many jobs queued or running."},
        503: {"model": ErrorOut, "description": "The server is shutting down, or its store "
              "is unusable or unreachable."},
    },
)
def create_job(
    body: JobRequest, settings: SettingsDep, jobs: JobsDep, facade: ServiceDep
) -> dict[str, Any]:
    """Queue a tuning job; every problem is validated and size-checked before it is queued."""
    if (body.network is None) == (body.problems is None):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "give exactly one of 'network' (with 'batches') or 'problems'",
        )
    device = request_device(facade, body.device, settings)
    items: list[JobItem] = []
    if body.network is not None:
        for batch in body.batches:
            for layer, problem in network_problems(body.network, batch, body.dtype, body.math):
                items.append(JobItem(problem, layer=layer.name, batch=batch))
    else:
        # The count before each problem's checks: a body of a few hundred thousand problems
        # (the body limit allows it) was validated whole before its 413.
        _check_job_size(len(body.problems or []), settings)
        # Sizes first: a tensor over the limit is a 413 however far over (see limited_problem).
        items = [JobItem(limited_problem(p, settings)) for p in body.problems or []]
    if not items:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "problems must not be empty")
    _check_job_size(len(items), settings)
    for item in items:
        enforce_limits(facade, item.problem, device, body.workspace_limit, settings)
    try:
        return jobs.submit(items, device, body.workspace_limit)
    except JobQueueFull as exc:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, str(exc)) from None
    except JobsStopped as exc:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE, str(exc), headers={"Retry-After": "30"}
        ) from None


@router.get(
    "/jobs/{job_id}",
    response_model=JobOut,
    responses={**READ_RESPONSES, 404: {"model": ErrorOut, "description": "No such job."}},
)
def get_job(
    job_id: Annotated[str, Path(max_length=64, pattern="^[0-9a-f]+$")], jobs: JobsDep
) -> dict[str, Any]:
    """A job's state, progress (done/total) and the best result per problem so far."""
    job = jobs.get(job_id)
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id!r}")
    return job


def _check_job_size(problems: int, settings: Settings) -> None:
    """413 for a job of more problems than CONVTUNE_MAX_JOB_PROBLEMS."""
    if problems > settings.max_job_problems:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            f"the job has {problems} problems, the limit is {settings.max_job_problems} "
            "(CONVTUNE_MAX_JOB_PROBLEMS)",
        )
