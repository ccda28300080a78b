"""POST /v1/bundles (import, token-protected) and GET /v1/bundles (export): fleet sync."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import BaseModel

from api.deps import RequireToken, ServiceDep, SettingsDep
from api.schemas import READ_RESPONSES, WRITE_RESPONSES
from tuner.bundles import MEDIA_TYPE, BundleError
from tuner.signing import SIGNATURE_HEADER, sign, signature_refusal

router = APIRouter(prefix="/v1", tags=["bundles"])


class BundleImport(BaseModel):
    """What an import did: the bundle's record counts and how its measurements merged."""

    devices: int
    problems: int
    measurements: int
    added: int
    replaced: int
    unchanged: int
    older_ignored: int


_BUNDLE_BODY = {
    "required": True,
    "content": {MEDIA_TYPE: {"schema": {"type": "string"}}},
    "description": "A bundle as written by `convtune export` (JSON lines).",
}


@router.post(
    "/bundles",
    response_model=BundleImport,
    dependencies=[RequireToken],
    openapi_extra={"requestBody": _BUNDLE_BODY},
    responses={
        **WRITE_RESPONSES,
        400: {"description": "Not a valid convtune bundle (nothing was stored)."},
        401: {"description": f"Bad token, or (with a fleet key) a missing or invalid "
                             f"{SIGNATURE_HEADER}."},
    },
)
async def import_bundle_route(
    request: Request, facade: ServiceDep, settings: SettingsDep
) -> dict[str, Any]:
    """Merge a bundle into the server's store: newer measurements win, none is lost.

    The whole file is validated before anything is written; a corrupt, truncated or
    foreign file is refused with 400 and the store is left untouched. With a fleet key
    ($CONVTUNE_FLEET_KEY) the bundle must be signed with it (401 otherwise).
    """
    data = await request.body()
    if settings.fleet_key:
        refusal = signature_refusal(data, request.headers.get(SIGNATURE_HEADER),
                                    settings.fleet_key)
        if refusal is not None:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, refusal)
    try:
        return await run_in_threadpool(facade.import_bundle, data)
    except BundleError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None


@router.get(
    "/bundles",
    response_class=Response,
    responses={
        **READ_RESPONSES,
        200: {"content": {MEDIA_TYPE: {"schema": {"type": "string"}}},
              "description": "A bundle (JSON lines)."},
        404: {"description": "No stored device has a fingerprint starting with `device`."},
    },
)
def export_bundle_route(
    facade: ServiceDep,
    settings: SettingsDep,
    device: Annotated[
        str | None,
        Query(max_length=64, description="Only devices whose fingerprint starts with this."),
    ] = None,
) -> Response:
    """The server's measurements (or one device's) as a bundle for `convtune import`,
    signed with the pull key, else the fleet key, when the server has one."""
    try:
        data = facade.export_bundle(device=device).encode()
    except ValueError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    key = settings.pull_key or settings.fleet_key
    headers = {SIGNATURE_HEADER: sign(data, key)} if key else None
    return Response(data, media_type=MEDIA_TYPE, headers=headers)
