"""GET /v1/algorithms: the registered algorithm names and the backends implementing them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.schemas import READ_RESPONSES, AlgorithmsResponse
from tuner.service import Service

router = APIRouter(prefix="/v1", tags=["algorithms"])


@router.get("/algorithms", response_model=AlgorithmsResponse, responses=READ_RESPONSES)
def algorithms() -> dict[str, Any]:
    """Every algorithm name ever registered, with the backends that can run it here."""
    return Service.algorithms()
