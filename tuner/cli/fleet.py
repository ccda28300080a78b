"""Fleet commands: export, import, push, pull (bundles of measurements between stores)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from db.engine import open_store
from tuner.bundles import export_bundle, import_bundle
from tuner.cli import app
from tuner.cli.core import DbOpt
from tuner.fleet import pull_bundle, push_bundle

ExportDeviceOpt = Annotated[
    str | None,
    typer.Option("--device", help="Only devices whose fingerprint starts with this."),
]
ServerOpt = Annotated[
    str, typer.Option("--server", help="URL of a running `convtune serve`, e.g. http://host:8000.")
]


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def _summary(counts: dict[str, Any]) -> str:
    return (
        f"{counts.get('measurements', 0)} measurements of {counts.get('devices', 0)} devices: "
        f"{counts.get('added', 0)} added, {counts.get('replaced', 0)} replaced by newer, "
        f"{counts.get('unchanged', 0)} unchanged, "
        f"{counts.get('older_ignored', 0)} older than stored (kept ours)"
    )


@app.command()
def export(
    db: DbOpt = None,
    device: ExportDeviceOpt = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
) -> None:
    """Write the store's measurements as a bundle (JSON lines) to stdout or --output."""
    text = export_bundle(open_store(db), device=device)
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        output.write_text(text, encoding="utf-8")
    measurements = text.count('"type":"measurement"')
    _say(f"exported {measurements} measurements" + (f" to {output}" if output else ""))


@app.command("import")
def import_(
    bundle: Annotated[str, typer.Argument(help="Bundle file to merge ('-' reads stdin).")],
    db: DbOpt = None,
) -> None:
    """Merge a bundle into the store: newer measurements win, nothing newer is lost."""
    data = sys.stdin.buffer.read() if bundle == "-" else Path(bundle).read_bytes()
    counts = import_bundle(open_store(db), data)
    _say(f"imported {_summary(counts)}")


@app.command()
def push(
    server: ServerOpt,
    token: Annotated[
        str | None,
        typer.Option("--token", help="API token (default: $CONVTUNE_API_TOKEN)."),
    ] = None,
    db: DbOpt = None,
    device: ExportDeviceOpt = None,
) -> None:
    """Send the store's measurements (or one device's) to a convtune server."""
    counts = push_bundle(server, export_bundle(open_store(db), device=device), token=token)
    _say(f"pushed to {server}: {_summary(counts)}")


@app.command()
def pull(server: ServerOpt, db: DbOpt = None, device: ExportDeviceOpt = None) -> None:
    """Fetch a convtune server's measurements (or one device's) and merge them here."""
    counts = import_bundle(open_store(db), pull_bundle(server, device=device))
    _say(f"pulled from {server}: {_summary(counts)}")
