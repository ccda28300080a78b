"""Fleet commands: export, import, push, pull (bundles of measurements between stores), and
warm (a machine's kernels built before its first tuning or plan)."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tuner.cli import app
from tuner.cli.arguments import (
    BatchOpt,
    DbOpt,
    DeviceOpt,
    DirectionsOpt,
    DtypeOpt,
    MathOpt,
    ModelOpt,
    OnnxOpt,
    network_work,
    stored_url,
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


def write_whole(path: Path, text: str) -> None:
    """Write `text` to the file `path`: all of it, or nothing and the old file untouched.

    A regular file (or a new one) is written beside its final place and renamed over it:
    writing in place truncated the old file first, so a full disk left neither the old
    bundle nor a whole new one. Anything else (/dev/stdout, a pipe) is written to as it is,
    since renaming over a device node would replace the node itself. A descriptor of this
    process (/dev/stdout, /dev/fd/N) is written through, where it stands, even when it has a
    regular file open (`>> log`): it is the file the shell opened, with what it holds.
    OSError names `path`.
    """
    data = text.encode("utf-8")
    _refuse_planted_link(path)
    try:
        # The kernel follows the links (/dev/stdout to a pipe has no path realpath could
        # give); realpath is for a regular file only.
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise OSError(f"cannot write {path}: {exc.strerror or exc}") from None
    descriptor = None if mode is None else _own_descriptor(path)
    if descriptor is not None or (mode is not None and not stat.S_ISREG(mode)):
        try:
            # A descriptor of ours through a duplicate, which shares its offset: the shell's
            # next write (or the rest of a `{ ...; } > file`) comes after ours, as for
            # anything on stdout. Anything else that is no regular file, opened as it is.
            with (open(path, "wb") if descriptor is None
                  else os.fdopen(os.dup(descriptor), "wb")) as out:
                out.write(data)
        except OSError as exc:
            raise OSError(f"cannot write {path}: {exc.strerror or exc}") from None
        return
    target = Path(os.path.realpath(path))  # through symlinks: replace the file, not the link
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        # O_EXCL: never write through someone else's file (or link) of that name. 0o666 and
        # the umask, as for any new file; an existing file keeps its permissions.
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:  # its reason is about the temporary file: say so
        raise OSError(f"cannot write {path}: cannot create a file in {target.parent}: "
                      f"{exc.strerror or exc}") from None
    try:
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())  # on disk before the rename makes it the file
            if mode is not None:
                os.chmod(temporary, stat.S_IMODE(mode))
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
    except OSError as exc:
        raise OSError(f"cannot write {path}: {exc.strerror or exc}") from None


_DESCRIPTORS = re.compile(r"/proc/(\d+)(?:/task/\d+)?/fd")


def _own_descriptor(path: Path) -> int | None:
    """The descriptor of this process that `path` names (/dev/stdout, /dev/fd/1,
    /proc/self/fd/1: 1), else None. Such a path names whatever the descriptor has open (a
    shell's redirection): renaming a new file over that would leave the shell writing to
    the replaced one, and opening it again would start a second offset. Each link is
    followed by hand, since realpath goes on past the descriptor to the file's own path."""
    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's own bound on links followed
        folder = _DESCRIPTORS.fullmatch(os.path.realpath(os.path.dirname(current)))
        name = os.path.basename(current)
        if folder and folder.group(1) == str(os.getpid()) and name.isdigit():
            return int(name)
        if not os.path.islink(current):
            return None
        current = os.path.join(os.path.dirname(current), os.readlink(current))
    return None


def _refuse_planted_link(path: Path) -> None:
    """OSError if `path` passes through a symlink another user made in a sticky,
    world-writable directory (/tmp): Linux's fs.protected_symlinks rule, which writing to the
    link's resolved path would sidestep (a review of security, 2026-11-30: `export -o
    /tmp/x.bundle` through a link another user planted there overwrote the file it named).
    Every component is checked, the file's own and its folders' (a planted link to a
    folder of the other user's served as well)."""
    if not hasattr(os, "geteuid"):
        return
    absolute = Path(os.path.abspath(path))
    for part in (*reversed(absolute.parents[:-1]), absolute):
        try:
            link = part.lstat()  # the folders before it followed, as the kernel will
            folder = part.parent.stat()
        except OSError:
            return  # no such component: nothing beyond it is followed
        shared = folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH
        if (stat.S_ISLNK(link.st_mode) and shared
                and link.st_uid not in (os.geteuid(), folder.st_uid)):
            raise OSError(f"cannot write {path}: {part} is another user's symlink in a shared "
                          "directory; remove it or write elsewhere")


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
    text = service(stored_url(db)).export_bundle(device=device)
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_whole(output, text)
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
    counts = push_bundle(server, service(stored_url(db)).export_bundle(device=device),
                         token=token)
    _say(f"pushed to {server}: {_summary(counts)}")


@app.command()
def pull(
    server: ServerOpt,
    token: Annotated[
        str | None,
        typer.Option("--token", help="Read token (default: $CONVTUNE_READ_TOKEN, else "
                                     "$CONVTUNE_API_TOKEN)."),
    ] = None,
    db: DbOpt = None,
    device: ExportDeviceOpt = None,
) -> None:
    """Fetch a convtune server's measurements (or one device's) and merge them here."""
    counts = service(db).import_bundle(pull_bundle(server, device=device, token=token))
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
