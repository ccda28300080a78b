"""Opening a store: engine per URL, SQLite tuned for several processes, schema upgraded."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import (
    DBAPIError,
    IntegrityError,
    OperationalError,
    ProgrammingError,
)
from sqlalchemy.orm import Session, sessionmaker

from db.errors import SQLITE_CORRUPT, SQLITE_NOTADB, StoreUnusable, refused_write, sqlite_code
from db.location import default_url
from db.migrations import upgrade
from db.models import Meta
from db.urls import check_url

T = TypeVar("T")

#: How long an SQLite writer waits for another process's lock (MIOpen uses 60 s too).
SQLITE_BUSY_TIMEOUT_MS = 60_000


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
        """A session in one transaction: committed on success, rolled back on error.

        A write the database refuses as read-only raises StoreReadOnly, naming the store.
        """
        try:
            with self._sessions() as session, session.begin():
                yield session
        except DBAPIError as exc:
            refused = refused_write(exc, self.url)
            if refused is None:
                raise
            raise refused from None

    def write(self, work: Callable[[Session], T], attempts: int = 3) -> T:
        """Run `work` in one transaction; again when another process's write collided.

        A concurrent insert of the same device, problem or measurement (IntegrityError),
        or a lock lost on SQLite (OperationalError), is retried from the start: `work`
        reads the other process's rows on the next try and merges with them.
        """
        for attempt in range(attempts):
            try:
                with self.session() as session:
                    return work(session)
            except (IntegrityError, OperationalError):
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")


#: Open stores by URL, the least recently used first.
_STORES: OrderedDict[str, Store] = OrderedDict()
#: Every store this process made and someone still holds, closed for MAX_STORES or not: a
#: forked child must drop their inherited connections too.
_MADE: weakref.WeakSet[Store] = weakref.WeakSet()
_LOCK = threading.Lock()
#: Most stores kept open: beyond, the least recently used is closed (its pooled connections,
#: three files each for SQLite) and opened again when next asked for. Each kept one before:
#: a process that used a database per experiment ran out of file descriptors at about 340
#: (a review of resource lifetimes, 2026-11-30).
MAX_STORES = 16


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets readers and one writer work at once; the busy timeout makes concurrent
    # tuning processes wait for each other instead of failing with "database is locked".
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _check_sqlite_file(path: Path) -> None:
    """Refuse, before anything is written, a file that is not an SQLite database or is
    another application's (tables, but none of ours): opening it would add our tables and
    switch it to WAL mode."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = {row[0] for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        # Only "not a database" and "malformed" say anything of the file itself. A full
        # disk, a read-only volume or missing permissions were reported the same way, and
        # a user told the store is unusable may delete hours of measurements.
        if sqlite_code(exc) in (SQLITE_CORRUPT, SQLITE_NOTADB):
            raise StoreUnusable(f"{path} is not a usable SQLite database: {exc}") from None
        raise StoreUnusable(f"cannot open the SQLite database {path}: {exc} (the file itself "
                            "may be fine: check free disk space and permissions)") from None
    if tables and Meta.__tablename__ not in tables:
        shown = ", ".join(sorted(tables)[:5])
        raise StoreUnusable(f"{path} is another application's database (tables: {shown}); "
                            "convtune will not modify it")


