"""The `convtune` command line: one Typer app, one module per group of commands."""

from __future__ import annotations

import sys

import click
import typer
from sqlalchemy.exc import SQLAlchemyError

app = typer.Typer(
    name="convtune",
    help="Auto-tune convolution algorithms and keep the results.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# Command modules register themselves on `app` when imported.
from tuner.cli import core  # noqa: E402,F401
from tuner.cli import fleet  # noqa: E402,F401
from tuner.cli import serve  # noqa: E402,F401


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; errors are one line on stderr and a non-zero exit, never a traceback."""
    try:
        result = app(args=argv, prog_name="convtune", standalone_mode=False)
    except click.exceptions.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        print("convtune: aborted", file=sys.stderr)
        return 130
    except (ValueError, LookupError, SQLAlchemyError, OSError, RuntimeError) as exc:
        print(f"convtune: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
