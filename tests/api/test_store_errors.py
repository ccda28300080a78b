"""A broken database behind the service: a 503 that says what is wrong."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from api.app import create_app
from api.settings import Settings
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
