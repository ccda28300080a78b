"""The FastAPI application factory: `uvicorn --factory api.app:create_app`."""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.admission import Slots
from api.deps import read_tokens, token_refusal, write_tokens
from api.jobs import JobManager
from api.metrics import Metrics, MetricsMiddleware
from api.routes import algorithms, bundles, convolve, devices, find, health, jobs, results
from api.settings import Settings, check_config
from tuner.errors import ClaimTimeout, DeviceFault, NotInDatabase, NoUsableAlgorithm
from tuner.service import StoreReadOnly, StoreUnusable
from tuner.version import TUNER_VERSION

log = logging.getLogger("convtune.api")

#: Every router of the service; a new resource adds its router here.
ROUTERS: list[APIRouter] = [
    find.router,
    convolve.router,
    results.router,
    devices.router,
    algorithms.router,
    jobs.router,
    health.router,
    bundles.router,
]


class BodyTooLarge(HTTPException):
    """The request body passed the configured limit while it was being read."""


#: Routes of the write scope (they tune, run work or change the store); other /v1 routes
#: are reads. A find may tune too: its route checks the write scope unless its mode never
#: measures (cached, heuristic).
WRITE_ROUTES = ("/v1/convolve", "/v1/jobs", "/v1/bundles")
#: Reads that stay open whatever the tokens: health, metrics and the documentation.
OPEN_ROUTES = ("/healthz", "/metrics", "/docs", "/redoc", "/openapi.json", "/static-docs/")
#: Where the documentation pages' scripts and styles are served from (not a CDN).
DOCS_STATIC = "/static-docs"


class TokenGateMiddleware:
    """401 before any body is read: the write scope for POSTs that change things, the read
    scope for the rest of /v1. A multipart upload is thus never parsed for a client without
    the token (it was, up to the body limit, before the route's own check)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(OPEN_ROUTES):
            await self.app(scope, receive, send)
            return
        writes = scope["method"] == "POST" and scope["path"].startswith(WRITE_ROUTES)
        tokens = write_tokens(self.settings) if writes else read_tokens(self.settings)
        given = None
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                kind, _, credential = value.decode("latin-1").partition(" ")
                given = credential.strip() if kind.lower() == "bearer" else None
        refusal = token_refusal(given, tokens)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        response = JSONResponse({"detail": refusal}, status.HTTP_401_UNAUTHORIZED,
                                headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


class BodyLimitMiddleware:
    """413 for bodies over `max_bytes`: from Content-Length up front, else while reading."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _message(self, size: str) -> str:
        return (f"request body {size} exceeds the limit of {self.max_bytes} bytes "
                "(CONVTUNE_MAX_BODY_BYTES)")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = -1
                if length < 0:
                    await _send_json(send, 400, "invalid Content-Length header")
                    return
                if length > self.max_bytes:
                    await _send_json(send, 413, self._message(f"of {length} bytes"))
                    return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(413, self._message(f"of more than {seen - 1} bytes"))
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge as exc:
            if started:
                raise
            await _send_json(send, 413, str(exc.detail))


