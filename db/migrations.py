"""Schema versions and the path from each older version to the current one."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, Table, inspect, select

from db.models import Base, Claim, Meta

#: The schema this code writes. Bump it together with a new entry in MIGRATIONS.
#: 1: devices, problems, measurements. 2: + claims (several tuners sharing one store).
SCHEMA_VERSION = 2


def _add_claims(conn: Connection) -> None:
    """1 -> 2: the claims table (rows of version 1 are untouched)."""
    Claim.__table__.create(conn, checkfirst=True)  # type: ignore[attr-defined]


#: MIGRATIONS[v] upgrades a version-v database to version v + 1, in one transaction.
#: Steps only add (tables, nullable columns, indexes): stored names are forever.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _add_claims}


class SchemaError(ValueError):
    """The database's schema cannot be used by this version of convtune."""


def stored_version(conn: Connection) -> int | None:
    """The schema version recorded in the database, or None for an empty database."""
    if not inspect(conn).has_table(Meta.__tablename__):
        return None
    value = conn.execute(select(Meta.value).where(Meta.key == "schema_version")).scalar()
    return int(value) if value is not None else None


def _set_version(conn: Connection, version: int) -> None:
    table: Table = Meta.__table__  # type: ignore[assignment]
    updated = conn.execute(
        table.update().where(table.c.key == "schema_version").values(value=str(version))
    )
    if not updated.rowcount:
        conn.execute(table.insert().values(key="schema_version", value=str(version)))


def upgrade(conn: Connection, target: int = SCHEMA_VERSION) -> int:
    """Create or upgrade the schema to `target`; returns the version found before."""
    found = stored_version(conn)
    if found is None:
        Base.metadata.create_all(conn)
        _set_version(conn, target)
        return 0
    if found > target:
        raise SchemaError(
            f"database schema version {found} is newer than this convtune's ({target});"
            " upgrade convtune to open it"
        )
    for version in range(found, target):
        if version not in MIGRATIONS:
            raise SchemaError(f"no migration from schema version {version} to {version + 1}")
        MIGRATIONS[version](conn)
    # New tables of later versions are created here too; existing ones are left as they are.
    Base.metadata.create_all(conn)
    _set_version(conn, target)
    return found
