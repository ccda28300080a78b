"""Read and write scopes, checked before any request body is read (issue 12 items 6, 8)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.api.conftest import TINY, npy

WRITE, READ = "write-secret", "read-secret"


def auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def test_uploads_are_refused_before_they_are_parsed(
    make_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 12 (6): unauthenticated multipart uploads (up to 64 MiB) were parsed before the
    # 401. Now the token is checked first and no upload is ever read.
    from starlette.requests import Request

    async def never(*_a: object, **_k: object) -> None:
        raise AssertionError("an upload without the token was parsed")

    monkeypatch.setattr(Request, "form", never)
    client = make_client(api_token=WRITE)
    x = np.random.default_rng().standard_normal((1, 4, 64, 64)).astype(np.float32)
    files = {"x": ("x", npy(x)), "w": ("w", npy(x[:1, :, :3, :3]))}
    for token in (None, "wrong"):
        refused = client.post("/v1/convolve", files=files, headers=auth(token))
        assert refused.status_code == 401, refused.text


def test_cached_finds_and_reads_need_only_the_read_scope(
    make_client: Callable[..., Any]
) -> None:
    # Issue 12 (8): a cached find needed the write token, so every reading host had to hold
    # the key that can also push bundles.
    client = make_client(api_token=WRITE, read_token=READ)
    body = {"problem": TINY, "device": "cpu"}
    assert client.post("/v1/find", json=body, headers=auth(READ)).status_code == 401  # tunes
    assert client.post("/v1/find", json=body, headers=auth(WRITE)).status_code == 200
    cached = {**body, "mode": "cached"}
    assert client.post("/v1/find", json=cached, headers=auth(READ)).status_code == 200
    assert client.post("/v1/find", json=cached).status_code == 401
    assert client.get("/v1/results", headers=auth(READ)).status_code == 200
    assert client.get("/v1/results").status_code == 401
    assert client.get("/v1/results", headers=auth("wrong")).status_code == 401
    assert client.get("/healthz").status_code == 200  # open whatever the tokens
    pushed = client.post("/v1/bundles", content=b"{}", headers=auth(READ))
    assert pushed.status_code == 401


def test_without_a_read_token_reads_are_open(make_client: Callable[..., Any]) -> None:
    client = make_client(api_token=WRITE)
    body = {"problem": TINY, "device": "cpu"}
    assert client.post("/v1/find", json=body, headers=auth(WRITE)).status_code == 200
    assert client.post("/v1/find", json={**body, "mode": "cached"}).status_code == 200
    assert client.get("/v1/results").status_code == 200
    assert client.post("/v1/find", json=body).status_code == 401


# A token is accepted only whole: a prefix of it, or an empty bearer, is refused in both
# scopes.
def test_a_prefix_of_a_token_is_refused(make_client: Callable[..., Any]) -> None:
    client = make_client(api_token=WRITE, read_token=READ)
    for given in (WRITE[:-1], READ[:-1], WRITE[:1]):
        assert client.get("/v1/results", headers=auth(given)).status_code == 401, given
        assert client.post("/v1/bundles", content=b"{}",
                           headers=auth(given)).status_code == 401, given
    empty = {"Authorization": "Bearer "}
    assert client.get("/v1/results", headers=empty).status_code == 401
    assert client.post("/v1/bundles", content=b"{}", headers=empty).status_code == 401
