"""Schema versions and the path from each older version to the current one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

from sqlalchemy import Connection, DateTime, MetaData, Table, column, inspect, select, text
from sqlalchemy import table as light_table

from db.models import PROBLEM_INT_FIELDS, Base, Claim, Job, Meta, Problem

#: The schema this code writes. Bump it together with a new entry in MIGRATIONS.
#: 1: devices, problems, measurements. 2: + claims (several tuners sharing one store).
#: 3: + the `generation` meta row, bumped by every write of measurements (answer caches).
#: 4: + problems.math ("fp32"/"tf32"), part of the problem's unique key.
#: 5: + measurements.recorded_at (the store's own clock, for merge precedence).
#: 6: + jobs (background jobs of the HTTP service, readable by every worker process).
SCHEMA_VERSION = 6

#: The meta key counting writes of measurements: processes that cache answers in memory
#: compare it to know when another process changed the store.
GENERATION_KEY = "generation"


def _add_claims(conn: Connection) -> None:
    """1 -> 2: the claims table (rows of version 1 are untouched)."""
    Claim.__table__.create(conn, checkfirst=True)  # type: ignore[attr-defined]


def _add_generation(conn: Connection) -> None:
    """2 -> 3: the write counter row (rows of version 2 are untouched)."""
    _set_meta(conn, GENERATION_KEY, "0")


def _add_math(conn: Connection) -> None:
    """3 -> 4: problems.math, every existing row "fp32", and the unique key extended by it.

    The old unique constraint would refuse a tf32 row beside its fp32 twin, so it is
    replaced. PostgreSQL alters it in place. SQLite cannot drop a constraint, so the table
    is rebuilt with the same ids; the caller has switched its foreign-key checks off for
    this (see `foreign_keys_off`), and `PRAGMA foreign_key_check` proves nothing dangles.
    """
    old_columns = [*PROBLEM_INT_FIELDS, "dtype", "layout", "direction"]
    if conn.dialect.name == "sqlite":
        table: Table = Problem.__table__  # type: ignore[assignment]
        rebuilt = table.to_metadata(MetaData(), name="problems_v4")
        rebuilt.create(conn)
        columns = ", ".join(["id", *old_columns])
        conn.execute(text(
            f"INSERT INTO problems_v4 ({columns}, math) SELECT {columns}, 'fp32' FROM problems"
        ))
        conn.execute(text("DROP TABLE problems"))
        conn.execute(text("ALTER TABLE problems_v4 RENAME TO problems"))
        dangling = conn.execute(text("PRAGMA foreign_key_check")).fetchall()
        if dangling:
            raise SchemaError(f"migration 4 left dangling references: {dangling[:3]}")
        return
    conn.execute(text(
        "ALTER TABLE problems ADD COLUMN math VARCHAR(8) NOT NULL DEFAULT 'fp32'"
    ))
    for constraint in inspect(conn).get_unique_constraints("problems"):
        if set(constraint["column_names"]) == set(old_columns) and constraint["name"]:
            conn.execute(text(f'ALTER TABLE problems DROP CONSTRAINT "{constraint["name"]}"'))
    new_key = ", ".join([*PROBLEM_INT_FIELDS, "dtype", "math", "layout", "direction"])
    conn.execute(text(f"ALTER TABLE problems ADD UNIQUE ({new_key})"))


def _add_recorded_at(conn: Connection) -> None:
    """4 -> 5: measurements.recorded_at, set to the upgrade time for every existing row.

    The store cannot know when it received old rows; the upgrade time is the latest it can
    vouch for, and it caps the precedence of any future-dated row imported before.
    """
    kind = DateTime(timezone=True)
    conn.execute(text(
        f"ALTER TABLE measurements ADD COLUMN recorded_at {kind.compile(dialect=conn.dialect)}"
    ))
    # A lightweight table, not the model: this step must keep doing what it did in schema 5.
    measurements = light_table("measurements", column("recorded_at", kind))
    conn.execute(measurements.update().values(recorded_at=datetime.now(timezone.utc)))


def _add_jobs(conn: Connection) -> None:
    """5 -> 6: the jobs table (rows of version 5 are untouched)."""
    Job.__table__.create(conn, checkfirst=True)  # type: ignore[attr-defined]


#: MIGRATIONS[v] upgrades a version-v database to version v + 1, in one transaction.
#: Steps only add (tables, columns with defaults, keys that widen): stored names are forever.
#: _add_claims, _add_math and _add_jobs build their tables from today's models, so a later
#: step that adds a column to claims, problems or jobs must skip it where it exists already
#: (an old store gets today's table at the early step).
MIGRATIONS: dict[int, Callable[[Connection], None]] = {
    1: _add_claims, 2: _add_generation, 3: _add_math, 4: _add_recorded_at,
    5: _add_jobs,
}


class SchemaError(ValueError):
    """The database's schema cannot be used by this version of convtune."""


def stored_version(conn: Connection) -> int | None:
    """The schema version recorded in the database, or None for an empty database."""
    if not inspect(conn).has_table(Meta.__tablename__):
        return None
    value = conn.execute(select(Meta.value).where(Meta.key == "schema_version")).scalar()
    if value is None:
        return None
    text_value = str(value)
    # ASCII digits only: int() also takes "+6", " 6", "6_0" and other scripts' digits, none
    # of which this code ever writes.
    if text_value.isascii() and text_value.isdigit():
        return int(text_value)
    # A bare int() error ("invalid literal for int() ... 'abc'") named neither the setting,
    # nor the database, nor what it means; going on could only make things worse.
    where = conn.engine.url.render_as_string(hide_password=True)
    raise SchemaError(
        f"convtune_meta.schema_version is {value!r} in {where}, not a schema version: "
        "the database is corrupt or not a convtune store"
    )


def _set_meta(conn: Connection, key: str, value: str) -> None:
    table: Table = Meta.__table__  # type: ignore[assignment]
    updated = conn.execute(table.update().where(table.c.key == key).values(value=value))
    if not updated.rowcount:
        conn.execute(table.insert().values(key=key, value=value))


def _set_version(conn: Connection, version: int) -> None:
    _set_meta(conn, "schema_version", str(version))


def upgrade(conn: Connection, target: int = SCHEMA_VERSION) -> int:
    """Create or upgrade the schema to `target`; returns the version found before."""
    found = stored_version(conn)
    if found is None:
        Base.metadata.create_all(conn)
        _set_meta(conn, GENERATION_KEY, "0")
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
    if found != target:
        # A store already at this version is opened without a single write, so a read-only
        # one (a fleet's shared cache on a read-only volume or a read-only role) opens.
        _set_version(conn, target)
    return found
