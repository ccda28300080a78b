"""Schema version 1 databases upgrade to version 2 (claims) and keep every row."""

from __future__ import annotations

from sqlalchemy import create_engine, inspect, text

from db.engine import open_store
from db.migrations import SCHEMA_VERSION, stored_version
from db.models import Base, Device, Measurement, Meta, Problem
from tests.fleet.helpers import gpu, row, seed, stored
from tests.tuner.fakes import small_problem


def make_version_1(url: str) -> None:
    """What convtune 0.1 created: no claims table, schema_version 1."""
    engine = create_engine(url)
    with engine.begin() as conn:
        Base.metadata.create_all(conn, tables=[
            t.__table__ for t in (Meta, Device, Problem, Measurement)  # type: ignore[misc]
        ])
        conn.execute(text("INSERT INTO convtune_meta (key, value) VALUES ('schema_version', '1')"))
    engine.dispose()


def test_version_1_upgrades_and_keeps_rows(store_url: str) -> None:
    make_version_1(store_url)
    engine = create_engine(store_url)
    with engine.connect() as conn:
        assert not inspect(conn).has_table("claims")
    engine.dispose()
    # Fill it through a v1-shaped store: the v2 code writes only v1 tables here.
    from db.engine import Store

    v1 = Store(store_url, create_engine(store_url))
    seed(v1, gpu(), small_problem(), [row("direct", 1.0), row("fft", 2.0)])
    before = stored(v1)
    v1.engine.dispose()

    store = open_store(store_url)  # upgrades
    with store.engine.connect() as conn:
        assert stored_version(conn) == SCHEMA_VERSION == 2
        assert inspect(conn).has_table("claims")
    assert stored(store) == before and len(before) == 2
