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

import numpy as np
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
    "argv", [["results"], ["devices"], ["export"], ["push", "--server", "http://127.0.0.1:9"],
             # Mutation gap: prune (without --yes it only counts) was not among the reads.
             ["prune", "--stale"]]
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


class _Failing:
    """A stand-in store facade whose every read raises `error`."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def results(self, *_args: Any, **_kwargs: Any) -> Any:
        raise self.error


def _failing_results(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    from tuner.cli import core

    monkeypatch.setattr(core, "stored_url", lambda db: "sqlite://")
    monkeypatch.setattr(core, "service", lambda url: _Failing(error))


# Mutation gap: an error whose message has several lines was only ever met with one-line
# messages, so printing all of its lines went unseen.
def test_a_several_line_error_is_printed_as_its_first_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first = f"store answer {os.urandom(4).hex()} is unusable"
    _failing_results(monkeypatch, ValueError(f"{first}\n  detail line\nanother line"))
    assert main(["results"]) == 1
    assert _one_error_line(capsys.readouterr().err) == f"convtune: error: {first}"


# Mutation gap: a raw SQLAlchemy error reaching the CLI (one the store does not translate)
# was never tried, so dropping it from the errors main() catches left a traceback unseen.
def test_a_database_error_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sqlalchemy.exc import OperationalError

    why = f"database is locked {os.urandom(3).hex()}"
    _failing_results(monkeypatch, OperationalError("SELECT 1", {}, Exception(why)))
    assert main(["results"]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert why in line


# Mutation gap: plain `convtune` (no arguments) shows the help and exits 0; its exit status
# was never checked.
def test_no_arguments_shows_the_help_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    captured = capsys.readouterr()
    assert "Usage:" in captured.out + captured.err
    assert "Traceback" not in captured.out + captured.err and "error" not in captured.err


def _tiny_find(rng: Any) -> list[str]:
    """`find` of a small random problem on the CPU (sizes drawn afresh, never zero)."""
    c, k = (int(v) for v in rng.integers(1, 4, size=2))
    h, w = (int(v) for v in rng.integers(4, 8, size=2))
    return ["find", "--n", "1", "--c", str(c), "--h", str(h), "--w", str(w), "--k", str(k),
            "--r", "3", "--s", "3", "--pad", "1", "--device", "cpu"]


# Mutation gap: find --json's documented shape ({"problem", "device", "results"}) was read
# for its problem and results only; the device it answered for could go missing.
def test_find_json_names_the_device_and_the_direction(
    rng: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _tiny_find(rng)
    assert main([*argv, "--direction", "backward_data", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"problem", "device", "results"} and data["device"] == "cpu"
    # Mutation gap: --direction was never given to find, so ignoring it went unseen.
    assert data["problem"]["direction"] == "backward_data"
    assert {r["status"] for r in data["results"]} >= {"ok"}


# Mutation gap: find --mode cached was only run where the answer was stored, so a find that
# ignored --mode (and measured) passed; on an empty store it must refuse and store nothing.
def test_find_cached_on_an_empty_store_is_one_line_and_measures_nothing(
    rng: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    assert main([*_tiny_find(rng), "--mode", "cached", "--db", url]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("convtune: database ") and len(lines) == 2
    assert "has not been measured" in _one_error_line(lines[1])
    assert main(["results", "--db", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 0


# Mutation gap: in-memory SQLite spelled sqlite:///:memory: (not only sqlite://) is no file
# to look for; a read command given it must answer, not say "no database at :memory:".
@pytest.mark.parametrize("argv", [["results", "--json"], ["devices", "--json"]])
def test_reads_of_an_in_memory_store_answer(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--db", "sqlite:///:memory:"]) == 0, capsys.readouterr().err
    json.loads(capsys.readouterr().out)


class _Recording:
    """A stand-in store facade: records what find and best were asked, answers one row."""

    location = "sqlite:// (a stand-in)"

    def __init__(self, time_ms: float) -> None:
        self.asked: list[tuple[Any, ...]] = []
        self.time_ms = time_ms

    def _answer(self) -> Any:
        from tuner.results import AlgorithmResult

        return AlgorithmResult("direct", "default", "ok", self.time_ms, 0, source="fresh",
                               device="cpu-stand-in")

    def find(self, problem: Any, device: str, limit: int | None, *, mode: str) -> list[Any]:
        self.asked.append((problem, device, limit, mode))
        return [self._answer()]

    def best(self, problem: Any, device: str, limit: int | None, *, mode: str) -> Any:
        self.asked.append((problem, device, limit, mode))
        return self._answer()


# Mutation gap: tune's --workspace-limit and --mode were checked for their refusals only;
# a tune that dropped either (tuning every layer unbounded, or measuring in mode cached)
# passed. Also pins tune --json's shape: model, device, and per row batch and layer.
def test_tune_passes_its_limit_and_mode_to_every_layer(
    rng: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tuner.cli import core
    from tuner.networks import network_problems

    facade = _Recording(float(rng.uniform(0.5, 5.0)))
    monkeypatch.setattr(core, "service", lambda db: facade)
    limit, batch = int(rng.integers(1, 2**20)), int(rng.integers(2, 9))
    mode = str(rng.choice(["cached", "fast", "tune", "heuristic"]))
    assert main(["tune", "--model", "alexnet", "--batch", str(batch), "--device", "cpu",
                 "--workspace-limit", str(limit), "--mode", mode, "--json"]) == 0
    layers = network_problems("alexnet", batch)
    assert [(p, "cpu", limit, mode) for _, p in layers] == facade.asked
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "alexnet" and data["device"] == "cpu"
    assert [(r["batch"], r["layer"], r["time_ms"]) for r in data["results"]] == \
        [(batch, layer.name, facade.time_ms) for layer, _ in layers]


# Mutation gap: find's --mode and --workspace-limit reach the store facade as given (the
# table test used limit 0 only, the read-only tests a mode whose answer was stored).
def test_find_passes_its_limit_and_mode(
    rng: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tuner.cli import core

    facade = _Recording(float(rng.uniform(0.5, 5.0)))
    monkeypatch.setattr(core, "service", lambda db: facade)
    limit = int(rng.integers(1, 2**30))
    mode = str(rng.choice(["cached", "fast", "tune", "heuristic", "exhaustive"]))
    assert main([*_tiny_find(rng), "--workspace-limit", str(limit), "--mode", mode,
                 "--json"]) == 0
    [(_problem, device, given, asked_mode)] = facade.asked
    assert (device, given, asked_mode) == ("cpu", limit, mode)
    assert json.loads(capsys.readouterr().out)["results"][0]["time_ms"] == facade.time_ms


# Mutation gap: --batch's ASCII rule was only tried on empty items; digits of other scripts
# (which int() reads) must be refused as well.
# Arabic-Indic, Devanagari and fullwidth digits.
@pytest.mark.parametrize("digit", ["\u0661", "\u0967", "\uff18"])
def test_batch_of_other_scripts_digits_is_refused(
    digit: str, capsys: pytest.CaptureFixture[str]
) -> None:
    batch = f"{int(os.urandom(1)[0]) % 9 + 1},{digit}"
    assert main(["tune", "--model", "alexnet", "--batch", batch, "--device", "cpu"]) == 1
    assert _one_error_line(capsys.readouterr().err) == (
        f"convtune: error: --batch must be positive ints separated by commas, got {batch!r}")


# Mutation gap: the read-only store URL the README documents
# ('sqlite:///file:PATH?mode=ro&uri=true') was never given to a command that only reads,
# which must open it, not look for a file named "file:PATH...".
def test_reads_take_an_sqlite_uri(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from db.engine import open_store

    path = tmp_path / f"ro-{os.urandom(3).hex()}.db"
    open_store(f"sqlite:///{path}")  # the schema, nothing stored
    assert main(["results", "--json", "--db", f"sqlite:///file:{path}?mode=ro&uri=true"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 0


# Mutation gap: `serve --workers N` must keep a user's own $PROMETHEUS_MULTIPROC_DIR (the
# README: "set it yourself to keep them elsewhere"), neither pointing the workers at a
# fresh directory of its own nor unsetting or emptying the user's afterwards.
def test_serve_with_workers_keeps_the_users_metrics_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    uvicorn = pytest.importorskip("uvicorn")
    from tuner.cli.serve import MULTIPROC_ENV

    mine = tmp_path / f"metrics-{os.urandom(4).hex()}"
    mine.mkdir()
    (mine / "counter_1.db").write_bytes(os.urandom(64))  # a file of the user's own
    monkeypatch.setenv(MULTIPROC_ENV, str(mine))
    seen: list[tuple[str | None, dict[str, Any]]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: seen.append(
        (os.environ.get(MULTIPROC_ENV), kwargs)))
    workers = int(np.random.default_rng().integers(2, 9))
    assert main(["serve", "--workers", str(workers), "--port", "0"]) == 0, \
        capsys.readouterr().err
    [(during, kwargs)] = seen
    assert during == str(mine) and kwargs["workers"] == workers
    assert os.environ.get(MULTIPROC_ENV) == str(mine)  # still set afterwards
    assert [p.name for p in mine.iterdir()] == ["counter_1.db"]  # nothing removed


def test_serve_with_workers_sets_and_removes_a_metrics_directory_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The other side of the test above: without the variable, the workers get a fresh
    # directory, which is gone afterwards, and the variable with it.
    uvicorn = pytest.importorskip("uvicorn")
    from tuner.cli.serve import MULTIPROC_ENV

    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    seen: list[str | None] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: seen.append(
        os.environ.get(MULTIPROC_ENV)))
    assert main(["serve", "--workers", "2", "--port", "0"]) == 0
    [during] = seen
    assert during is not None and Path(during).name.startswith("convtune-metrics-")
    assert MULTIPROC_ENV not in os.environ and not Path(during).exists()
