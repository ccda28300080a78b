"""Read-only stores: a fleet's shared cache on a read-only volume or behind a read-only role
answers what it holds; anything that would write is refused in one line, naming the store."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from db.engine import close_stores, open_store
from db.errors import StoreReadOnly
from db.migrations import SCHEMA_VERSION
from tests.tuner.fakes import small_problem
from tuner import find_algorithms, find_best_algorithm
from tuner.cli import main
from tuner.service import service


def _read_only_sqlite(path: Path) -> str:
    """The SQLite URL of `path` opened read-only (what a read-only volume allows)."""
    return f"sqlite:///file:{path}?mode=ro&uri=true"


def _rows(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM measurements")).scalar_one())
    finally:
        engine.dispose()


@pytest.fixture
def tuned(tmp_path: Path) -> tuple[str, str]:
    """(writable URL, read-only URL) of a store holding small_problem()'s measurements."""
    path = tmp_path / "fleet.db"
    writable = f"sqlite:///{path}"
    find_algorithms(small_problem(), device="cpu", db=writable)
    close_stores()  # the last connection's close checkpoints the WAL into the file
    return writable, _read_only_sqlite(path)


def test_a_read_only_store_answers_what_it_holds(tuned: tuple[str, str]) -> None:
    # Bug: opening a store always wrote its schema version, even when it was already
    # current, so a read-only store failed to open: "(sqlite3.OperationalError) attempt to
    # write a readonly database" on every call, cached finds included.
    writable, read_only = tuned
    stored = {(r.algorithm, r.config, r.time_ms)
              for r in find_algorithms(small_problem(), device="cpu", db=writable,
                                       mode="cached")}
    close_stores()
    for mode in ("cached", "auto", "heuristic"):
        got = find_algorithms(small_problem(), device="cpu", db=read_only, mode=mode)
        assert {(r.algorithm, r.config, r.time_ms) for r in got} == stored, mode
    assert find_best_algorithm(small_problem(), device="cpu", db=read_only).source \
        == "measured here"


def test_a_measurement_asked_of_a_read_only_store_is_refused_in_one_line(
    tuned: tuple[str, str],
) -> None:
    writable, read_only = tuned
    before = _rows(writable)
    with pytest.raises(StoreReadOnly) as caught:
        find_algorithms(small_problem(h=11), device="cpu", db=read_only)
    message = str(caught.value)
    assert "\n" not in message
    assert "is read-only" in message and "fleet.db" in message and "'cached'" in message
    with pytest.raises(StoreReadOnly):
        service(read_only).import_bundle(service(writable).export_bundle())
    assert _rows(writable) == before


def test_a_read_only_store_of_an_older_schema_says_it_needs_an_upgrade(
    tuned: tuple[str, str],
) -> None:
    writable, read_only = tuned
    engine = create_engine(writable)
    with engine.begin() as conn:
        conn.execute(text("UPDATE convtune_meta SET value = :v WHERE key = 'schema_version'"),
                     {"v": str(SCHEMA_VERSION - 1)})
    engine.dispose()
    with pytest.raises(StoreReadOnly, match=r"older than this convtune's.*write access"):
        open_store(read_only)


def test_the_cli_refuses_a_tuning_into_a_read_only_store_in_one_line(
    tuned: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, read_only = tuned
    problem = ["--n", "2", "--c", "4", "--h", "9", "--w", "7", "--k", "6", "--r", "3",
               "--s", "3", "--pad", "1", "--device", "cpu", "--db", read_only]
    assert main(["find", *problem, "--mode", "cached"]) == 0
    capsys.readouterr()
    problem[problem.index("--h") + 1] = "11"
    assert main(["find", *problem]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("convtune: error: the store ") and "read-only" in lines[-1]
    assert not any("Traceback" in line for line in lines)


@pytest.mark.postgres
def test_a_read_only_postgresql_role_answers_and_refuses_writes(pg_url: str) -> None:
    find_algorithms(small_problem(), device="cpu", db=pg_url)
    close_stores()
    # Every transaction read-only, as on a hot standby or for a role set up to read only.
    read_only = make_url(pg_url).update_query_dict(
        {"options": "-c default_transaction_read_only=on"}).render_as_string(
            hide_password=False)
    got = find_algorithms(small_problem(), device="cpu", db=read_only, mode="cached")
    assert any(r.status == "ok" for r in got)
    with pytest.raises(StoreReadOnly, match="read-only"):
        find_algorithms(small_problem(h=11), device="cpu", db=read_only)
