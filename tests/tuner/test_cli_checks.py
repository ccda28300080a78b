"""The CLI checks before it opens anything (a review of its bad input, 2026-11-30): bad
arguments before the store, commands that only read never creating one, serve's own
configuration and address before uvicorn starts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tuner.test_cli import FIND, ROOT
from tuner.cli import main


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("convtune: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([*FIND, "--workspace-limit", "-5"], "workspace_limit must be non-negative"),
        (["tune", "--model", "alexnet", "--device", "cpu", "--workspace-limit", "-1"],
         "workspace_limit must be non-negative"),
        ([*FIND[:-2], "--device", "cuda:999999"], "cuda:999999"),
        (["tune", "--model", "alexnet", "--device", "cuda:999999"], "cuda:999999"),
    ],
)
def test_find_and_tune_check_arguments_before_opening_the_store(
    argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Review finding 6: --workspace-limit and the device's usability were checked after the
    # store was opened (created) and "convtune: database ..." printed, and in tune inside
    # the progress bar, whose last state was left on stderr: 2-3 lines and a new store.
    path = tmp_path / "new.db"
    assert main([*argv, "--db", f"sqlite:///{path}"]) == 1
    assert says in _one_error_line(capsys.readouterr().err)
    assert not path.exists()


@pytest.mark.parametrize("batch", ["1,,2", ",8,", "8,", " 1 , , 2 "])
def test_batch_lists_with_empty_items_are_refused(
    batch: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Review finding 11: empty items were dropped, so '1,,2' tuned batches 1 and 2 and
    # ',8,' batch 8, and a typo in the list went unnoticed.
    assert main(["tune", "--model", "alexnet", "--batch", batch, "--device", "cpu"]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert line == f"convtune: error: --batch must be positive ints separated by commas, " \
                   f"got {batch!r}"


@pytest.mark.parametrize(
    "argv", [["results"], ["devices"], ["export"], ["push", "--server", "http://127.0.0.1:9"]]
)
def test_commands_that_only_read_never_create_a_store(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Review finding 5: a --db naming no file (a typo) was created, directories and an
    # empty schema included, even by commands that only read: they answered with an empty
    # table or bundle, exit 0, and left a stray store.
    path = tmp_path / "typo" / "convtnue.db"
    assert main([*argv, "--db", f"sqlite:///{path}"]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert line == f"convtune: error: no database at {path} (nothing has been stored there yet)"
    assert not path.parent.exists()
    # The default store (here $CONVTUNE_DB_URL, see conftest) is no different.
    default = tmp_path / "convtune.db"
    assert main(argv) == 1
    assert f"no database at {default}" in _one_error_line(capsys.readouterr().err)
    assert not default.exists()


def test_commands_that_write_still_create_their_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Review finding 5, the other side: tuning creates the store, and the reads then work;
    # an in-memory database has no file to look for.
    path = tmp_path / "fresh" / "convtune.db"
    url = f"sqlite:///{path}"
    assert main(["tune", "--model", "alexnet", "--device", "cpu", "--db", url, "--json"]) == 0
    assert path.exists()
    capsys.readouterr()
    assert main(["results", "--db", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] >= 5
    assert main(["results", "--db", "sqlite://", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 0


@pytest.fixture
def uvicorn_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Any, dict[str, Any]]]]:
    """uvicorn.run recorded, not run: what `serve` would have served."""
    uvicorn = pytest.importorskip("uvicorn")
    calls: list[tuple[Any, dict[str, Any]]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.append((app, kwargs)))
    yield calls


@pytest.mark.parametrize(
    ("argv", "env", "says"),
    [
        (["serve", "--db", "notaurl"], {}, "invalid database URL 'notaurl'"),
        (["serve", "--db", "foo://bar"], {}, "foo://bar"),
        (["serve"], {"CONVTUNE_BUDGET_S": "abc"}, "CONVTUNE_BUDGET_S"),
    ],
)
def test_serve_refuses_its_own_misconfiguration_before_starting(
    argv: list[str], env: dict[str, str], says: str, uvicorn_runs: list[Any],
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    # Review finding 3: uvicorn built the app from its factory only once it was running,
    # so `serve --db notaurl` started, and then every request, /healthz included, failed.
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main([*argv, "--port", "0"]) == 1
    assert says in _one_error_line(capsys.readouterr().err)
    assert uvicorn_runs == []


def test_serve_runs_the_app_it_checked(
    uvicorn_runs: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # Review finding 3: one worker serves the very app built (and checked) before uvicorn
    # starts, not a second one built from the factory.
    assert main(["serve", "--port", "0"]) == 0
    assert capsys.readouterr().err.startswith("convtune: database ")
    [(served, kwargs)] = uvicorn_runs
    assert callable(served) and not isinstance(served, str) and not kwargs["factory"]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port that something here is listening on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_serve_that_cannot_listen_is_one_line(busy_port: int) -> None:
    # Review finding 9: a port in use or a bad --host gave uvicorn's 7 log lines (after the
    # database line) and exit 3, never a "convtune: error:" line.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for host, port, why in (("127.0.0.1", busy_port, "address already in use"),
                            ("999.999.0.1", 8000, "")):
        done = subprocess.run(
            [sys.executable, "-m", "tuner.cli", "serve", "--host", host, "--port", str(port)],
            capture_output=True, text=True, env=env, timeout=120,
        )
        assert done.returncode == 1, done.stderr
        line = _one_error_line(done.stderr)
        assert line.startswith(f"convtune: error: cannot listen on {host}:{port}: ") and why in line


def test_a_direction_named_twice_is_tuned_once() -> None:
    # Review of the backward pass, finding 6: '--directions forward,forward' tuned, printed
    # and counted every layer twice.
    from tuner.cli.arguments import parse_directions

    assert parse_directions("forward,forward") == ("forward",)
    assert parse_directions("backward_data, forward,backward_data") == \
        ("backward_data", "forward")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "tuning-hub"])
def test_serve_beyond_loopback_needs_a_token_or_its_flag(
    host: str, uvicorn_runs: list[Any], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Bug (a review of security): `serve --host 0.0.0.0` without $CONVTUNE_API_TOKEN started
    # silently, open to anyone's tuning requests and pushed bundles.
    monkeypatch.delenv("CONVTUNE_API_TOKEN", raising=False)
    from tuner.cli import serve as serve_module

    monkeypatch.setattr(serve_module, "_check_listen", lambda host, port: None)
    assert main(["serve", "--host", host, "--port", "0"]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert f"--host {host} can be reached from other machines" in line
    assert "--allow-open-writes" in line and uvicorn_runs == []
    assert main(["serve", "--host", host, "--port", "0", "--allow-open-writes"]) == 0
    monkeypatch.setenv("CONVTUNE_API_TOKEN", "t")
    assert main(["serve", "--host", host, "--port", "0"]) == 0
    monkeypatch.delenv("CONVTUNE_API_TOKEN")
    # Loopback however spelled (the review of the session's changes refused these).
    locals_ = ("127.0.0.1", "::1", "localhost", "LOCALHOST", "localhost.", "127.1",
               "::ffff:127.0.0.1", "127.0.0.2")
    for local in locals_:
        assert main(["serve", "--host", local, "--port", "0"]) == 0, local
    assert len(uvicorn_runs) == 2 + len(locals_)
