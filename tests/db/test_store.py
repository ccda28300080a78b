"""The store: schema versions and migration, reopening, listing, bad URLs."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Connection, create_engine, text

from db import migrations, reports
from db.engine import close_stores, open_store
from db.migrations import SCHEMA_VERSION, SchemaError, stored_version, upgrade
from tests.tuner.fakes import small_problem
from tuner import find_algorithms


def test_new_database_records_current_version(db_url: str) -> None:
    store = open_store(db_url)
    with store.engine.connect() as conn:
        assert stored_version(conn) == SCHEMA_VERSION
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert int(conn.execute(text("PRAGMA busy_timeout")).scalar_one()) >= 10_000


def test_reopened_database_keeps_results(db_url: str) -> None:
    before = find_algorithms(small_problem(), device="cpu")
    close_stores()
    after = find_algorithms(small_problem(), device="cpu", mode="cached")
    assert {(r.algorithm, r.time_ms) for r in before} == {(r.algorithm, r.time_ms) for r in after}


def _store_with_schema_version(url: str, value: str) -> None:
    """A new store at `url` whose recorded schema version is then set to `value`."""
    open_store(url)
    close_stores()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE convtune_meta SET value = :v WHERE key = 'schema_version'"), {"v": value}
        )
    engine.dispose()


def test_database_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'future.db'}"
    _store_with_schema_version(url, str(SCHEMA_VERSION + 1))
    with pytest.raises(SchemaError, match="newer"):
        open_store(url)


def test_migration_path_upgrades_and_keeps_rows(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_algorithms(small_problem(), device="cpu")
    close_stores()
    ran: list[int] = []

    def add_note_column(conn: Connection) -> None:
        ran.append(SCHEMA_VERSION)
        conn.execute(text("ALTER TABLE measurements ADD COLUMN note TEXT"))

    monkeypatch.setitem(migrations.MIGRATIONS, SCHEMA_VERSION, add_note_column)
    engine = create_engine(db_url)
    with engine.begin() as conn:
        assert upgrade(conn, target=SCHEMA_VERSION + 1) == SCHEMA_VERSION
        assert stored_version(conn) == SCHEMA_VERSION + 1
        assert conn.execute(text("SELECT count(*) FROM measurements")).scalar_one() >= 4
    engine.dispose()
    assert ran == [SCHEMA_VERSION]


def test_missing_migration_step_is_an_error(db_url: str) -> None:
    open_store(db_url)
    close_stores()
    engine = create_engine(db_url)
    with engine.begin() as conn, pytest.raises(SchemaError, match="no migration"):
        upgrade(conn, target=SCHEMA_VERSION + 1)
    engine.dispose()


def test_list_results_filters_and_pages(db_url: str) -> None:
    find_algorithms(small_problem(), device="cpu")
    find_algorithms(small_problem(n=1), device="cpu")
    with open_store(db_url).session() as session:
        total, page = reports.list_results(session=session, limit=3)
        assert total >= 8 and len(page) == 3
        n1_total, n1 = reports.list_results(session=session, filters={"n": 1}, limit=100)
        assert n1_total == len(n1) and all(row["problem"]["n"] == 1 for row in n1)
        _, fft = reports.list_results(session=session, filters={"algorithm": "fft"})
        assert {row["algorithm"] for row in fft} == {"fft"}
        device = page[0]["device"]
        by_prefix, _ = reports.list_results(session=session, filters={"device": device[:8]})
        assert by_prefix == total
        with pytest.raises(ValueError, match="unknown results filter"):
            reports.list_results(session=session, filters={"colour": "red"})
        devices = reports.list_devices(session=session)
        assert devices[0]["measurements"] == total and devices[0]["kind"] == "cpu"


@pytest.mark.parametrize("url", ["not a url", "nosuchdialect://x/y"])
def test_bad_database_url_is_a_value_error(url: str) -> None:
    with pytest.raises(ValueError, match="database URL"):
        open_store(url)


@pytest.mark.parametrize("value", ["abc", "", "+6", "6.0"])
def test_corrupt_schema_version_names_the_setting(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Review finding 12: a store whose convtune_meta.schema_version was 'abc' gave
    # "invalid literal for int() with base 10: 'abc'", naming neither the setting nor the
    # database, nor saying that it is corrupt.
    from tuner.cli import main

    url = f"sqlite:///{tmp_path / 'odd.db'}"
    _store_with_schema_version(url, value)
    with pytest.raises(SchemaError, match=r"convtune_meta\.schema_version is .* in sqlite:///"
                       r".*odd\.db, not a schema version: the database is corrupt or not a "
                       r"convtune store"):
        open_store(url)
    assert main(["results", "--db", url]) == 1
    err = capsys.readouterr().err
    assert err.startswith("convtune: error: convtune_meta.schema_version is ")
    assert err.count("\n") == 1 and "corrupt or not a convtune store" in err


# Mutation gap: results come newest first (a tie in measured_at: the later written first),
# paged exactly, filtered on every kind of field with the total counting the filtered rows;
# devices come in the order first seen, one without measurements listed with 0.
def test_results_and_devices_are_ordered_paged_and_filtered_exactly(store_url: str) -> None:
    from db.keys import ensure_device
    from tests.fleet.helpers import gpu, later, row, seed

    a, b, idle = gpu(driver="1"), gpu("NVIDIA A100-SXM4-80GB", "8.0", 108), gpu(driver="3")
    store = open_store(store_url)
    seed(store, a, small_problem(), [row("direct", 1.0, at=later(0)),
                                     row("fft", 2.0, at=later(2), status="failed")])
    seed(store, a, small_problem(), [row("fft", 3.0, config="x", at=later(1))])
    seed(store, b, small_problem(n=1), [row("direct", 4.0, at=later(2))])
    with store.session() as session:
        ensure_device(session=session, fingerprint=idle.fingerprint, info=idle.info)
    with store.session() as session:
        def times(**kw: object) -> tuple[int, list[float]]:
            total, page = reports.list_results(session=session, **kw)  # type: ignore[arg-type]
            return total, [r["time_ms"] for r in page]

        assert times() == (4, [4.0, 2.0, 3.0, 1.0])
        assert times(limit=2, offset=1) == (4, [2.0, 3.0])
        assert times(filters={"algorithm": "fft", "n": None}) == (2, [2.0, 3.0])
        assert times(filters={"n": 1}) == (1, [4.0])
        assert times(filters={"status": "ok", "device": a.fingerprint[:6]}) == (2, [3.0, 1.0])
        assert [r["device_name"] for r in reports.list_results(session=session)[1]][:2] == [
            b.info["name"], a.info["name"]]
        assert [(d["fingerprint"], d["measurements"])
                for d in reports.list_devices(session=session)] == [
            (a.fingerprint, 3), (b.fingerprint, 1), (idle.fingerprint, 0)]
