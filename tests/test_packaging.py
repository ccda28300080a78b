"""What `pip install .` puts in site-packages: our packages, the kernels as their data."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=300, check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {done.stderr.strip()[-300:]}")
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_kernels_ship_inside_algorithms_cuda(wheel_names: list[str]) -> None:
    # Issue 12 (11): `pip install .` put a top-level `kernels` package in site-packages,
    # which collides with the widely used `kernels` project.
    assert not any(name.startswith("kernels/") for name in wheel_names)
    shipped = {Path(n).name for n in wheel_names if n.startswith("algorithms/cuda/kernels/")}
    assert {p.name for p in (ROOT / "kernels").glob("*.cu*")} <= shipped


def test_typed_and_runnable_as_a_module(wheel_names: list[str]) -> None:
    # A review of packaging (2026-11-30): only tuner was typed, so mypy skipped the
    # documented algorithms.problem.LIMITS and db.engine ("missing library stubs").
    for package in ("tuner", "algorithms", "db", "api"):
        assert f"{package}/py.typed" in wheel_names, package
    assert "tuner/__main__.py" in wheel_names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in wheel_names)
    done = subprocess.run([sys.executable, "-m", "tuner", "--version"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.startswith("convtune ")
