"""POST /v1/find: rank every algorithm for one problem (from the database, or measured)."""

from __future__ import annotations

from functools import partial
from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from api.deps import MetricsDep, RequireToken, SettingsDep
from api.routes.common import enforce_limits
from api.schemas import ErrorOut, FindRequest, FindResponse
from tuner.api import find_algorithms
from tuner.devices import parse_device
from tuner.tuning import NotInDatabase

router = APIRouter(prefix="/v1", tags=["find"])


@router.post(
    "/find",
    response_model=FindResponse,
    dependencies=[RequireToken],
    responses={
        401: {"model": ErrorOut, "description": "Missing or wrong bearer token."},
        404: {"model": ErrorOut, "description": "mode=cached and the problem is not stored."},
        413: {"model": ErrorOut, "description": "Problem over the size limits or memory."},
        422: {"model": ErrorOut, "description": "Invalid problem, device or mode."},
    },
)
async def find(body: FindRequest, settings: SettingsDep, metrics: MetricsDep) -> dict[str, Any]:
    """Every algorithm once, fastest usable first; `best` is null when none is usable."""
    problem = body.problem.to_problem()
    device = parse_device(body.device or settings.device)
    if body.mode != "cached":  # only a find that may measure allocates anything
        enforce_limits(problem, device, body.workspace_limit, settings)
    call = partial(find_algorithms, problem, device, body.workspace_limit,
                   db=settings.db_url, mode=body.mode)
    try:
        # A cached find is one indexed read (WAL readers never wait for writers): run it
        # on the event loop, since a hop to a worker thread costs more than the read.
        # Anything that may measure runs in the threadpool.
        results = call() if body.mode == "cached" else await run_in_threadpool(call)
    except NotInDatabase:
        metrics.record_find(None)
        raise
    metrics.record_find(results)
    best = results[0] if results and results[0].usable else None
    return {
        "problem": problem.key(),
        "device": device,
        "best": best.as_dict() if best else None,
        "candidates": [r.as_dict() for r in results],
    }
