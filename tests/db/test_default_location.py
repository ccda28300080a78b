"""The default database lives in the user's data directory (issue 12, item 11)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from db import location
from db.engine import open_store
from db.location import adopt_database, default_url
from tests.fleet.helpers import gpu, row, seed, stored
from tests.tuner.fakes import small_problem


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(cache dir, data dir) of convtune for a fresh user, and no $CONVTUNE_DB_URL."""
    monkeypatch.delenv("CONVTUNE_DB_URL")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "cache" / "convtune", tmp_path / "data" / "convtune"


def test_default_database_is_in_the_data_directory(homes: tuple[Path, Path]) -> None:
    # Bug (issue 12 item 11): results worth keeping lived in the cache directory, which
    # cleaners empty.
    _cache, data = homes
    assert default_url() == f"sqlite:///{data / 'convtune.db'}"


def test_a_database_in_the_old_cache_location_is_copied_once(
    homes: tuple[Path, Path],
) -> None:
    # Bug (issue 12 item 11): moving the default must not lose what was measured.
    cache, data = homes
    old_url = f"sqlite:///{cache / 'convtune.db'}"
    seed(open_store(old_url), gpu(), small_problem(), [row("direct", 1.5), row("fft", 0.7)])
    before = stored(open_store(old_url))  # the old store is still open, in WAL mode
    url = default_url()
    assert url == f"sqlite:///{data / 'convtune.db'}"
    assert stored(open_store(url)) == before
    assert (cache / "convtune.db").exists()  # left for older convtune versions
    # Once: later writes to the old file are not copied again over the new one.
    seed(open_store(old_url), gpu(), small_problem(n=2), [row("direct", 2.0)])
    assert default_url() == url and stored(open_store(url)) == before
    assert not list(data.glob("*.partial"))


def test_adopting_never_replaces_an_existing_database(tmp_path: Path) -> None:
    old, new = tmp_path / "old.db", tmp_path / "new.db"
    for path in (old, new):
        sqlite3.connect(path).close()
    new.write_bytes(b"mine")
    assert adopt_database(old, new) is False and new.read_bytes() == b"mine"
    old.write_bytes(b"not a database at all, just some text " * 4)
    assert adopt_database(old, tmp_path / "other.db") is False
    assert not (tmp_path / "other.db").exists()


def test_the_directories_are_worked_out_once_per_environment(
    homes: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    # Bug (issue 9): every convolve() and module call without `db` asked platformdirs for
    # the data directory and stat'ed two files, 40-55 us a call on a CPU, more than the
    # rest of a cached convolve() call.
    import platformdirs

    asked: list[str] = []
    real = platformdirs.user_data_dir

    def counting(*args: object, **kwargs: object) -> str:
        asked.append("data")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(platformdirs, "user_data_dir", counting)
    _cache, data = homes
    assert [default_url() for _ in range(4)] == [f"sqlite:///{data / 'convtune.db'}"] * 4
    assert asked == ["data"]
    # Another data directory (a test's, a new $XDG_DATA_HOME): worked out anew.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "elsewhere"))
    assert default_url() == f"sqlite:///{tmp_path / 'elsewhere' / 'convtune' / 'convtune.db'}"
    # $CONVTUNE_DB_URL still wins at once.
    monkeypatch.setenv("CONVTUNE_DB_URL", "sqlite:///somewhere.db")
    assert default_url() == "sqlite:///somewhere.db"


def test_the_fast_environment_reader_agrees_with_os_environ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = ("CONVTUNE_TEST_SET", "CONVTUNE_TEST_UNSET", "CONVTUNE_TEST_WIDE")
    monkeypatch.setenv("CONVTUNE_TEST_SET", "sqlite:////tmp/a b.db")
    monkeypatch.delenv("CONVTUNE_TEST_UNSET", raising=False)
    monkeypatch.setenv("CONVTUNE_TEST_WIDE", "/tmp/d\u00e9j\u00e0/\u6570\u636e")
    read = location._environment_reader(names)
    assert [location._decoded(v) for v in read()] == [os.environ.get(n) for n in names]
    monkeypatch.setenv("CONVTUNE_TEST_UNSET", "now set")  # read at each call, not once
    assert location._decoded(read()[1]) == "now set"


def test_a_failed_copy_of_the_old_store_starts_no_empty_one(
    homes: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Bug: a copy that failed for want of space (or a lock, an I/O error) was taken for "not
    # a database": an empty store started at the new place, and its existence then stopped
    # every later copy, the old measurements never used again, without a word.
    cache, data = homes
    seed(open_store(f"sqlite:///{cache / 'convtune.db'}"), gpu(), small_problem(),
         [row("direct", 1.5)])
    real = sqlite3.connect

    def full_disk(target: str, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection = real(target, *args, **kwargs)
        if str(target).endswith(".partial"):
            connection.execute("PRAGMA max_page_count = 1")  # the copy cannot fit
        return connection

    monkeypatch.setattr(location.sqlite3, "connect", full_disk)
    location._url_from.cache_clear()
    with pytest.raises(location.StoreUnusable, match="cannot copy the measurements"):
        default_url()
    assert not (data / "convtune.db").exists() and not list(data.glob("*.partial"))
    monkeypatch.setattr(location.sqlite3, "connect", real)
    assert stored(open_store(default_url())) != []


def test_adopting_where_there_are_no_hard_links(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # Bug: on a filesystem without hard links (vfat, exFAT, many FUSE and SMB mounts)
    # os.link raised EPERM, which failed every default_url() after copying the whole store.
    old, new = tmp_path / "old.db", tmp_path / "new.db"
    seed(open_store(f"sqlite:///{old}"), gpu(), small_problem(), [row("direct", 1.5)])

    def no_links(*_args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(location.os, "link", no_links)
    assert adopt_database(old, new) is True
    assert stored(open_store(f"sqlite:///{new}")) == stored(open_store(f"sqlite:///{old}"))
    assert not list(tmp_path.glob("*.partial"))
