"""benchmarks/gpu_smoke.py, the first check of a GPU session, run on the CPU backend: it must
pass where everything works and name the check that fails where something does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tuner
from benchmarks import gpu_smoke


def _smoke(tmp_path: Path) -> gpu_smoke.Smoke:
    return gpu_smoke.Smoke("cpu", f"sqlite:///{tmp_path}/smoke.db")


def test_every_check_passes_on_a_working_backend(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")  # the convolve and module checks run on torch tensors
    assert gpu_smoke.main(["--device", "cpu"]) == 0
    said = capsys.readouterr().out
    for name in ("tune", "plan", "convolve", "module"):
        assert f"ok {name} " in said
    assert "graph" not in said  # GPU only
    assert said.rstrip().endswith("smoke: all passed")


def test_a_wrong_plan_result_fails_its_check_and_the_rest_still_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")  # the convolve and module checks run on torch tensors
    real = tuner.plan

    def off_by_one(*args: Any, **kwargs: Any) -> Any:
        chosen = real(*args, **kwargs)

        def call(x: Any, w: Any, out: Any = None) -> Any:
            y = chosen(x, w, out=out)
            y += np.float32(1)  # the injected bug: every output element off by one
            return y
        call.algorithm, call.config = chosen.algorithm, chosen.config  # type: ignore[attr-defined]
        return call

    monkeypatch.setattr(tuner, "plan", off_by_one)
    lines: list[str] = []
    failed = gpu_smoke.run_checks(_smoke(tmp_path), lines.append)
    assert failed == ["plan"]
    assert [line.split()[1] for line in lines] == ["tune", "plan:", "convolve", "module"]
    assert lines[1].startswith("FAIL plan: AssertionError: plan: relative error")


def test_no_usable_algorithm_stops_at_tune(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tuner, "find_algorithms", lambda *args, **kwargs: [])
    lines: list[str] = []
    assert gpu_smoke.run_checks(_smoke(tmp_path), lines.append) == ["tune"]
    assert len(lines) == 1 and lines[0].startswith("FAIL tune: AssertionError: no usable")


@pytest.mark.parametrize("stops", ["1", "0"])
def test_a_failed_smoke_step_ends_the_gpu_session_call(tmp_path: Path, stops: str) -> None:
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    calls = tmp_path / "calls"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text(  # a Python whose smoke check fails and all else passes
        f'#!/bin/sh\necho "$*" >> "{calls}"\n'
        'case "$*" in *gpu_smoke*) exit 1 ;; esac\nexit 0\n')
    (fake / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "SMOKE_STOPS": stops}
    done = subprocess.run(["bash", "benchmarks/gpu_session.sh", "smoke", "warm"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    ran = calls.read_text()
    assert "check_cupy_surface.py" in ran and "gpu_smoke.py --device cuda" in ran
    assert ("warm_kernels.py" in ran) == (stops == "0")
    assert ("the remaining steps are skipped" in done.stdout) == (stops == "1")
    assert done.returncode == 1  # the smoke step's status
    assert (tmp_path / "out" / "logs.tgz").exists()


# Regression: splitting tests/test_cuda_host_checks.py into modules left the session
# script's default `tests` step naming the old file, which pytest would have refused on
# the GPU, failing the whole step.
def test_every_test_path_the_session_script_names_exists() -> None:
    import re

    root = Path(__file__).resolve().parents[1]
    script = (root / "benchmarks" / "gpu_session.sh").read_text()
    named = set(re.findall(r"\btests/[\w/]+(?:\.py)?", script))
    assert "tests/gpu" in named and len(named) > 5
    missing = sorted(path for path in named if not (root / path).exists())
    assert missing == []


def test_a_deadline_shrinks_the_last_steps_and_skips_what_cannot_start(tmp_path: Path) -> None:
    # Bug: the planned call's step limits summed to 720 s against a 600 s call, and a call
    # cut off by the device tool loses the step in flight: DEADLINE_S bounds every step by
    # what is left and skips a step with under 20 s.
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text(  # every step would take 100 s (not env.log's -c)
        '#!/bin/sh\ncase "$1" in -c) exit 0 ;; esac\nexec sleep 100\n')
    (fake / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "SMOKE_STOPS": "0", "DEADLINE_S": "35", "T_SMOKE": "100", "T_WARM": "100"}
    done = subprocess.run(["bash", "benchmarks/gpu_session.sh", "smoke", "warm"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=90, check=False)
    assert "== cupy_surface: exit 124, 2" in done.stdout, done.stdout  # cut at 25 s, not 100
    assert "== warm: skipped" in done.stdout and "cannot open" not in done.stderr
    assert (tmp_path / "out" / "logs.tgz").exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["logs.tgz"]
