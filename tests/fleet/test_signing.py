"""Signed bundles (issue 12, item 2): with a fleet key, a server accepts only signed pushes."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from api.app import create_app
from api.settings import Settings
from db.engine import open_store
from tests.fleet.helpers import gpu, row, seed, stored
from tests.tuner.fakes import small_problem
from tuner.bundles import export_bundle
from tuner.fleet import pull_bundle, push_bundle
from tuner.signing import (
    ENV_FLEET_KEY,
    ENV_PULL_KEY,
    SIGNATURE_HEADER,
    sign,
    signature_refusal,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

KEY = "fleet-key-1"


def test_pushes_need_the_fleet_key_signature(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Bug (issue 12 item 2): anyone with the token (or none) could push any bundle; the
    # bundle's own sha256 proves nothing since anyone can recompute it.
    seed(open_store(db_url), gpu(), small_problem(), [row("direct", 1.0)])
    text = export_bundle(open_store(db_url))
    server_db = f"sqlite:///{tmp_path / 'server.db'}"
    with TestClient(create_app(Settings(db_url=server_db, fleet_key=KEY))) as client:
        unsigned = client.post("/v1/bundles", content=text)
        assert unsigned.status_code == 401 and "missing" in unsigned.json()["detail"]
        forged = client.post("/v1/bundles", content=text,
                             headers={SIGNATURE_HEADER: sign(text.encode(), "other-key")})
        assert forged.status_code == 401 and "invalid" in forged.json()["detail"]
        assert stored(open_store(server_db)) == []
        monkeypatch.setenv(ENV_FLEET_KEY, "other-key")
        with pytest.raises(RuntimeError, match=r"401.*invalid"):
            push_bundle("http://testserver", text, client=client)
        monkeypatch.setenv(ENV_FLEET_KEY, KEY)
        assert push_bundle("http://testserver", text, client=client)["added"] == 1
        assert stored(open_store(server_db)) == stored(open_store(db_url))
        # Exports are signed too, and a pull with the key checks the signature.
        assert pull_bundle("http://testserver", client=client).startswith('{"created_at"')
        monkeypatch.setenv(ENV_FLEET_KEY, "other-key")
        with pytest.raises(RuntimeError,
                           match=r"not signed with the key checked here \(\$CONVTUNE_F"):
            pull_bundle("http://testserver", client=client)


def test_without_a_fleet_key_pushes_need_no_signature(db_url: str, tmp_path: Path) -> None:
    seed(open_store(db_url), gpu(), small_problem(), [row("direct", 1.0)])
    text = export_bundle(open_store(db_url))
    with TestClient(create_app(Settings(db_url=f"sqlite:///{tmp_path / 's.db'}"))) as client:
        assert client.post("/v1/bundles", content=text).json()["added"] == 1
        assert SIGNATURE_HEADER.lower() not in client.get("/v1/bundles").headers


def test_a_pull_sends_the_read_token(db_url: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Bug: pull sent no token, so it could not pull from a server that sets
    # $CONVTUNE_READ_TOKEN (every GET under /v1 answers 401 there): no --token, no variable.
    seed(open_store(db_url), gpu(), small_problem(), [row("direct", 1.0)])
    settings = Settings(db_url=db_url, api_token="writer", read_token="reader")
    monkeypatch.delenv("CONVTUNE_READ_TOKEN", raising=False)
    monkeypatch.delenv("CONVTUNE_API_TOKEN", raising=False)
    with TestClient(create_app(settings)) as client:
        with pytest.raises(RuntimeError, match="401"):
            pull_bundle("http://testserver", client=client)
        assert pull_bundle("http://testserver", token="reader", client=client)
        monkeypatch.setenv("CONVTUNE_API_TOKEN", "writer")  # the write token reads too
        assert pull_bundle("http://testserver", client=client)
        monkeypatch.setenv("CONVTUNE_READ_TOKEN", "reader")
        monkeypatch.setenv("CONVTUNE_API_TOKEN", "wrong")
        assert pull_bundle("http://testserver", client=client)


def test_a_pull_key_checks_pulls_but_signs_no_push(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Bug (a review of security): one shared key both authorised pushes and checked pulls,
    # so every consumer that checked what it pulled could sign pushes. A server's pull key
    # now signs what it serves, and consumers hold only that.
    seed(open_store(db_url), gpu(), small_problem(), [row("direct", 1.0)])
    text = export_bundle(open_store(db_url))
    settings = Settings(db_url=f"sqlite:///{tmp_path / 's.db'}", fleet_key=KEY,
                        pull_key="pull-key-1")
    monkeypatch.delenv(ENV_FLEET_KEY, raising=False)
    with TestClient(create_app(settings)) as client:
        monkeypatch.setenv(ENV_FLEET_KEY, KEY)  # a tuning host
        assert push_bundle("http://testserver", text, client=client)["added"] == 1
        with pytest.raises(RuntimeError, match="not signed with the key checked here"):
            pull_bundle("http://testserver", client=client)  # served under the pull key
        monkeypatch.delenv(ENV_FLEET_KEY)
        monkeypatch.setenv(ENV_PULL_KEY, "pull-key-1")  # a consumer
        assert pull_bundle("http://testserver", client=client).startswith('{"created_at"')
        monkeypatch.setenv(ENV_FLEET_KEY, "pull-key-1")  # what it could sign: refused
        with pytest.raises(RuntimeError, match=r"401.*invalid"):
            push_bundle("http://testserver", text, client=client)
        monkeypatch.setenv(ENV_PULL_KEY, "other")
        with pytest.raises(RuntimeError, match="not signed with the key checked here"):
            pull_bundle("http://testserver", client=client)


def test_a_pull_refusal_names_the_key_checked_and_the_server_warns(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The review of the session's changes: a tuning host holding only the fleet key was
    # told its pull failed the pull key, and a server with a pull key but no fleet key, or
    # the same secret twice, took that silently.
    seed(open_store(db_url), gpu(), small_problem(), [row("direct", 1.0)])
    settings = Settings(db_url=db_url, fleet_key=KEY, pull_key="pull-key-1")
    monkeypatch.delenv(ENV_PULL_KEY, raising=False)
    monkeypatch.setenv(ENV_FLEET_KEY, KEY)
    says = r"checked here \(\$CONVTUNE_FLEET_KEY, as no \$CONVTUNE_PULL_KEY is set here"
    with TestClient(create_app(settings)) as client, pytest.raises(RuntimeError, match=says):
        pull_bundle("http://testserver", client=client)
    assert "PULL_KEY" not in caplog.text
    create_app(Settings(db_url=db_url, pull_key="pull-key-1"))
    assert "pushed bundles need no signature" in caplog.text
    create_app(Settings(db_url=db_url, fleet_key=KEY, pull_key=KEY))
    assert "give them different secrets" in caplog.text


# The signature is HMAC-SHA256 of the bundle bytes under the key, as lowercase hex after
# "hmac-sha256=": a fleet's other tools compute it themselves (a published test vector); every
# byte of the key counts.
def test_the_signature_is_hmac_sha256_of_the_bytes() -> None:
    data = b"The quick brown fox jumps over the lazy dog"
    assert sign(data, "key") == (
        "hmac-sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8")
    assert signature_refusal(data, sign(data, "key"), "key") is None
    assert sign(data, "fleet-key-1") != sign(data, "fleet-key-2")


# Every digit of the signature counts: one that differs only in its last hex digit, or is
# cut short, is refused.
def test_a_signature_altered_in_its_last_digit_is_refused() -> None:
    data = b"bundle bytes"
    good = sign(data, KEY)
    altered = good[:-1] + ("0" if good[-1] != "0" else "1")
    for bad in (altered, good[:-1], good[:20]):
        refusal = signature_refusal(data, bad, KEY)
        assert refusal is not None and refusal.startswith("invalid")
