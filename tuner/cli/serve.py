"""`convtune serve`: the HTTP API under uvicorn."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Annotated

import typer

from tuner.cli import app
from tuner.cli.core import DbOpt, DeviceOpt
from tuner.devices import parse_device
from tuner.env import http_timeouts
from tuner.service import default_url, describe_url

# The HTTP layer sits on top of the tuner: uvicorn imports it by name, the CLI never does.
APP_FACTORY = "api.app:create_app"
#: uvicorn's h11 protocol with TCP_NODELAY per connection (see api/protocol.py).
HTTP_PROTOCOL = "api.protocol:NoDelayH11Protocol"
#: prometheus_client's multiprocess directory (api.metrics reads the same variable).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


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
    log_level: Annotated[str, typer.Option("--log-level")] = "info",
) -> None:
    """Serve the HTTP API (POST /v1/find, /v1/convolve, /v1/jobs; GET /v1/results, ...).

    Settings come from $CONVTUNE_* (CONVTUNE_API_TOKEN, CONVTUNE_MAX_BODY_BYTES,
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
    print(f"convtune: database {describe_url(os.environ.get('CONVTUNE_DB_URL') or default_url())}",
          file=sys.stderr)
    # Several workers are several processes: their metrics are summed through files in a
    # fresh directory (a reused one would add a previous server's counts).
    metrics_dir = None
    if workers > 1 and not os.environ.get(MULTIPROC_ENV):
        metrics_dir = os.environ[MULTIPROC_ENV] = tempfile.mkdtemp(prefix="convtune-metrics-")
    try:
        uvicorn.run(
            APP_FACTORY, factory=True, host=host, port=port, workers=workers,
            log_level=log_level, http=HTTP_PROTOCOL,
        )
    finally:
        if metrics_dir is not None:
            del os.environ[MULTIPROC_ENV]
            shutil.rmtree(metrics_dir, ignore_errors=True)
