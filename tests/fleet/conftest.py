"""Fleet fixtures: a real PostgreSQL database per test (skipped with the reason where none)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from db.engine import close_stores

#: Where the PostgreSQL tests create their throwaway databases (trust auth by default).
PG_ADMIN_URL = os.environ.get(
    "CONVTUNE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A uniquely named, empty PostgreSQL database, dropped after the test."""
    try:
        admin = create_engine(
            PG_ADMIN_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3}
        )
        conn = admin.connect()
    except Exception as exc:
        pytest.skip(f"no PostgreSQL server at {PG_ADMIN_URL}: {type(exc).__name__}: {exc}")
    name = f"convtune_test_{os.getpid()}_{uuid.uuid4().hex[:10]}"
    conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        close_stores()
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.close()
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, db_url: str) -> str:
    """The test's store on SQLite, then on PostgreSQL."""
    if request.param == "sqlite":
        return db_url
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def other_url(tmp_path: object) -> str:
    """A second, empty SQLite store."""
    return f"sqlite:///{tmp_path}/other.db"
