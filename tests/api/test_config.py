"""The server's own configuration is checked when the app is built, not blamed on clients."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from api.app import create_app
from api.settings import Settings
from tests.api.conftest import TestClient


def refusal(settings: Settings) -> str:
    """The one-line ValueError create_app raises for `settings`."""
    with pytest.raises(ValueError) as caught:
        create_app(settings)
    text = str(caught.value)
    assert "\n" not in text
    return text


# Review finding 3 (2026-11-30): a database URL that does not parse, or names a backend
# SQLAlchemy cannot load, built an app whose every route (/healthz too) answered 422, as if
# each client's request were wrong; `convtune serve` started normally.
@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("notaurl", "invalid database URL 'notaurl'"),
        ("foo://bar", "unsupported database URL 'foo://bar'"),
        ("sqlite+nosuchdriver:///x.db", "unsupported database URL"),
    ],
)
def test_unusable_database_url_is_refused_when_the_app_is_built(url: str, why: str) -> None:
    text = refusal(replace(Settings.from_env(), db_url=url))
    assert text.startswith("$CONVTUNE_DB_URL") and why in text


# Review finding 3: the refusal must not print the password of a URL it names, whether the
# URL parses (an unknown backend) or not (a port that is not a number, a plain ValueError).
@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("foo://user:s3cret@db.example/x", "foo://user:***@db.example/x"),
        ("postgresql://user:s3cret@db.example:pg/x", "postgresql://user:***@db.example:pg/x"),
        # Bug (a review of security): a password in the query (libpq's password=) printed.
        ("foo://user@db.example/x?sslmode=require&password=s3cret",
         "foo://user@db.example/x?sslmode=require&password=***"),
        ("postgresql://user@db.example:pg/x?SSLPassword=s3cret",
         "postgresql://user@db.example:pg/x?SSLPassword=***"),
        ("postgresql://user@db.example:pg/x?p%61ssword=s3cret",  # what SQLAlchemy decodes
         "postgresql://user@db.example:pg/x?p%61ssword=***"),
    ],
)
def test_refused_database_url_keeps_its_password_hidden(url: str, shown: str) -> None:
    text = refusal(replace(Settings.from_env(), db_url=url))
    assert text.startswith("$CONVTUNE_DB_URL") and "s3cret" not in text and shown in text


# Review finding 3: CONVTUNE_BUDGET_S=abc in the server's environment made every tuning
# POST /v1/find answer 422 ("bad CONVTUNE_* timing variable"); so did the race variables.
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CONVTUNE_BUDGET_S", "abc"),
        ("CONVTUNE_MAX_REPS", "1"),  # fewer than CONVTUNE_MIN_REPS (2, from tests/conftest)
        ("CONVTUNE_RACE_FACTOR", "fast"),
        ("CONVTUNE_CONFIRM_TOP", "-1"),
    ],
)
def test_bad_timing_variable_is_refused_when_the_app_is_built(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    assert f"${name}" in refusal(Settings.from_env())


# Review finding 3: a race factor under 1 passes the variable's parse, and the policy's own
# check words its refusal by field ("race factor"), not by the variable to fix.
def test_race_factor_under_one_names_the_race_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVTUNE_RACE_FACTOR", "0.5")
    text = refusal(Settings.from_env())
    assert "$CONVTUNE_RACE_" in text and "race factor must be at least 1" in text


# Review finding 3: CONVTUNE_DEVICE=gpu made /healthz and every find without a device 422.
def test_unknown_server_device_is_refused_when_the_app_is_built() -> None:
    text = refusal(replace(Settings.from_env(), device="gpu"))
    assert text.startswith("$CONVTUNE_DEVICE") and "unknown device 'gpu'" in text


# Review finding 3: the checks must leave building the app cheap and side-effect free: no
# database (nor its directory) is created, and one broken where it lies still lets the
# server start and answers its requests 503 (tests/api/test_store_errors.py).
def test_building_the_app_creates_no_database(tmp_path: Path) -> None:
    where = tmp_path / "not" / "yet"
    create_app(replace(Settings.from_env(), db_url=f"sqlite:///{where / 'convtune.db'}"))
    assert not (tmp_path / "not").exists()


# Review finding 3: a server whose configuration is fine still answers /healthz 200.
def test_valid_configuration_is_healthy(db_url: str) -> None:
    with TestClient(create_app(replace(Settings.from_env(), db_url=db_url,
                                       device="cpu"))) as client:
        assert client.get("/healthz").status_code == 200


# Bug: CONVTUNE_JOBS_KEPT=0 was accepted, and each job was then pruned by the write that
# finished it: every client's poll of its job answered 404.
def test_keeping_no_finished_jobs_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVTUNE_JOBS_KEPT", "0")
    with pytest.raises(ValueError, match=r"\$CONVTUNE_JOBS_KEPT must be positive"):
        Settings.from_env()


def test_a_read_token_without_a_write_token_is_refused(db_url: str) -> None:
    # Bug (a review of security): reads locked, writes (tuning, pushing bundles) left open.
    text = refusal(Settings(db_url=db_url, read_token="reader"))
    assert text.startswith("$CONVTUNE_READ_TOKEN is set but $CONVTUNE_API_TOKEN is not")
    create_app(Settings(db_url=db_url, api_token="writer", read_token="reader"))


# The secrets of `convtune serve` come from its environment: the write and read tokens, the
# fleet key that checks pushes and the pull key that signs what it serves (empty: unset).
def test_tokens_and_keys_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {"CONVTUNE_API_TOKEN": "writer", "CONVTUNE_READ_TOKEN": "reader",
               "CONVTUNE_FLEET_KEY": "fleet", "CONVTUNE_PULL_KEY": "pull"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env()
    assert (settings.api_token, settings.read_token, settings.fleet_key,
            settings.pull_key) == ("writer", "reader", "fleet", "pull")
    for name in secrets:
        monkeypatch.setenv(name, "")
    settings = Settings.from_env()
    assert (settings.api_token, settings.read_token, settings.fleet_key,
            settings.pull_key) == (None, None, None, None)


# CONVTUNE_JOB_WORKERS=0 runs one job thread: a pool of none could run no job.
def test_at_least_one_job_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVTUNE_JOB_WORKERS", "0")
    assert Settings.from_env().job_workers == 1


# The documented default body limit, 64 MiB: a bundle of a few MiB pushes without a setting.
def test_the_default_body_limit_is_64_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVTUNE_MAX_BODY_BYTES", raising=False)
    assert Settings().max_body_bytes == Settings.from_env().max_body_bytes == 64 * 2**20


# Mutation gap: the README's other documented defaults (CONVTUNE_MAX_RUNNING 4,
# CONVTUNE_MAX_JOB_PROBLEMS 1000, CONVTUNE_JOBS_KEPT 256) were never pinned.
def test_the_documented_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CONVTUNE_MAX_RUNNING", "CONVTUNE_MAX_JOB_PROBLEMS", "CONVTUNE_JOBS_KEPT"):
        monkeypatch.delenv(name, raising=False)
    for settings in (Settings(), Settings.from_env()):
        assert (settings.max_running, settings.max_job_problems, settings.jobs_kept) == \
            (4, 1000, 256)
