"""The `convtune` command line: one Typer app, one module per group of commands."""

from __future__ import annotations

import sys

from typing import Annotated, Any

import click
import typer
from sqlalchemy.exc import SQLAlchemyError

from tuner.version import TUNER_VERSION


class _Commands(typer.core.TyperGroup):
    """Typer's group, with Ctrl-C during a command raised as an Abort: typer 0.29 turns a
    KeyboardInterrupt into Exit(130), which `main`, not being standalone, got back as a
    plain 130 and so exited without a word."""

    # Any: the context is click's before typer 0.29 and typer's vendored copy's since.
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise typer.Abort() from exc


app = typer.Typer(
    cls=_Commands,
    name="convtune",
    help="Auto-tune convolution algorithms and keep the results.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

#: What a usage error can be: click's exceptions, or, since typer 0.29 vendors its own copy
#: of click (typer._click), typer's; catching only click's let those end in a traceback.
USAGE_ERRORS: tuple[type[Exception], ...] = tuple(
    {click.exceptions.ClickException, getattr(typer, "TyperException", click.ClickException)}
)


def _show_version(value: bool) -> None:
    if value:
        print(f"convtune {TUNER_VERSION}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option(
        "--version", callback=_show_version, is_eager=True, help="Print the version and exit.",
    )] = False,
) -> None:
    """Auto-tune convolution algorithms and keep the results."""

# Command modules register themselves on `app` when imported.
from tuner.cli import core  # noqa: E402,F401
from tuner.cli import fleet  # noqa: E402,F401
from tuner.cli import serve  # noqa: E402,F401


def _one_line(exc: BaseException | str) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; errors are one line on stderr and a non-zero exit, never a traceback."""
    try:
        result = app(args=argv, prog_name="convtune", standalone_mode=False)
    except USAGE_ERRORS as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # plain `convtune`: the help, as asked
            exc.show()  # type: ignore[attr-defined]
            return 0
        message = exc.format_message()  # type: ignore[attr-defined]
        context = getattr(exc, "ctx", None)
        hint = f" (see {context.command_path} --help)" if context is not None else ""
        print(f"convtune: error: {_one_line(message)}{hint}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    except (click.exceptions.Abort, typer.Abort):
        print("convtune: aborted", file=sys.stderr)
        return 130
    except (ValueError, LookupError, SQLAlchemyError, OSError, RuntimeError) as exc:
        print(f"convtune: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
