"""A broken database behind the service: a 503 that says what is wrong."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from api.app import create_app
from api.settings import Settings
from db.engine import close_stores
from tests.api.conftest import TestClient


def test_corrupt_database_over_http_says_what_is_wrong(tmp_path: Path) -> None:
    # Issue 12 (5): the service answered a bare 500 "internal error: DatabaseError".
    path = tmp_path / "broken.db"
    path.write_bytes(b"definitely not sqlite " * 100)
    settings = replace(Settings.from_env(), db_url=f"sqlite:///{path}")
    with TestClient(create_app(settings)) as client:
        response = client.get("/v1/results")
    assert response.status_code == 503
    assert "not a usable SQLite database" in response.json()["detail"]


def test_a_read_only_store_answers_and_refuses_measurements_with_403(tmp_path: Path) -> None:
    # Bug: a read-only store (a fleet's shared cache on a read-only volume) could not be
    # opened at all, since every open wrote its schema version: every route was a 503
    # "attempt to write a readonly database". Now it answers what it holds; a request that
    # would measure or write is a 403 saying so, without the store's location.
    path = tmp_path / "fleet.db"
    problem = {"n": 1, "c": 3, "h": 6, "w": 6, "k": 2, "r": 3, "s": 3, "pad": 1}
    writable = replace(Settings.from_env(), db_url=f"sqlite:///{path}")
    with TestClient(create_app(writable)) as client:
        assert client.post("/v1/find", json={"problem": problem, "device": "cpu"}).is_success
    close_stores()
    read_only = replace(writable, db_url=f"sqlite:///file:{path}?mode=ro&uri=true")
    with TestClient(create_app(read_only)) as client:
        cached = client.post("/v1/find",
                             json={"problem": problem, "device": "cpu", "mode": "cached"})
        assert cached.status_code == 200 and cached.json()["best"]["status"] == "ok"
        new = client.post("/v1/find", json={"problem": {**problem, "h": 7}, "device": "cpu"})
        assert new.status_code == 403
        assert new.json()["detail"].startswith("this server's store is read-only")
        assert str(tmp_path) not in new.text


# Mutation gap: a database error raised as SQLAlchemy's own (not the store's translation)
# must still be a one-line 503, never a 500 or a multi-line detail.
def test_a_raw_database_error_is_a_one_line_503(db_url: str, monkeypatch: Any) -> None:
    import os

    from sqlalchemy.exc import OperationalError

    from tuner.service import Service

    why = f"disk I/O error {os.urandom(3).hex()}"

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise OperationalError("SELECT 1", {}, Exception(f"{why}\nsecond line\nthird"))

    monkeypatch.setattr(Service, "results", broken)
    with TestClient(create_app(replace(Settings.from_env(), db_url=db_url))) as client:
        response = client.get("/v1/results")
    assert response.status_code == 503, response.text
    assert response.json()["detail"] == f"database error: {why}"
