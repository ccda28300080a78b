"""Fleet commands' error paths: one line on stderr and a non-zero exit, never a traceback;
and the /v1/bundles route answers 400 (not 500) for bundles that cannot be stored."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from db.engine import open_store
from tests.fleet.helpers import gpu, row, seed, stored
from tests.fleet.test_bundle_validation import edited, set_field
from tests.tuner.fakes import small_problem
from tuner.bundles import export_bundle
from tuner.cli import main
from tuner.fleet import pull_bundle, push_bundle


@pytest.mark.parametrize("server", ["http://[::1", "http://host:notaport", "http://", "https:///"])
@pytest.mark.parametrize("command", ["push", "pull"])
def test_invalid_server_url_is_one_line(
    command: str, server: str, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--server", server, "--token", "t"] if command == "push"
                else [command, "--server", server]) == 1
    err = capsys.readouterr().err
    assert err.startswith("convtune: error: ") and err.count("\n") == 1, err
    assert "--server" in err or "cannot reach" in err


@pytest.mark.parametrize(
    "answer", [b"<html>hello</html>", b"[1, 2]", b'"ok"', b""], ids=["html", "list", "str", "empty"]
)
def test_push_to_something_that_is_not_convtune_is_a_clear_error(answer: bytes) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=answer))
    with httpx.Client(transport=transport) as client, pytest.raises(
        RuntimeError, match="convtune import summary"
    ):
        push_bundle("http://hub:8000", "bundle", client=client)


def test_pull_of_something_that_is_not_a_bundle_is_one_line(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"<html/>"))
    real = httpx.Client

    def client(*args: object, **kwargs: object) -> httpx.Client:
        return real(transport=transport)

    monkeypatch.setattr(httpx, "Client", client)
    assert pull_bundle("http://hub:8000") == "<html/>"
    assert main(["pull", "--server", "http://hub:8000"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("convtune: error: not a convtune bundle") and err.count("\n") == 1


def test_import_of_an_unstorable_bundle_is_one_line(
    db_url: str, other_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(open_store(other_url), gpu(), small_problem(), [row("direct", 1.0)])
    text = edited(export_bundle(open_store(other_url)), set_field("measurement", device=["x"]))
    path = tmp_path / "bad.bundle"
    path.write_text(text)
    assert main(["import", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("convtune: error: bundle line") and err.count("\n") == 1
    assert stored(open_store(db_url)) == []


def test_bundle_route_refuses_unstorable_bundles_with_400(db_url: str, other_url: str) -> None:
    from api.app import create_app
    from api.settings import Settings
    from tests.api.conftest import TestClient

    seed(open_store(other_url), gpu(), small_problem(), [row("direct", 1.0)])
    good = export_bundle(open_store(other_url))
    with TestClient(create_app(Settings(db_url=db_url)), raise_server_exceptions=False) as client:
        for change in (set_field("measurement", problem={"a": 1}),
                       set_field("measurement", workspace_bytes=2**64),
                       set_field("measurement", error="\x00")):
            response = client.post("/v1/bundles", content=edited(good, change))
            assert response.status_code == 400, response.text
            assert json.loads(response.text)["detail"].startswith("bundle line")
        assert stored(open_store(db_url)) == []
        assert client.post("/v1/bundles", content=good).json()["added"] == 1
