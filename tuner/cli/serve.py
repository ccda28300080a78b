"""`convtune serve`: the HTTP API under uvicorn."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import sys
import tempfile
from typing import Annotated, Any

import typer

from tuner.cli import app
from tuner.cli.arguments import DbOpt, DeviceOpt
from tuner.devices import parse_device
from tuner.env import http_timeouts
from tuner.service import default_url, describe_url

# The HTTP layer sits on top of the tuner: it is imported by name (as uvicorn does), never
# by an import statement of the CLI.
APP_FACTORY = "api.app:create_app"
#: uvicorn's h11 protocol with TCP_NODELAY per connection (see api/protocol.py).
HTTP_PROTOCOL = "api.protocol:NoDelayH11Protocol"
#: prometheus_client's multiprocess directory (api.metrics reads the same variable).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: uvicorn's log levels (uvicorn.config.LOG_LEVELS), listed here so that a bad one is a
#: usage error before uvicorn is imported (it was a bare KeyError: "convtune: error: 'x'").
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def _log_level(value: str) -> str:
    if value not in LOG_LEVELS:
        raise typer.BadParameter(f"must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return value


def _build_app() -> Any:
    """The API app, built here from the environment the workers will read.

    The server's own misconfiguration (a bad database URL, bad $CONVTUNE_* variables) is
    thus one line and exit 1 now; built only inside uvicorn, it started a server on which
    every request failed.
    """
    from uvicorn.importer import import_from_string

    return import_from_string(APP_FACTORY)()


def _check_listen(host: str, port: int) -> None:
    """OSError (one line) unless `host:port` can be bound, as uvicorn binds it.

    uvicorn reported a port in use or a bad host with its log lines and exit 3, never the
    CLI's one-line error. The socket is closed again at once, with SO_REUSEADDR (uvicorn
    sets it too) so that closing it leaves nothing in the way of uvicorn's bind.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except OSError as exc:  # socket.gaierror (a bad host) included
        reason = exc.strerror or str(exc)
        raise OSError(f"cannot listen on {host}:{port}: {reason[:1].lower()}{reason[1:]}") \
            from None


def _loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only (a name other than localhost is
    taken as reachable from others: it is not resolved here)."""
    name = host.lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        try:  # IPv4's short forms as the socket layer reads them ("127.1")
            address = ipaddress.IPv4Address(socket.inet_aton(name))
        except OSError:
            return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _check_writes_guarded(host: str, allow_open: bool, token: str | None) -> None:
    """ValueError (one line) for a server others could reach whose writes need no token.

    A review of security (2026-11-30): `serve --host 0.0.0.0` without $CONVTUNE_API_TOKEN
    started silently, and anyone who could reach it could tune for an hour a request or
    push bundles that every host pulling from it then served.
    """
    if not (_loopback(host) or allow_open or token):
        raise ValueError(f"--host {host} can be reached from other machines and "
                         "$CONVTUNE_API_TOKEN is not set, so anyone could tune, convolve and "
                         "push bundles: set it, or pass --allow-open-writes")


@app.command()
def serve(
    host: Annotated[
        str, typer.Option("--host", help="Address to bind (default: loopback only).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8000,
    db: DbOpt = None,
    device: DeviceOpt = None,
    workers: Annotated[
        int, typer.Option("--workers", min=1, max=64, help="uvicorn worker processes.")
    ] = 1,
    log_level: Annotated[str, typer.Option(
        "--log-level", callback=_log_level, help=f"One of {', '.join(LOG_LEVELS)}.",
    )] = "info",
    allow_open_writes: Annotated[bool, typer.Option(
        "--allow-open-writes",
        help="Serve beyond loopback without $CONVTUNE_API_TOKEN (a trusted network only).",
    )] = False,
) -> None:
    """Serve the HTTP API (POST /v1/find, /v1/convolve, /v1/jobs; GET /v1/results, ...).

    Settings come from $CONVTUNE_* (CONVTUNE_API_TOKEN, CONVTUNE_READ_TOKEN,
    CONVTUNE_FLEET_KEY, CONVTUNE_PULL_KEY, CONVTUNE_MAX_BODY_BYTES,
    CONVTUNE_HEADER_TIMEOUT_S, CONVTUNE_BODY_TIMEOUT_S, ...);
    --db and --device override CONVTUNE_DB_URL and CONVTUNE_DEVICE.
    """
    import uvicorn

    # The factory reads its settings from the environment, which worker processes inherit.
    if db:
        os.environ["CONVTUNE_DB_URL"] = db
    if device:
        os.environ["CONVTUNE_DEVICE"] = parse_device(device)
    http_timeouts()  # a malformed $CONVTUNE_*_TIMEOUT_S: one line now, not per connection
    # Built before $PROMETHEUS_MULTIPROC_DIR is set below: this process serves no requests
    # (with several workers), so its metrics must not be kept in that directory.
    served = _build_app()
    _check_listen(host, port)
    _check_writes_guarded(host, allow_open_writes, served.state.settings.api_token)
    print(f"convtune: database {describe_url(os.environ.get('CONVTUNE_DB_URL') or default_url())}",
          file=sys.stderr)
    # Several workers are several processes: their metrics are summed through files in a
    # fresh directory (a reused one would add a previous server's counts). Each process
    # builds its own app from the factory; one worker serves the app checked above.
    metrics_dir = None
    if workers > 1 and not os.environ.get(MULTIPROC_ENV):
        metrics_dir = os.environ[MULTIPROC_ENV] = tempfile.mkdtemp(prefix="convtune-metrics-")
    try:
        uvicorn.run(
            served if workers == 1 else APP_FACTORY, factory=workers > 1, host=host, port=port,
            workers=workers, log_level=log_level, http=HTTP_PROTOCOL,
        )
    finally:
        if metrics_dir is not None:
            del os.environ[MULTIPROC_ENV]
            shutil.rmtree(metrics_dir, ignore_errors=True)
