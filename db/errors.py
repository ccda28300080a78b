"""A store that cannot be used, or refuses writes: the errors, and how they are recognised."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

from db.urls import describe_url

#: SQLite's primary result codes told apart here: a write to a read-only database, and a
#: file that is not (or no longer) a database.
SQLITE_READONLY, SQLITE_CORRUPT, SQLITE_NOTADB = 8, 11, 26
#: SQLite's own text (sqlite3_errstr) of those codes.
_SQLITE_MESSAGES = {
    SQLITE_READONLY: "attempt to write a readonly database",
    SQLITE_CORRUPT: "database disk image is malformed",
    SQLITE_NOTADB: "file is not a database",
}


def sqlite_code(exc: BaseException | None) -> int:
    """SQLite's primary result code of an sqlite3 error (of its extended code); 0 if none.

    sqlite3 errors carry `sqlite_errorcode` from Python 3.11 on; before, only SQLite's
    message tells the code, so the few codes callers test for are read from it.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None and exc is not None:
        text = str(exc)
        code = next((c for c, message in _SQLITE_MESSAGES.items() if message in text), 0)
    return (code or 0) & 0xFF


class StoreReadOnly(RuntimeError):
    """The store refuses writes (a read-only file, volume or role): it can answer what it
    holds, but nothing can be measured, imported or recorded in it."""


#: PostgreSQL's SQLSTATEs for a write refused: a read-only transaction (a standby, or
#: default_transaction_read_only) and a role without the privilege.
_PG_REFUSED_WRITES = frozenset({"25006", "42501"})


#: What a read-only store can still do, and what to do for the rest.
_READ_ONLY_ADVICE = (
    "it answers what it holds (mode 'cached' or 'heuristic', or a problem it has measured), "
    "but cannot measure, import or record anything; give a writable store (db=, --db or "
    "$CONVTUNE_DB_URL) for that")


def refused_write(exc: DBAPIError, url: str,
                  advice: str = _READ_ONLY_ADVICE) -> StoreReadOnly | None:
    """StoreReadOnly, one line, if `exc` is the database refusing a write; else None."""
    orig = exc.orig
    if (sqlite_code(orig) != SQLITE_READONLY
            and getattr(orig, "sqlstate", None) not in _PG_REFUSED_WRITES):
        return None
    where = describe_url(url)
    reason = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    return StoreReadOnly(f"the store {where} is read-only ({reason}): {advice}")


class StoreUnusable(RuntimeError):
    """The database at a URL cannot be used: another application's, or not a database."""
