"""Fleet commands: export, import, push, pull (bundles of measurements between stores), and
warm (a machine's kernels built before its first tuning or plan)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tuner.cli import app
from tuner.cli.core import (
    BatchOpt,
    DbOpt,
    DeviceOpt,
    DirectionsOpt,
    DtypeOpt,
    MathOpt,
    ModelOpt,
    OnnxOpt,
    network_work,
)
from tuner.devices import parse_device
from tuner.fleet import pull_bundle, push_bundle
from tuner.service import service
from tuner.warming import warm as warm_kernels

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
    text = service(db).export_bundle(device=device)
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
    counts = service(db).import_bundle(data)
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
    counts = push_bundle(server, service(db).export_bundle(device=device), token=token)
    _say(f"pushed to {server}: {_summary(counts)}")


@app.command()
def pull(server: ServerOpt, db: DbOpt = None, device: ExportDeviceOpt = None) -> None:
    """Fetch a convtune server's measurements (or one device's) and merge them here."""
    counts = service(db).import_bundle(pull_bundle(server, device=device))
    _say(f"pulled from {server}: {_summary(counts)}")


@app.command()
def warm(
    model: ModelOpt = None,
    onnx: OnnxOpt = None,
    batch: BatchOpt = "1",
    dtype: DtypeOpt = "float32",
    math: MathOpt = "fp32",
    directions: DirectionsOpt = "forward",
    device: DeviceOpt = None,
) -> None:
    """Compile a network's GPU kernels ahead, several at once, into the kernel cache."""
    work = network_work(model, onnx, batch, dtype, math, directions)
    dev = parse_device(device)
    problems = [problem for _, _, problem in work]
    done = warm_kernels(problems, dev)
    _say(f"convtune: {done.built} kernel instances built for {len(set(problems))} convolutions "
         f"on {dev} in {done.seconds:.1f} s ({done.threads} threads at most)")
    for failure in done.failed[:5]:
        _say(f"convtune: warning: not built: {failure}")
    if len(done.failed) > 5:
        _say(f"convtune: warning: {len(done.failed) - 5} more not built")
