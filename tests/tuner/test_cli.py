"""The convtune command line: tables, JSON, and one-line errors with a non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from algorithms.registry import algorithms_for
from tuner.cli import main
from tuner.version import TUNER_VERSION

ROOT = Path(__file__).resolve().parents[2]
FIND = [
    "find",
    "--n",
    "2",
    "--c",
    "4",
    "--h",
    "9",
    "--w",
    "7",
    "--k",
    "6",
    "--r",
    "3",
    "--s",
    "3",
    "--pad",
    "1",
    "--device",
    "cpu",
]


def test_find_json_lists_all_algorithms(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*FIND, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["problem"]["pad_h"] == 1
    # Every implemented name, the GPU-only implicit_gemm_tc included (listed as unsupported).
    names = [a.name for a in algorithms_for("cpu")]
    assert sorted(r["algorithm"] for r in data["results"]) == sorted(names)


def test_find_table_and_workspace_limit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*FIND, "--workspace-limit", "0"]) == 0
    out = capsys.readouterr().out
    assert "over_workspace_limit" in out and "direct" in out


def test_tune_network_then_results_and_devices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "--model", "alexnet", "--batch", "1", "--device", "cpu", "--json"]) == 0
    tuned = json.loads(capsys.readouterr().out)["results"]
    assert len(tuned) == 5 and all(r["status"] == "ok" for r in tuned)
    assert main(["tune", "--model", "alexnet", "--batch", "1", "--device", "cpu"]) == 0
    assert "0 measured now, 5 from the database" in capsys.readouterr().out.replace("\n", " ")
    assert main(["results", "--json", "--limit", "3"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["total"] >= 20 and len(listed["results"]) == 3
    assert main(["devices", "--json"]) == 0
    devices = json.loads(capsys.readouterr().out)
    assert devices["here"][0]["device"] == "cpu"
    assert devices["database"][0]["measurements"] == listed["total"]
    assert main(["algorithms"]) == 0
    assert "implicit_gemm" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tune", "--model", "lenet", "--device", "cpu"], "unknown network 'lenet'"),
        (["tune", "--model", "alexnet", "--batch", "0"], "--batch"),
        ([*FIND[:-2], "--device", "tpu"], "unknown device"),
        ([*FIND, "--pad", "1,2,3"], "--pad"),
        ([*FIND, "--groups", "3"], "groups=3 does not divide c=4"),
        ([*FIND, "--dtype", "int8"], "dtype"),
        ([*FIND, "--db", "nosuchdialect://x"], "database URL"),
    ],
)
def test_errors_are_one_line_and_nonzero(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and "Traceback" not in err
    assert len(err.splitlines()) == 1


def test_installed_entry_point_runs_as_a_process(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner.cli",
            "find",
            "--n",
            "0",
            "--c",
            "1",
            "--h",
            "4",
            "--w",
            "4",
            "--k",
            "1",
            "--r",
            "1",
            "--s",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert (
        bad.returncode != 0 and bad.stderr.strip() == "convtune: error: n must be positive, got 0"
    )
    ok = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "algorithms", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert ok.returncode == 0 and "direct" in json.loads(ok.stdout)["algorithms"]


def test_find_with_math(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*FIND, "--math", "tf32", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["problem"]["math"] == "tf32"
    # TF32 is a float32 choice: asking for it with float16 is a one-line usage error.
    assert main([*FIND, "--math", "tf32", "--dtype", "float16"]) != 0
    err = capsys.readouterr().err.strip()
    assert "applies to float32 only" in err and len(err.splitlines()) == 1


def test_tune_all_directions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "--model", "alexnet", "--batch", "1", "--device", "cpu",
                 "--directions", "all", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    directions = {r["problem"]["direction"] for r in rows}
    assert directions == {"forward", "backward_data", "backward_filter"}
    assert all(r["status"] == "ok" for r in rows)
    assert main(["tune", "--model", "alexnet", "--directions", "sideways"]) != 0
    assert "--directions must be" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # Issue 12 (1): typer 0.29 raises its own click copy's exceptions, which the CLI did
        # not catch: every usage error below printed a 30-55 line traceback.
        (["find", "--n", "abc"], "Invalid value for '--n'"),
        (["find", "--bogus"], "No such option: --bogus"),
        (["results", "--limit", "0"], "Invalid value for '--limit'"),
        (["nosuchcommand"], "No such command"),
        (["find", "--n", "1"], "Missing option"),
    ],
)
def test_usage_errors_are_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("convtune: error: ") and says in lines[0]
    assert "Traceback" not in captured.out + captured.err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"convtune {TUNER_VERSION}"
