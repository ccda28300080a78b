"""Core commands: find, tune, results, prune, devices, algorithms."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from algorithms.problem import ConvProblem, parse_pair
from tuner.candidates import validate_workspace_limit
from tuner.cli import app
from tuner.cli.arguments import (
    BatchOpt,
    DbOpt,
    DeviceOpt,
    DirectionOpt,
    DirectionsOpt,
    DtypeOpt,
    JsonOpt,
    LimitOpt,
    MathOpt,
    ModelOpt,
    ModeOpt,
    OnnxOpt,
    network_work,
    stored_url,
    usable_device,
)
from tuner.cli.tables import stored_results_table
from tuner.quiet import periodic
from tuner.results import AlgorithmResult
from tuner.service import Service, service


def stdout() -> Console:
    """A console on stdout; wide when piped, so tables stay greppable instead of folded,
    unless $COLUMNS says how wide."""
    return Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def results_table(results: list[AlgorithmResult], title: str) -> Table:
    """A ranked table of find results."""
    table = Table(title=title)
    for column in (
        "#",
        "algorithm",
        "config",
        "status",
        "time ms",
        "workspace",
        "rel error",
        "source",
        "note",
    ):
        table.add_column(column, overflow="fold")
    for i, r in enumerate(results, 1):
        table.add_row(
            str(i),
            r.algorithm,
            r.config,
            r.status,
            _ms(r.time_ms),
            f"{r.workspace_bytes:,}",
            "-" if r.rel_error is None else f"{r.rel_error:.1e}",
            r.source,
            r.error or r.note or "",
        )
    return table


@app.command()
def find(
    n: Annotated[int, typer.Option("--n", help="Batch size.")],
    c: Annotated[int, typer.Option("--c", help="Input channels.")],
    h: Annotated[int, typer.Option("--h", help="Input height.")],
    w: Annotated[int, typer.Option("--w", help="Input width.")],
    k: Annotated[int, typer.Option("--k", help="Output channels.")],
    r: Annotated[int, typer.Option("--r", help="Filter height.")],
    s: Annotated[int, typer.Option("--s", help="Filter width.")],
    pad: Annotated[str, typer.Option("--pad", help="Padding: P or PH,PW.")] = "0",
    stride: Annotated[str, typer.Option("--stride", help="Stride: S or SH,SW.")] = "1",
    dilation: Annotated[str, typer.Option("--dilation", help="Dilation: D or DH,DW.")] = "1",
    groups: Annotated[int, typer.Option("--groups")] = 1,
    dtype: DtypeOpt = "float32",
    math: MathOpt = "fp32",
    direction: DirectionOpt = "forward",
    workspace_limit: LimitOpt = None,
    device: DeviceOpt = None,
    db: DbOpt = None,
    mode: ModeOpt = "auto",
    as_json: JsonOpt = False,
) -> None:
    """Rank every algorithm for one convolution (measuring what the database lacks)."""
    problem = ConvProblem(
        n=n,
        c=c,
        h=h,
        w=w,
        k=k,
        r=r,
        s=s,
        pad=parse_pair(pad, "--pad"),
        stride=parse_pair(stride, "--stride"),
        dilation=parse_pair(dilation, "--dilation"),
        groups=groups,
        dtype=dtype,
        math=math,
        direction=direction,
    )
    # Every argument is checked before the store is opened (or created): a bad one is one
    # line, with no "database ..." line before it and no new store after it.
    validate_workspace_limit(workspace_limit)
    dev = usable_device(device)
    facade = service(db)
    print(f"convtune: database {facade.location}", file=sys.stderr)
    results = facade.find(problem, dev, workspace_limit, mode=mode)
    if as_json:
        print(
            json.dumps(
                {
                    "problem": problem.key(),
                    "device": dev,
                    "results": [r.as_dict() for r in results],
                },
                indent=2,
            )
        )
        return
    stdout().print(results_table(results, f"{problem.describe()} on {dev}"))


@app.command()
def tune(
    model: ModelOpt = None,
    onnx: OnnxOpt = None,
    batch: BatchOpt = "1",
    dtype: DtypeOpt = "float32",
    math: MathOpt = "fp32",
    directions: DirectionsOpt = "forward",
    workspace_limit: LimitOpt = None,
    device: DeviceOpt = None,
    db: DbOpt = None,
    mode: ModeOpt = "auto",
    as_json: JsonOpt = False,
) -> None:
    """Tune every distinct convolution of a network (--model or --onnx), print the winners."""
    work = network_work(model, onnx, batch, dtype, math, directions)
    model = model or onnx.name  # type: ignore[union-attr]
    # Checked before the store is opened and the progress bar drawn (its last state was
    # left above the error): a bad argument is one line and creates nothing.
    validate_workspace_limit(workspace_limit)
    dev = usable_device(device)
    facade = service(db)
    print(f"convtune: database {facade.location}", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=as_json,
        auto_refresh=False,  # rich's own refresh thread would render while we time
    ) as progress, periodic(progress.refresh, 0.25, "convtune-progress"):
        task = progress.add_task(f"tuning {model} on {dev}", total=len(work))
        for b, layer, problem in work:
            progress.update(task, description=f"{model} n={b} {layer}")
            best = facade.best(problem, dev, workspace_limit, mode=mode)
            rows.append(
                {
                    "batch": b,
                    "layer": layer,
                    "problem": problem.key(),
                    "describe": problem.describe(),
                    **best.as_dict(),
                }
            )
            progress.advance(task)
    elapsed = time.perf_counter() - started
    if as_json:
        print(json.dumps({"model": model, "device": dev, "results": rows}, indent=2))
        return
    table = Table(title=f"{model} on {dev}: best algorithm per convolution")
    for column in ("batch", "layer", "problem", "best", "config", "time ms", "workspace", "source"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            str(row["batch"]),
            row["layer"],
            row["describe"],
            row["algorithm"],
            row["config"],
            _ms(row["time_ms"]),
            f"{row['workspace_bytes']:,}",
            row["source"],
        )
    stdout().print(table)
    fresh = sum(row["source"] == "fresh" for row in rows)
    wins: dict[str, int] = {}
    for row in rows:
        wins[row["algorithm"]] = wins.get(row["algorithm"], 0) + 1
    predicted = sum(row["source"] == "predicted" for row in rows)
    guessed = f", {predicted} predicted" if predicted else ""
    stdout().print(
        f"{len(rows)} convolutions ({fresh} measured now, "
        f"{len(rows) - fresh - predicted} from the database{guessed}) in {elapsed:.1f} s; wins: "
        + ", ".join(
            f"{name} {count}" for name, count in sorted(wins.items(), key=lambda kv: -kv[1])
        )
    )


@app.command()
def results(
    device: Annotated[
        str | None, typer.Option("--device", help="Device fingerprint (or a prefix of one).")
    ] = None,
    algorithm: Annotated[str | None, typer.Option("--algorithm")] = None,
    status: Annotated[str | None, typer.Option("--status")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 50,
    offset: Annotated[int, typer.Option("--offset", min=0)] = 0,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the measurements the database holds, newest first."""
    filters = {"device": device, "algorithm": algorithm, "status": status}
    total, page = service(stored_url(db)).results(filters, limit=limit, offset=offset)
    if as_json:
        print(json.dumps({"total": total, "offset": offset, "results": page}, indent=2))
        return
    console = stdout()
    console.print(stored_results_table(total, offset, page, console.width))


