"""GET /healthz and GET /metrics (Prometheus text)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import MetricsDep
from api.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
async def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text."}},
)
def metrics(metrics: MetricsDep) -> Response:
    """Requests, latency, tunings and find cache hits in Prometheus text format."""
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
