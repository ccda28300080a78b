"""GET /healthz and GET /metrics (Prometheus text)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from api.deps import MetricsDep, SettingsDep
from api.metrics import exposition
from api.schemas import Health
from tuner.devices import parse_device
from tuner.service import Service

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health,
            responses={503: {"model": Health, "description": "The server's device is missing."}})
async def healthz(settings: SettingsDep) -> JSONResponse:
    """The process answers; 503 when the server's device cannot run work (serve --device
    cuda:0 on a host without a usable GPU used to report healthy, then answer 422).

    It opens no store: an unusable one made this open route answer another body than its
    schema's, with the store's path in it (a review of the API, 2026-11-30)."""
    device = parse_device(settings.device)
    ok, why = Service.availability(device)
    body = {"status": "ok" if ok else "unavailable", "device": device,
            "reason": None if ok else why}
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text."}},
)
def metrics(metrics: MetricsDep) -> Response:
    """Requests, latency, tunings and find cache hits in Prometheus text format (summed
    over every worker process under `serve --workers N`)."""
    return Response(exposition(metrics.registry), media_type=CONTENT_TYPE_LATEST)
