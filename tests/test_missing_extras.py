"""A feature whose extra is not installed says which extra to install (a review of
packaging, 2026-11-30: raw ModuleNotFoundErrors, or "unsupported database URL")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from api.app import create_app
from api.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def _without(module: str, statement: str) -> subprocess.CompletedProcess[str]:
    """Run `statement` in a fresh Python where `module` cannot be imported."""
    code = f"import sys; sys.modules[{module!r}] = None\n{statement}"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)


def test_the_torch_module_names_its_extra() -> None:
    done = _without("torch", "import tuner.nn")
    assert done.returncode != 0
    assert "tuner.nn needs PyTorch: pip install 'convtune[torch]'" in done.stderr


def test_a_postgresql_url_without_its_driver_names_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    url = "postgresql+psycopg://u:s3cret@db.example/x"
    with pytest.raises(ValueError) as refused:
        create_app(Settings(db_url=url))
    text = str(refused.value)
    assert "the driver of database URL 'postgresql+psycopg://u:***@db.example/x' is not " \
           "installed" in text and "pip install 'convtune[postgres]'" in text


def test_cuda_without_cupy_names_the_extra() -> None:
    done = _without("cupy", "from algorithms.cuda.runtime import cuda_available\n"
                            "print(cuda_available()[1])")
    assert done.returncode == 0, done.stderr
    assert "pip install 'convtune[cuda]'" in done.stdout