@app.command()
def prune(
    stale: Annotated[bool, typer.Option(
        "--stale", help="Measurements of older convtune code: this version never reads them "
        "(hosts of other versions sharing the store do, and the cost model learns from them).",
    )] = False,
    older_than: Annotated[float | None, typer.Option(
        "--older-than", min=0, help="Measured more than this many days ago.")] = None,
    device: Annotated[str | None, typer.Option(
        "--device", help="Of devices whose fingerprint starts with this.")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Delete them (else only count them).")
                   ] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete the stored measurements matching every criterion given (counted only, without
    --yes)."""
    pruned, unjudged = service(stored_url(db)).prune(device=device, older_than_days=older_than,
                                                     stale=stale, delete=yes)
    for backend, why in unjudged.items():  # its rows are never called stale
        print(f"convtune: note: the {backend} backend cannot load here ({why}): its "
              "measurements were left alone", file=sys.stderr)
    if as_json:
        print(json.dumps(asdict(pruned)))
        return
    done = "deleted" if yes else "would delete"
    hint = "; run again with --yes to delete them" if pruned.matched and not yes else ""
    print(f"{done} {pruned.matched} of {pruned.total} measurements{hint}")


@app.command()
def devices(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Show the devices here and the devices the database holds measurements for."""
    listing = service(stored_url(db)).devices()
    if as_json:
        listing.pop("default")
        print(json.dumps(listing, indent=2))
        return
    here, stored = listing["here"], listing["database"]
    ok, why = listing["cuda"]["available"], listing["cuda"]["reason"]
    table = Table(title="devices")
    for column in ("where", "fingerprint", "kind", "name", "arch", "units", "measurements"):
        table.add_column(column, overflow="fold")
    counts = {d["fingerprint"]: d["measurements"] for d in stored}
    for d in here:
        info = d["info"]
        table.add_row(
            d["device"],
            d["fingerprint"],
            info["kind"],
            info["name"],
            str(info["arch"]),
            str(info["units"]),
            str(counts.get(d["fingerprint"], 0)),
        )
    local = {d["fingerprint"] for d in here}
    for row in stored:
        if row["fingerprint"] not in local:
            table.add_row(
                "database",
                row["fingerprint"],
                row["kind"],
                row["name"],
                row["arch"],
                str(row["units"]),
                str(row["measurements"]),
            )
    stdout().print(table)
    if not ok:
        stdout().print(f"no GPU: {why}")


@app.command()
def algorithms(as_json: JsonOpt = False) -> None:
    """List the registered algorithms and the backends that implement them."""
    listing = Service.algorithms()
    available, problems = listing["algorithms"], listing["backend_errors"]
    if as_json:
        print(json.dumps(listing, indent=2))
        return
    table = Table(title="algorithms")
    table.add_column("name")
    table.add_column("backends")
    for name, backends in available.items():
        table.add_row(name, ", ".join(backends) or "-")
    stdout().print(table)
    for backend, error in problems.items():
        stdout().print(f"backend {backend} unavailable: {error}")
