"""POST /v1/find: rank every algorithm for one problem (from the database, or measured)."""

from __future__ import annotations

from contextlib import nullcontext
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials
from starlette.concurrency import run_in_threadpool

from api.deps import MetricsDep, ServiceDep, SettingsDep, bearer, require_token, slots
from api.routes.common import enforce_limits, limited_problem, request_device
from api.schemas import BUSY, WRITE_RESPONSES, ErrorOut, FindRequest, FindResponse
from tuner.errors import NotInDatabase

router = APIRouter(prefix="/v1", tags=["find"])

#: Modes that never measure: a read-scope token may ask, and nothing is allocated.
READ_MODES = frozenset({"cached", "heuristic"})


@router.post(
    "/find",
    response_model=FindResponse,
    responses={
        **WRITE_RESPONSES,
        404: {"model": ErrorOut, "description": "mode=cached or heuristic, and the problem "
              "is neither stored nor predictable."},
        413: {"model": ErrorOut, "description": "Problem over the size limits or memory."},
        422: {"model": ErrorOut, "description": "Invalid problem, device or mode."},
        429: BUSY,
    },
)
async def find(
    body: FindRequest, settings: SettingsDep, metrics: MetricsDep, facade: ServiceDep,
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> dict[str, Any]:
    """Every algorithm once, fastest usable first; `best` is null when none is usable.

    Modes that never measure (cached, heuristic) are reads (the read scope); a find that
    may measure needs the write token.
    """
    reads = body.mode in READ_MODES
    if not reads:
        await require_token(settings, credentials)
    # Only a find that may measure has the size limits (a read allocates nothing); its
    # tensors are checked before the library's own, larger bound can refuse them (422).
    problem = body.problem.to_problem() if reads else limited_problem(body.problem, settings)
    device = request_device(facade, body.device, settings)
    if not reads:  # only a find that may measure allocates anything
        enforce_limits(facade, problem, device, body.workspace_limit, settings)
    # An answer already in memory is served on the event loop, since a hop to a worker
    # thread costs more than the lookup; anything else (a store read, a model fit, a
    # measurement) runs in the threadpool.
    results = facade.cached_find(problem, device, body.workspace_limit, mode=body.mode)
    if results is None:
        call = partial(facade.find, problem, device, body.workspace_limit, mode=body.mode)
        try:
            # A find that may measure holds a slot (429 when none is free); a read does not.
            with nullcontext() if reads else slots(request).taken():
                results = await run_in_threadpool(call)
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
