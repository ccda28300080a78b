"""Typed dependencies: settings, the store, the job manager, metrics, the bearer token.

They are `async def` because they never block: FastAPI runs a sync dependency in a worker
thread, and those thread hops cost more than a cached find itself.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.jobs import JobManager
from api.metrics import Metrics
from api.settings import Settings
from db.engine import Store, open_store


async def get_settings(request: Request) -> Settings:
    """The app's settings."""
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


async def get_store(settings: SettingsDep) -> Store:
    """The results database (one engine per URL per process, cached by open_store)."""
    return open_store(settings.db_url)


StoreDep = Annotated[Store, Depends(get_store)]


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

_bearer = HTTPBearer(
    auto_error=False,
    description="Required on POST endpoints when the server sets $CONVTUNE_API_TOKEN.",
)


async def require_token(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """401 unless the request carries `Authorization: Bearer <token>` (when one is set)."""
    expected = settings.api_token
    if not expected:
        return
    if credentials is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing bearer token: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not hmac.compare_digest(credentials.credentials.encode(), expected.encode()):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "invalid bearer token",
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )


#: For state-changing routes: `@router.post(..., dependencies=[RequireToken])` or
#: `APIRouter(dependencies=[RequireToken])`.
RequireToken = Depends(require_token)
