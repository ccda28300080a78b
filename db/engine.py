"""Opening a store: engine per URL, SQLite tuned for several processes, schema upgraded."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    IntegrityError,
    NoSuchModuleError,
    OperationalError,
    ProgrammingError,
)
from sqlalchemy.orm import Session, sessionmaker

from db.migrations import upgrade

ENV_URL = "CONVTUNE_DB_URL"

#: How long an SQLite writer waits for another process's lock (MIOpen uses 60 s too).
SQLITE_BUSY_TIMEOUT_MS = 60_000


def default_url() -> str:
    """$CONVTUNE_DB_URL, else an SQLite file under the user's cache directory."""
    url = os.environ.get(ENV_URL)
    if url:
        return url
    from platformdirs import user_cache_dir

    return f"sqlite:///{Path(user_cache_dir('convtune')) / 'convtune.db'}"


class Store:
    """An open results database: one engine and its sessions."""

    def __init__(self, url: str, engine: Engine) -> None:
        self.url = url
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @property
    def dialect(self) -> str:
        """The SQL dialect name ("sqlite", "postgresql", ...)."""
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on error."""
        with self._sessions() as session, session.begin():
            yield session


_STORES: dict[str, Store] = {}
_LOCK = threading.Lock()


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets readers and one writer work at once; the busy timeout makes concurrent
    # tuning processes wait for each other instead of failing with "database is locked".
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _create_engine(url: str) -> Engine:
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ValueError(f"invalid database URL {url!r}: {exc}") from None
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    else:
        kwargs["pool_pre_ping"] = True
    try:
        engine = create_engine(parsed, **kwargs)
    except (NoSuchModuleError, ImportError) as exc:
        raise ValueError(f"unsupported database URL {url!r}: {exc}") from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _upgrade_with_retry(engine: Engine, attempts: int = 5) -> None:
    # Two processes opening a new database at once can both see no tables and race to
    # create them; the loser fails on "already exists" and simply looks again.
    for attempt in range(attempts):
        try:
            with engine.begin() as conn:
                upgrade(conn)
            return
        except (OperationalError, IntegrityError, ProgrammingError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def open_store(url: str | None = None) -> Store:
    """The store at `url` (default: `default_url()`), created and upgraded on first use."""
    url = url or default_url()
    with _LOCK:
        store = _STORES.get(url)
        if store is None:
            engine = _create_engine(url)
            _upgrade_with_retry(engine)
            store = _STORES[url] = Store(url, engine)
        return store


def close_stores() -> None:
    """Dispose every cached engine (tests and forked workers call this)."""
    with _LOCK:
        for store in _STORES.values():
            store.engine.dispose()
        _STORES.clear()
