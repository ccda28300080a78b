"""GET /v1/devices: devices here and devices the database holds measurements for."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import SettingsDep, StoreDep
from api.schemas import DevicesResponse
from db import queries
from tuner.devices import cuda_available, identify, parse_device

router = APIRouter(prefix="/v1", tags=["devices"])


@router.get("/devices", response_model=DevicesResponse)
def devices(settings: SettingsDep, store: StoreDep) -> dict[str, Any]:
    """Devices this server can run on (with fingerprints) and those in the database."""
    ok, why = cuda_available()
    here = [identify("cpu")]
    if ok:
        here.append(identify(parse_device("cuda")))
    with store.session() as session:
        stored = queries.list_devices(session=session)
    return {
        "default": parse_device(settings.device),
        "here": [{"device": d.device, "fingerprint": d.fingerprint, "info": d.info} for d in here],
        "cuda": {"available": ok, "reason": why},
        "database": stored,
    }
