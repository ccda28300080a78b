"""GET /v1/devices: devices here and devices the database holds measurements for."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import ServiceDep, SettingsDep
from api.schemas import READ_RESPONSES, DevicesResponse

router = APIRouter(prefix="/v1", tags=["devices"])


@router.get("/devices", response_model=DevicesResponse, responses=READ_RESPONSES)
def devices(settings: SettingsDep, facade: ServiceDep) -> dict[str, Any]:
    """Devices this server can run on (with fingerprints) and those in the database."""
    return facade.devices(default=settings.device)
