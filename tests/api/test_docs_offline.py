"""/docs and /redoc work without internet access (issue 12, item 11)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_nothing_from_elsewhere(
    page: str, make_client: Callable[..., TestClient]
) -> None:
    # Bug (issue 12 item 11): /docs loaded its scripts and styles from a CDN, so it was
    # blank on a host without internet access.
    client = make_client(api_token="w", read_token="r")  # the docs stay open with tokens
    html = client.get(page)
    assert html.status_code == 200
    assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", html.text), html.text
    assets = re.findall(r'(?:href|src)="([^"]+)"', html.text)
    assert assets, html.text
    for asset in assets:
        assert asset.startswith("/"), asset
        loaded = client.get(asset)
        assert loaded.status_code == 200 and loaded.content, asset
    assert '"validatorUrl": null' in html.text or page == "/redoc"
