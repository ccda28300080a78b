"""What the commands take: their options, and the parsing and checks of their values
before anything is opened (a bad value is one line and leaves no store behind)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from algorithms.problem import DIRECTIONS, ConvProblem
from tuner.devices import get_runtime, parse_device
from tuner.networks import NETWORKS, SYNTHETIC, network_problems
from tuner.onnx_shapes import onnx_problems
from tuner.service import MODES, check_url, default_url

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db", help="SQLAlchemy URL (default: $CONVTUNE_DB_URL or the user data directory)."
    ),
]
DeviceOpt = Annotated[
    str | None, typer.Option("--device", help="cpu, cuda or cuda:N (default: first GPU, else cpu).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
DtypeOpt = Annotated[
    str, typer.Option("--dtype", help="float32, float16, bfloat16 or float64.")
]
DirectionOpt = Annotated[
    str, typer.Option("--direction", help="forward, backward_data or backward_filter.")
]
MathOpt = Annotated[
    str, typer.Option("--math", help="fp32 (FP32-accurate) or tf32 (TF32 allowed; float32).")
]


def _mode(value: str) -> str:
    if value not in MODES:
        raise typer.BadParameter(f"must be one of {', '.join(MODES)}, got {value!r}")
    return value


ModeOpt = Annotated[str, typer.Option(
    "--mode", callback=_mode,
    help="auto (= exhaustive): the database, then measure what it lacks; cached: never "
         "measure; tune: measure everything again; fast: measure only the cost model's "
         "top k ($CONVTUNE_FAST_K, default 4), the best of its top k algorithms, then the "
         "winner's configurations predicted close to it; "
         "heuristic: never measure, predict.",
)]
LimitOpt = Annotated[
    int | None,
    typer.Option("--workspace-limit", help="Workspace limit in bytes (0: none allowed)."),
]


def parse_directions(text: str) -> tuple[str, ...]:
    """'all' -> every direction; 'forward,backward_data' -> those; ValueError otherwise."""
    if text.strip() == "all":
        return DIRECTIONS
    # Each once, in the order given: a repeated one ('forward,forward') tuned, printed and
    # counted every layer twice.
    chosen = tuple(dict.fromkeys(d.strip() for d in text.split(",")))
    unknown = [d for d in chosen if d not in DIRECTIONS]
    if unknown or not chosen:
        raise ValueError(f"--directions must be 'all' or a comma list of {list(DIRECTIONS)}, "
                         f"got {text!r}")
    return chosen


def parse_batches(text: str) -> list[int]:
    """'1,8,32' -> [1, 8, 32]; ValueError for anything that is not positive ints."""
    items = [b.strip() for b in text.split(",")]
    # Every item must be ASCII digits: an empty one ('1,,2', ',8,') is a typo, not a list
    # of fewer batch sizes (they were dropped silently), and int() would also take '+1',
    # '1_0' or other scripts' digits.
    try:
        if all(b.isascii() and b.isdigit() for b in items):
            batches = [int(b) for b in items]
            if min(batches) >= 1:
                return batches
    except ValueError:  # more digits than int() converts
        pass
    raise ValueError(f"--batch must be positive ints separated by commas, got {text!r}")


def stored_url(db: str | None) -> str:
    """The database URL (--db, else the default) of a command that only reads the store.

    Only commands that write create a store: a read of an SQLite file that is not there
    (a typo in --db, a default never written to) is an error, not an empty answer that
    leaves a stray empty store behind. In-memory SQLite, SQLite URIs (`file:...`) and
    other databases are left to the store to open or refuse.
    """
    url = db or default_url()
    parsed = check_url(url)  # unparsable or unsupported: the error opening it would give
    database = parsed.database
    if (parsed.get_backend_name() != "sqlite" or not database or database == ":memory:"
            or database.startswith("file:")):
        return url
    path = Path(database).expanduser()
    if not path.exists():
        raise ValueError(f"no database at {path} (nothing has been stored there yet)")
    return url


def usable_device(device: str | None) -> str:
    """The canonical device of --device, refused now if it cannot run here.

    Checked before the store is opened or any progress is shown: a device found unusable
    midway printed several lines and left a new store behind.
    """
    dev = parse_device(device)
    get_runtime(dev)  # ValueError (backend unavailable, no such index); cached for the run
    return dev


def network_work(model: str | None, onnx: Path | None, batch: str, dtype: str, math: str,
                 directions: str) -> list[tuple[int, str, ConvProblem]]:
    """(batch, layer, problem) of each convolution of a network (--model or --onnx) at each
    batch size and direction, as `tune` and `warm` take them."""
    if (model is None) == (onnx is None):
        raise ValueError("give exactly one of --model NAME or --onnx PATH")
    batches = parse_batches(batch)
    work: list[tuple[int, str, ConvProblem]] = []
    for b in batches:
        if onnx is not None:
            found, warnings = onnx_problems(onnx, b)
            for warning in warnings if b == batches[0] else []:
                print(f"convtune: warning: {warning}", file=sys.stderr)
            # --math applies to the model's float32 convolutions (TF32 has no other dtype).
            work += [(b, name, replace(p, math=math) if p.dtype == "float32" else p)
                     for name, p in found]
        else:
            layers = network_problems(str(model), b, dtype, math)
            work += [(b, layer.name, p) for layer, p in layers]
    wanted = parse_directions(directions)
    return [(b, layer, replace(p, direction=d)) for b, layer, p in work for d in wanted]


ModelOpt = Annotated[
    str | None, typer.Option("--model", help=f"Built-in network: {', '.join(NETWORKS)}; or "
                             f"{', '.join(SYNTHETIC)} (synthetic layers for the cost model).")
]
OnnxOpt = Annotated[
    Path | None,
    typer.Option("--onnx", help="ONNX model: its 2-D Conv nodes (dtype from the model)."),
]
BatchOpt = Annotated[str, typer.Option("--batch", help="Batch size(s), e.g. 8 or 1,8,32.")]
DirectionsOpt = Annotated[str, typer.Option(
    "--directions", help="forward (default), all, or a comma list of directions.")
]
