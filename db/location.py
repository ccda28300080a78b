"""Where the default store lives: $CONVTUNE_DB_URL, else a file in the user's data directory."""

from __future__ import annotations

import functools
import os
import sqlite3
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from db.errors import SQLITE_CORRUPT, SQLITE_NOTADB, StoreUnusable, sqlite_code

ENV_URL = "CONVTUNE_DB_URL"

DB_FILE = "convtune.db"


#: The environment variables that place platformdirs' data and cache directories on this
#: platform (the profile folders on Windows, the home directory on macOS, XDG elsewhere).
_HOME_VARIABLES = {"win32": ("APPDATA", "LOCALAPPDATA", "USERPROFILE"),
                   "darwin": ("HOME",)}.get(sys.platform,
                                            ("XDG_DATA_HOME", "XDG_CACHE_HOME", "HOME"))


def default_url() -> str:
    """$CONVTUNE_DB_URL, else an SQLite file under the user's data directory.

    Measurements are worth keeping (they take minutes to hours to redo), and cache
    directories are what cleaners empty, so the default lives in the data directory;
    a database left in the cache directory by convtune 0.1 is copied over once.

    Every `convolve()` and module call without `db` asks: the answer is worked out (and the
    old database adopted) once per process and value of the variables it depends on.
    """
    return _url_from(_read_environment())


def _environment_reader(names: tuple[str, ...]) -> Callable[[], tuple[Any, ...]]:
    """A function giving the values of `names` in os.environ, raw where that is cheaper."""
    # os.environ.get costs about half a microsecond a variable, more when it is unset (a
    # KeyError raised and caught inside), and default_url reads four on every call. CPython
    # keeps os.environ's values in its dict `_data` under encoded keys: read them there when
    # it does, and decode only what _url_from has not seen.
    data = getattr(os.environ, "_data", None)
    encode = getattr(os.environ, "encodekey", None)
    if isinstance(data, dict) and callable(encode):
        keys = tuple(encode(name) for name in names)
        return lambda: tuple(map(data.get, keys))
    return lambda: tuple(map(os.environ.get, names))


_read_environment = _environment_reader((ENV_URL, *_HOME_VARIABLES))


def _decoded(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return str(os.environ.decodevalue(value))  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=8)
def _url_from(raw: tuple[Any, ...]) -> str:
    url = _decoded(raw[0])
    if url:
        return url
    # platformdirs, pathlib and two stat calls: 40-55 us on a CPU (bench_call_path.py's
    # default-database rows), more than a whole cached convolve() call otherwise takes.
    from platformdirs import user_cache_dir, user_data_dir

    path = Path(user_data_dir("convtune")) / DB_FILE
    adopt_database(Path(user_cache_dir("convtune")) / DB_FILE, path)
    return f"sqlite:///{path}"


def adopt_database(old: Path, new: Path) -> bool:
    """Copy the SQLite database `old` to `new` unless `new` exists; True if copied.

    sqlite3's backup API takes a consistent copy even while another process writes `old`
    (its WAL included); the copy appears at `new` only when complete, and never replaces
    a database another process adopted first. `old` stays, for older convtune versions.
    """
    if new.exists() or not old.is_file():
        return False
    new.parent.mkdir(parents=True, exist_ok=True)
    partial = new.with_name(f"{new.name}.{os.getpid()}.{threading.get_ident()}.partial")
    try:
        source = sqlite3.connect(f"{old.resolve().as_uri()}?mode=ro", uri=True)
        try:
            target = sqlite3.connect(partial)
            try:
                source.backup(target)
            finally:
                target.close()
        finally:
            source.close()
        _publish(partial, new)
        return True
    except FileExistsError:
        return False
    except sqlite3.DatabaseError as exc:
        if sqlite_code(exc) in (SQLITE_CORRUPT, SQLITE_NOTADB):
            return False  # not a database: leave it where it is; a new one starts at `new`
        # A full disk, a lock, an I/O error: going on would start an empty store at `new`,
        # and `new` existing would then stop every later adoption, the measurements lost
        # for good without a word (a review of the on-disk state, 2026-11-30).
        raise StoreUnusable(f"cannot copy the measurements of {old} to {new}: {exc} "
                            "(nothing was changed; free the space or set "
                            f"${ENV_URL})") from None
    finally:
        partial.unlink(missing_ok=True)


def _publish(partial: Path, new: Path) -> None:
    """Put the complete copy `partial` at `new`, unless another process put one there."""
    try:
        os.link(partial, new)  # unlike a rename, fails if someone else got there first
    except FileExistsError:
        raise
    except OSError:
        # No hard links here (vfat, exFAT, many FUSE and SMB mounts): a rename, which may
        # replace a copy another process published a moment ago (an equal copy of `old`).
        if new.exists():
            raise FileExistsError(new) from None
        os.replace(partial, new)
