"""GET /v1/algorithms: the registered algorithm names and the backends implementing them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from algorithms.registry import ALGORITHM_NAMES, BACKEND_MODULES, algorithms_for
from api.schemas import AlgorithmsResponse

router = APIRouter(prefix="/v1", tags=["algorithms"])


@router.get("/algorithms", response_model=AlgorithmsResponse)
def algorithms() -> dict[str, Any]:
    """Every algorithm name ever registered, with the backends that can run it here."""
    available: dict[str, list[str]] = {name: [] for name in ALGORITHM_NAMES}
    errors: dict[str, str] = {}
    for backend in BACKEND_MODULES:
        try:
            for algorithm in algorithms_for(backend):
                available[algorithm.name].append(backend)
        except Exception as exc:  # a backend that cannot load (no CuPy) is reported
            errors[backend] = f"{type(exc).__name__}: {exc}"
    return {"algorithms": available, "backend_errors": errors}
