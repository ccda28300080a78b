"""Databases that are not ours: refused before anything is written, with one clear line."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from tuner.cli import main


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _foreign(tmp_path: Path) -> Path:
    path = tmp_path / "other-app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.execute("INSERT INTO invoices (total) VALUES (12.5)")
    conn.commit()
    conn.close()
    return path


def test_foreign_sqlite_file_is_refused_and_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 12 (5): `convtune results --db sqlite:///other-app.db` added our tables to
    # another application's database and switched it to WAL mode.
    path = _foreign(tmp_path)
    before = _digest(path)
    assert main(["results", "--db", f"sqlite:///{path}"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "another application's database" in err
    assert _digest(path) == before
    assert not Path(f"{path}-wal").exists()


def test_corrupt_file_is_refused_with_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken.db"
    path.write_bytes(b"definitely not sqlite " * 100)
    before = _digest(path)
    assert main(["results", "--db", f"sqlite:///{path}"]) == 1
    assert "not a usable SQLite database" in capsys.readouterr().err
    assert _digest(path) == before


# Bug (a review of 2026-11-30): a healthy store on a full disk or a read-only volume was
# reported as "not a usable SQLite database" (every sqlite3 error was), which invites a
# user to delete a store of hours of measurements that works again once space is freed.
@pytest.mark.parametrize(("message", "code"), [
    ("database or disk is full", 13), ("unable to open database file", 14),
    ("disk I/O error", 10 | (3 << 8)), ("attempt to write a readonly database", 8),
])
def test_a_store_that_cannot_be_opened_is_not_called_unusable(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        message: str, code: int) -> None:
    from db import engine

    path = tmp_path / "store.db"
    assert main(["find", "--n", "1", "--c", "2", "--h", "5", "--w", "5", "--k", "2", "--r", "3",
                 "--s", "3", "--device", "cpu", "--db", f"sqlite:///{path}"]) == 0
    engine.close_stores()
    capsys.readouterr()

    def failing(*args: object, **kwargs: object) -> None:
        error = sqlite3.OperationalError(message)
        error.sqlite_errorcode = code  # type: ignore[attr-defined]  # as sqlite3 (3.11+) sets
        raise error

    monkeypatch.setattr(engine.sqlite3, "connect", failing)
    assert main(["results", "--db", f"sqlite:///{path}"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a usable" not in err
    assert f"cannot open the SQLite database {path}: {message}" in err


# Bug: on Python 3.10 sqlite3's errors carry no sqlite_errorcode (3.11 added it), so every
# code read as 0: a corrupt file or a read-only store was reported as something else (a
# read-only store as a 503 over HTTP, not the 403 it is).
@pytest.mark.parametrize("error, code", [
    (sqlite3.DatabaseError("file is not a database"), 26),
    (sqlite3.DatabaseError("database disk image is malformed"), 11),
    (sqlite3.OperationalError("attempt to write a readonly database"), 8),
    (sqlite3.OperationalError("disk I/O error"), 0),
])
def test_sqlite_codes_are_read_where_errors_carry_none(
        error: sqlite3.Error, code: int) -> None:
    from db.errors import sqlite_code

    assert not hasattr(error, "sqlite_errorcode")  # as every sqlite3 error on Python 3.10
    assert sqlite_code(error) == code