def _create_engine(url: str) -> Engine:
    parsed = check_url(url)
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not database.startswith("file:"):
            path = Path(database).expanduser()
            _check_sqlite_file(path)
            path.parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    else:
        kwargs["pool_pre_ping"] = True
    engine = create_engine(parsed, **kwargs)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _upgrade_with_retry(engine: Engine, attempts: int = 5) -> None:
    # Two processes opening a new database at once can both see no tables and race to
    # create them; the loser fails on "already exists" and simply looks again.
    for attempt in range(attempts):
        try:
            with engine.connect() as conn:
                sqlite = conn.dialect.name == "sqlite"
                if sqlite:
                    # A migration may rebuild a referenced table (schema 4); SQLite only
                    # honours this pragma outside a transaction, so it is set before one.
                    conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
                    conn.commit()
                try:
                    with conn.begin():
                        if sqlite:
                            # Python's sqlite3 begins a transaction only before an INSERT,
                            # UPDATE or DELETE: the CREATE and ALTER of a migration ran in
                            # autocommit, so an upgrade killed or failing midway left a store
                            # every later open refused ("duplicate column name"). Begun here,
                            # the whole upgrade commits or rolls back as one.
                            conn.exec_driver_sql("BEGIN")
                        upgrade(conn)
                finally:
                    if sqlite:
                        conn.rollback()
                        conn.exec_driver_sql("PRAGMA foreign_keys=ON")
                        conn.commit()
            return
        except (OperationalError, IntegrityError, ProgrammingError) as exc:
            # Only a store at an older schema version gets here read-only: one at this
            # version opens without a write (db.migrations.upgrade).
            refused = refused_write(
                exc, engine.url.render_as_string(hide_password=False),
                "its schema is older than this convtune's, which must upgrade it once with "
                "write access before it can read it")
            if refused is not None:
                raise refused from None
            if attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def opened_store(url: str | None = None) -> Store | None:
    """The store at `url` (default: `default_url()`) if this process opened it, else None:
    nothing is created (a call refused by its checks must leave no database behind)."""
    url = url or default_url()
    if not isinstance(url, str):  # a list would fail as an unhashable dict key
        raise ValueError(f"db must be a database URL string, got {type(url).__name__}")
    # A dict read needs no lock, which only keeps two threads from creating one store twice.
    store = _STORES.get(url)
    if store is not None:
        # Not contextlib.suppress: every cached call comes here, and this costs it less.
        try:  # noqa: SIM105
            _STORES.move_to_end(url)  # used: closed last
        except KeyError:  # closed meanwhile by another thread: still this call's store
            pass
    return store


def is_open(store: Store) -> bool:
    """Whether `store` is still the one this process keeps open for its URL (see MAX_STORES;
    unlike opened_store, this leaves its place among the recently used as it is)."""
    return _STORES.get(store.url) is store


def open_store(url: str | None = None) -> Store:
    """The store at `url` (default: `default_url()`), created and upgraded on first use."""
    url = url or default_url()
    store = opened_store(url)  # open already: every cached call asks
    if store is not None:
        return store
    with _LOCK:
        store = _STORES.get(url)
        if store is None:
            engine = _create_engine(url)
            _upgrade_with_retry(engine)
            store = _STORES[url] = Store(url, engine)
            _MADE.add(store)
            _close_unused()
        return store


def _close_unused() -> None:
    """Close the least recently used stores beyond MAX_STORES (under _LOCK). An in-memory
    database is its connection: closed, its data would be gone, so it stays."""
    # Over a copy (list() runs in C): opened_store moves its URL to the end without the
    # lock, and iterating the table itself raised halfway (a review of the session's changes).
    closable = [url for url, kept in list(_STORES.items()) if not _in_memory(kept.engine.url)]
    for url in closable[:max(0, len(closable) - MAX_STORES)]:
        # Its idle connections close now; one a thread has checked out closes when returned,
        # and the store still works for whoever holds it.
        _STORES.pop(url).engine.dispose()


def _after_fork_in_child() -> None:
    """A forked child's stores drop the connections their pools inherited (SQLite's and
    the drivers' connections must not cross a fork: the child used its parent's pooled
    SQLite connection; a review of concurrency, 2026-11-30), and its lock starts free (a
    parent thread holding it at the fork would have left it held for good)."""
    global _LOCK
    _LOCK = threading.Lock()
    for store in list(_MADE):  # those closed for MAX_STORES too: a holder may use them
        if not _in_memory(store.engine.url):  # an in-memory database is its connection:
            store.engine.dispose(close=False)  # the child keeps its copy of it


def _in_memory(url: Any) -> bool:
    """Whether `url` (a SQLAlchemy URL) names an in-memory SQLite database."""
    return (url.get_backend_name() == "sqlite"
            and (url.database in (None, "", ":memory:") or "mode=memory" in str(url)))


os.register_at_fork(after_in_child=_after_fork_in_child)


def close_stores() -> None:
    """Dispose every cached engine (tests and forked workers call this)."""
    with _LOCK:
        for store in list(_STORES.values()):
            store.engine.dispose()
        _STORES.clear()
