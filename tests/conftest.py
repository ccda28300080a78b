"""Shared fixtures: every test gets its own SQLite database and a quick timing policy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from db.engine import close_stores


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Never touch the user's own database; keep timing short on a 2-core CI machine.
    monkeypatch.setenv("CONVTUNE_DB_URL", f"sqlite:///{tmp_path / 'convtune.db'}")
    monkeypatch.setenv("CONVTUNE_MODEL_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("CONVTUNE_BUDGET_S", "0.01")
    monkeypatch.setenv("CONVTUNE_MIN_REPS", "2")
    monkeypatch.setenv("CONVTUNE_MAX_REPS", "5")
    yield
    close_stores()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A fresh SQLite database URL (the same one CONVTUNE_DB_URL names)."""
    return f"sqlite:///{tmp_path / 'convtune.db'}"


@pytest.fixture
def rng() -> np.random.Generator:
    """Fresh random inputs every run (seeded from the OS, never zeros)."""
    return np.random.default_rng()
