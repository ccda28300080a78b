"""Fixtures for the HTTP service: an app on the per-test database, tiny problems, .npy bytes."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, select

from api.app import create_app
from api.settings import Settings
from db.engine import open_store
from db.models import Measurement

with warnings.catch_warnings():  # starlette's TestClient warns about httpx vs httpx2
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

#: A problem that tunes in a few tens of milliseconds.
TINY: dict[str, Any] = {"n": 1, "c": 2, "h": 6, "w": 5, "k": 2, "r": 3, "s": 3, "pad": 1}


@pytest.fixture
def make_client(db_url: str) -> Iterator[Callable[..., TestClient]]:
    """Build a TestClient for an app with settings overridden by keyword."""
    clients: list[TestClient] = []

    def make(**overrides: Any) -> TestClient:
        settings = replace(Settings.from_env(), db_url=db_url, **overrides)
        client = TestClient(create_app(settings))
        client.__enter__()  # runs the lifespan: jobs stop at teardown
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    """A client for an app with the default settings (no token) on the test's database."""
    return make_client()


def stored_rows(db_url: str) -> int:
    """How many measurements the database holds."""
    with open_store(db_url).session() as session:
        return int(session.execute(select(func.count()).select_from(Measurement)).scalar_one())


def npy(array: np.ndarray) -> bytes:
    """`array` as .npy bytes."""
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def from_npy(data: bytes) -> np.ndarray:
    """.npy bytes as an array."""
    return np.load(io.BytesIO(data), allow_pickle=False)
