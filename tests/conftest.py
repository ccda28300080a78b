"""Shared fixtures: every test gets its own SQLite database and a quick timing policy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from algorithms.cuda import _counters
from algorithms.cuda.runtime import cuda_available
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


#: Whether a GPU is usable here, looked up once, not per test. CuPy installed where there is
#: no GPU (a CPU machine with the cuda extra) is no GPU: its device calls all fail.
_GPU_USABLE = cuda_available()[0]


@pytest.fixture(autouse=True)
def _host_counters_without_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # Split K's tile counters (algorithms.cuda._counters) come from CuPy's device memory.
    # Without a GPU, runs of the CUDA algorithms over stand-in kernels (host checks, launch
    # counts) get host memory posing as device memory: the stand-ins never read it, the
    # emulator's kernels do. (It asked whether CuPy was installed: with CuPy but no GPU,
    # every such split-K run failed on CuPy's device call.)
    if not _GPU_USABLE:
        from tests.cuda_emu.host import dev

        monkeypatch.setattr(_counters, "zeros", lambda nbytes: dev(np.zeros(nbytes, np.uint8)))


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A fresh SQLite database URL (the same one CONVTUNE_DB_URL names)."""
    return f"sqlite:///{tmp_path / 'convtune.db'}"


@pytest.fixture
def rng() -> np.random.Generator:
    """Fresh random inputs every run (seeded from the OS, never zeros)."""
    return np.random.default_rng()