async def _send_json(send: Send, code: int, detail: str) -> None:
    response = JSONResponse({"detail": detail}, status_code=code)
    body = response.body
    await send({"type": "http.response.start", "status": code, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": body})


def json_safe(value: Any) -> Any:
    """`value` with every non-finite float (NaN, Infinity) spelled out as a string."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


_VERBS = ("delete", "get", "head", "options", "patch", "post", "put", "trace")


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the app's routes take on `path`, read from its OpenAPI paths (the
    routers' own structures are FastAPI's internals)."""
    methods: set[str] = set()
    for template, item in app.openapi()["paths"].items():
        if compile_path(template)[0].match(path):
            methods.update(verb.upper() for verb in item if verb in _VERBS)
    return sorted(methods)


def _install_error_handlers(app: FastAPI) -> None:
    """The library's errors become 4xx with its message; anything else a JSON 500."""

    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own handler, except that the inputs it echoes are made JSON-safe: Python's
        # JSON parser reads NaN, Infinity and 1e400 (as inf), and echoing one failed to
        # render, which left a 422 "Out of range float values" that named no field.
        return JSONResponse({"detail": json_safe(jsonable_encoder(exc.errors()))},
                            status.HTTP_422_UNPROCESSABLE_CONTENT)

    async def bad_input(_request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status.HTTP_422_UNPROCESSABLE_CONTENT)

    async def not_stored(_request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status.HTTP_404_NOT_FOUND)

    async def none_usable(_request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status.HTTP_409_CONFLICT)

    async def busy(_request: Request, exc: Exception) -> JSONResponse:
        # Another tuner holds the claim on this problem and has not finished in time.
        return JSONResponse(
            {"detail": str(exc)}, status.HTTP_503_SERVICE_UNAVAILABLE, headers={"Retry-After": "30"}
        )

    async def device_lost(_request: Request, exc: Exception) -> JSONResponse:
        # The GPU context of this process is gone; only a restart brings the device back.
        log.error("device fault: %s", exc)
        return JSONResponse({"detail": str(exc)}, status.HTTP_503_SERVICE_UNAVAILABLE)

    async def store_broken(_request: Request, exc: Exception) -> JSONResponse:
        # The server's database is unusable (foreign, corrupt, unreachable): say what is
        # wrong, on one line, rather than a bare "internal error".
        log.error("database error: %s", exc)
        text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        detail = text[0] if text else type(exc).__name__
        return JSONResponse({"detail": f"database error: {detail}"},
                            status.HTTP_503_SERVICE_UNAVAILABLE)

    async def read_only(_request: Request, exc: Exception) -> JSONResponse:
        # A fleet's shared cache served read-only: the request asked for a measurement or a
        # write. The client is told what it can ask; the store's location stays in the log.
        log.info("refused a write: %s", exc)
        return JSONResponse({"detail": "this server's store is read-only: it answers what it "
                             "holds (mode 'cached' or 'heuristic', or a problem it has "
                             "measured), but cannot measure, import or record anything"},
                            status.HTTP_403_FORBIDDEN)

    async def http_error(request: Request, exc: Exception) -> Response:
        # Starlette's 405 names the methods of the first route of the path only (POST for
        # /v1/bundles, which also has GET); RFC 9110 asks for every method the path takes.
        assert isinstance(exc, HTTPException)
        if exc.status_code == status.HTTP_405_METHOD_NOT_ALLOWED:
            allowed = allowed_methods(request.app, request.url.path)
            if allowed:
                exc.headers = {**(exc.headers or {}), "Allow": ", ".join(allowed)}
        return await http_exception_handler(request, exc)  # type: ignore[arg-type]

    async def client_gone(request: Request, _exc: Exception) -> JSONResponse:
        # The client left, or its body missed its deadline (api.protocol): nobody reads this.
        log.info("client disconnected during %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "request timeout"}, status.HTTP_408_REQUEST_TIMEOUT)

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return JSONResponse(
            {"detail": f"internal error: {type(exc).__name__}"},
            status.HTTP_500_INTERNAL_SERVER_ERROR,
        )

    # Starlette types every handler as taking any Exception; this one is only given its own.
    app.add_exception_handler(RequestValidationError, invalid_request)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(ValueError, bad_input)
    app.add_exception_handler(NotInDatabase, not_stored)
    app.add_exception_handler(NoUsableAlgorithm, none_usable)
    app.add_exception_handler(ClaimTimeout, busy)
    app.add_exception_handler(DeviceFault, device_lost)
    app.add_exception_handler(StoreReadOnly, read_only)
    app.add_exception_handler(StoreUnusable, store_broken)
    app.add_exception_handler(SQLAlchemyError, store_broken)
    app.add_exception_handler(ClientDisconnect, client_gone)
    app.add_exception_handler(Exception, unexpected)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service: settings (default: from the environment), routers, middleware."""
    settings = settings or Settings.from_env()
    # An unusable configuration is refused here, in one line naming the setting (`convtune
    # serve` prints it and exits), not reported to every client as its own mistake.
    check_config(settings)
    metrics = Metrics()
    job_manager = JobManager(
        db_url=settings.db_url, metrics=metrics, workers=settings.job_workers,
        max_jobs=settings.max_jobs, kept=settings.jobs_kept,
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        job_manager.shutdown()

    # FastAPIOffline: /docs and /redoc load their scripts from this server, not a CDN, so
    # they work on hosts without internet access (the pages were blank there).
    app = FastAPIOffline(
        static_url=DOCS_STATIC,
        # Swagger UI's default validator badge is an image from validator.swagger.io.
        swagger_ui_parameters={"validatorUrl": None},
        title="convtune",
        version=TUNER_VERSION,
        summary="Pick the fastest convolution algorithm for a problem on a device, and run it.",
        description=(
            "POST endpoints need `Authorization: Bearer <token>` when the server sets "
            "$CONVTUNE_API_TOKEN; GET endpoints under /v1 (and cached finds) need it or "
            "$CONVTUNE_READ_TOKEN when that is set, and are open otherwise. Errors are JSON "
            "`{\"detail\": ...}`: 400 corrupt upload, 401 token, 403 a measurement or "
            "write asked of a read-only store, 404 not stored / no such job, 409 no usable "
            "algorithm (convolve), 413 too large, 422 invalid input, 429 job queue full, "
            "503 another tuner still holds this problem's claim."
        ),
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.jobs = job_manager
    app.state.slots = Slots(settings.max_running)
    for router in ROUTERS:
        app.include_router(router)
    _install_error_handlers(app)
    # Added last = outermost: metrics see every response, the 413s of the limit included.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(TokenGateMiddleware, settings=settings)  # before any body is read
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
