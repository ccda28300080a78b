"""The stored-results table of `convtune results`, laid out to stay readable at 80 columns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.table import Table

from algorithms.problem import ConvProblem

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def human_bytes(count: int) -> str:
    """`count` bytes in binary units with three significant digits: 0 B, 512 B, 118 MiB."""
    value, unit = float(count), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    if unit == 0:
        return f"{count} B"
    return f"{value:.3g} {_UNITS[unit]}" if value < 1000 else f"{value:.0f} {_UNITS[unit]}"


#: Consoles at least this wide get one column per field; narrower ones the compact layout.
WIDE = 120


def stored_results_table(
    total: int, offset: int, page: Sequence[dict[str, Any]], width: int
) -> Table:
    """One row per stored measurement, laid out for a console `width` columns wide.

    Below WIDE, eight columns of rules and padding would leave some a few characters each,
    so fields that belong together share a cell on two lines (device over measured time,
    algorithm over config; the status stands in for the time when it is not ok): five
    columns, text folded, numbers never wrapped, so every field stays whole at 80 columns.
    """
    # An empty page (an empty store, or an offset past its end) shows no rows: 0-0.
    shown = f"{offset + 1}-{offset + len(page)}" if page else "0-0"
    table = Table(
        title=f"{total} measurements (showing {shown})",
        box=box.SIMPLE_HEAD, show_edge=False,
    )
    wide = width >= WIDE
    if wide:
        names = ["device", "problem", "algorithm", "config", "status", "ms", "workspace",
                 "measured (UTC)"]
    else:
        names = ["device / measured", "problem", "algorithm / config", "ms / status",
                 "workspace"]
    for name in names:
        number = name in ("ms", "workspace")
        table.add_column(name, overflow="fold", no_wrap=number,
                         justify="right" if number else "left")
    for row in page:
        time_ms = row["time_ms"]
        ms = "-" if time_ms is None else f"{time_ms:.3f}"
        measured = row["measured_at"][:16].replace("T", " ")  # to the minute, in UTC
        fields = {
            "device": row["device_name"][:28],
            "problem": ConvProblem.from_key(row["problem"]).describe(),
            "algorithm": row["algorithm"], "config": row["config"], "status": row["status"],
            "ms": ms, "workspace": human_bytes(row["workspace_bytes"]), "measured": measured,
        }
        if wide:
            table.add_row(*fields.values())
            continue
        table.add_row(
            f"{fields['device']}\n{measured} UTC",
            fields["problem"],
            f"{row['algorithm']}\n{row['config']}",
            ms if row["status"] == "ok" else row["status"],
            fields["workspace"],
        )
    return table
