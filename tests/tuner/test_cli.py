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
    # VGG-16's 3x3 layers are predicted from AlexNet's (too few rows for the model yet).
    assert main(["tune", "--model", "vgg16", "--device", "cpu", "--mode", "heuristic"]) == 0
    assert "0 measured now, 0 from the database, 9 predicted" in \
        capsys.readouterr().out.replace("\n", " ")
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
        ([*FIND, "--mode", "quick"], "Invalid value for '--mode'"),
        (["tune", "--model", "alexnet", "--mode", "FAST"], "Invalid value for '--mode'"),
        # Review finding 8: --log-level was a free string handed to uvicorn, and a bad one
        # printed the database line, then "convtune: error: 'bogus'" (a KeyError), exit 1.
        (["serve", "--log-level", "bogus"],
         "Invalid value for '--log-level': must be one of critical, error, warning, info, "
         "debug, trace"),
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


def test_heuristic_tune_measures_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    # An empty database: nothing to predict from, and nothing measured to find that out.
    assert main(["tune", "--model", "alexnet", "--device", "cpu", "--mode", "heuristic"]) == 1
    assert "nothing to predict" in capsys.readouterr().err
    assert main(["results", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 0


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["warm", "--model", "alexnet", "--device", "cpu"], "compile no kernels"),
        (["warm", "--device", "cuda:0"], "give exactly one of --model NAME or --onnx PATH"),
        (["warm", "--model", "alexnet", "--batch", "0", "--device", "cuda:0"], "batch"),
        (["warm", "--model", "nonet", "--device", "cuda:0"], "unknown network 'nonet'"),
    ],
)
def test_warm_errors_are_one_line_and_nonzero(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err and "Traceback" not in err


class _Warmable:
    """A GPU runtime that builds one kernel per candidate, and fails on one of them."""

    def __init__(self) -> None:
        self.prepared: list[tuple[object, list[tuple[str, str]]]] = []

    def activate(self) -> object:
        from contextlib import nullcontext

        return nullcontext()

    def prepare(self, problem: object, candidates: object) -> object:
        from algorithms.runtime import Prepared

        names = [(a.name, c) for a, c in candidates]  # type: ignore[attr-defined]
        self.prepared.append((problem, names))
        failed = tuple(f"k{i}.cu x: RuntimeError: no" for i in range(3))
        return Prepared(len(names) - 3, failed, 4, 0.5)


def test_warm_builds_each_convolutions_candidates_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from algorithms.registry import algorithms_for
    from tuner import warming
    from tuner.candidates import enumerate_candidates
    from tuner.networks import network_problems

    runtime = _Warmable()
    monkeypatch.setattr(warming, "get_runtime", lambda device: runtime)
    # Batch 1 twice: the same convolutions, built once.
    assert main(["warm", "--model", "alexnet", "--batch", "1,1", "--device", "cuda:0"]) == 0
    problems = [p for _, p in network_problems("alexnet", 1)]
    assert [p for p, _ in runtime.prepared] == problems
    offered = enumerate_candidates(tuple(algorithms_for("cuda")), problems[0], "cuda")[0]
    assert runtime.prepared[0][1] == [(c.algorithm.name, c.config) for c in offered]
    err = capsys.readouterr().err.strip().splitlines()
    built = sum(len(names) - 3 for _, names in runtime.prepared)
    assert err[0].startswith(f"convtune: {built} kernel instances built for 5 convolutions "
                             "on cuda:0 in ")
    assert err[1:6] == ["convtune: warning: not built: k0.cu x: RuntimeError: no",
                        "convtune: warning: not built: k1.cu x: RuntimeError: no",
                        "convtune: warning: not built: k2.cu x: RuntimeError: no",
                        "convtune: warning: not built: k0.cu x: RuntimeError: no",
                        "convtune: warning: not built: k1.cu x: RuntimeError: no"]
    assert err[6] == "convtune: warning: 10 more not built" and len(err) == 7


def test_ctrl_c_says_aborted_and_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Bug: with typer 0.29, Ctrl-C during a command exited 130 without a word (typer turned
    # the KeyboardInterrupt into Exit(130), which main got back as a plain return value).
    from tuner.service import Service

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Service, "find", interrupted)
    assert main(FIND) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "convtune: aborted"
