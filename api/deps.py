"""Typed dependencies: settings, the tuner's facade, the job manager, metrics, the token.

They are `async def` because they never block: FastAPI runs a sync dependency in a worker
thread, and those thread hops cost more than a cached find itself.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.admission import Slots
from api.jobs import JobManager
from api.metrics import Metrics
from api.settings import Settings
from tuner.service import Service, service


async def get_settings(request: Request) -> Settings:
    """The app's settings."""
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


async def get_service(settings: SettingsDep) -> Service:
    """The tuner's facade for the configured store (one per URL per process)."""
    return service(settings.db_url)


ServiceDep = Annotated[Service, Depends(get_service)]


async def get_jobs(request: Request) -> JobManager:
    """The app's background job manager."""
    jobs: JobManager = request.app.state.jobs
    return jobs


JobsDep = Annotated[JobManager, Depends(get_jobs)]


async def get_metrics(request: Request) -> Metrics:
    """The app's Prometheus metrics."""
    metrics: Metrics = request.app.state.metrics
    return metrics


MetricsDep = Annotated[Metrics, Depends(get_metrics)]


def slots(request: Request) -> Slots:
    """The app's slots for requests that measure or convolve (a plain function, not a
    dependency: a find takes one only when it misses the answers kept in memory, and a
    dependency would cost every cached find its resolution)."""
    kept: Slots = request.app.state.slots
    return kept


async def running(request: Request) -> AsyncIterator[None]:
    """Hold one of the app's slots while the route runs (429 when none is free)."""
    with slots(request).taken():
        yield


#: A route that does work (convolves) holds a slot while it runs.
Running = Depends(running)

bearer = HTTPBearer(
    auto_error=False,
    description="Write scope ($CONVTUNE_API_TOKEN): tuning, convolve, jobs, pushing "
    "bundles. Read scope ($CONVTUNE_READ_TOKEN, or the write token): everything else "
    "under /v1; open when no read token is set.",
)


def token_refusal(given: str | None, accepted: tuple[str | None, ...]) -> str | None:
    """Why a bearer token `given` is refused when the `accepted` tokens are set, or None.

    No accepted token set: the scope is open.
    """
    expected = [t for t in accepted if t]
    if not expected:
        return None
    if given is None:
        return "missing bearer token: send 'Authorization: Bearer <token>'"
    if any(hmac.compare_digest(given.encode(), t.encode()) for t in expected):
        return None
    return "invalid bearer token"


def write_tokens(settings: Settings) -> tuple[str | None, ...]:
    """Tokens of the write scope: tuning, convolving, jobs, pushing bundles."""
    return (settings.api_token,)


def read_tokens(settings: Settings) -> tuple[str | None, ...]:
    """Tokens of the read scope (the write token reads too); open when no read token is set."""
    return (settings.read_token, settings.api_token) if settings.read_token else ()


async def require_token(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> None:
    """401 unless the request carries the write scope's bearer token (when one is set)."""
    refusal = token_refusal(credentials.credentials if credentials else None,
                            write_tokens(settings))
    if refusal is not None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, refusal,
                            headers={"WWW-Authenticate": "Bearer"})


#: For state-changing routes: `@router.post(..., dependencies=[RequireToken])` or
#: `APIRouter(dependencies=[RequireToken])`.
RequireToken = Depends(require_token)
