"""Every status the service answers is one its OpenAPI document declares for the operation
(a schemathesis review of the API, 2026-11-30)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from api.app import create_app
from api.settings import Settings
from tests.api.conftest import TestClient


# Bug: 503 (an unusable store, a claim held too long), 403 (a read-only store), 400 (a JSON
# body that is not UTF-8), 413 (a body over the limit) and, with $CONVTUNE_READ_TOKEN set,
# 401 on every GET were answered by operations that declared none of them.
def test_every_v1_operation_declares_the_shared_statuses() -> None:
    paths = create_app().openapi()["paths"]
    operations = [(path, verb, item[verb]) for path, item in paths.items()
                  if path.startswith("/v1/") for verb in item]
    assert len(operations) >= 9
    for path, verb, operation in operations:
        declared = set(operation["responses"])
        assert {"401", "503"} <= declared, (path, verb)
        if verb == "post":
            assert {"400", "403", "413"} <= declared, (path, verb)


# Bug: with an unusable store /healthz answered 503 with an error body instead of its
# schema's Health, and named the store's path on an open route.
def test_healthz_opens_no_store(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database " * 100)
    settings = replace(Settings.from_env(), db_url=f"sqlite:///{junk}", device="cpu")
    with TestClient(create_app(settings)) as client:
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "device": "cpu", "reason": None}


# Bug: a 405 on /v1/bundles said "Allow: POST" (the first route of the path), though GET is
# served there too.
def test_a_405_allows_every_method_of_the_path(client: TestClient) -> None:
    for method in ("PUT", "DELETE", "OPTIONS"):
        response = client.request(method, "/v1/bundles")
        assert response.status_code == 405
        assert response.headers["allow"] == "GET, POST"
    assert client.request("DELETE", "/v1/find").headers["allow"] == "POST"
