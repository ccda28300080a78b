"""Moving bundles to and from a running `convtune serve` (POST / GET /v1/bundles)."""

from __future__ import annotations

import os
from typing import Any

import httpx

from tuner.bundles import MEDIA_TYPE
from tuner.signing import SIGNATURE_HEADER, fleet_key, pull_key, sign, signature_refusal

ENV_TOKEN = "CONVTUNE_API_TOKEN"
#: The read scope's token: a server that sets it answers GETs to it or the write token.
ENV_READ_TOKEN = "CONVTUNE_READ_TOKEN"


def _bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}
BUNDLES_PATH = "/v1/bundles"


def _url(server: str) -> str:
    given = server
    server = server.strip().rstrip("/")
    if not server.startswith(("http://", "https://")) or server in ("http:", "https:"):
        raise ValueError(f"--server must be an http:// or https:// URL, got {given!r}")
    url = server + BUNDLES_PATH
    try:
        httpx.URL(url)
    except httpx.InvalidURL as exc:  # not an HTTPError: it would escape as a traceback
        raise ValueError(f"--server {given!r} is not a valid URL: {exc}") from None
    return url


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:200]
    detail = body.get("detail", body) if isinstance(body, dict) else body
    return str(detail)[:200]


def _send(client: httpx.Client | None, method: str, url: str, **kwargs: Any) -> httpx.Response:
    try:
        if client is not None:
            response = client.request(method, url, **kwargs)
        else:
            with httpx.Client(timeout=120) as own:
                response = own.request(method, url, **kwargs)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise RuntimeError(f"cannot reach {url}: {exc}") from None
    if response.status_code >= 400:
        raise RuntimeError(
            f"{method} {url} failed: HTTP {response.status_code}: {_detail(response)}"
        )
    return response


def push_bundle(
    server: str, bundle: str, *, token: str | None = None, client: httpx.Client | None = None
) -> dict[str, Any]:
    """POST a bundle to a convtune server; returns its merge counts.

    The token (`token`, else $CONVTUNE_API_TOKEN) goes in `Authorization: Bearer`; with
    $CONVTUNE_FLEET_KEY set, the bundle is signed (tuner.signing).
    RuntimeError (one line) when the server cannot be reached or refuses the bundle.
    """
    token = token or os.environ.get(ENV_TOKEN)
    data = bundle.encode()
    headers = {"Content-Type": MEDIA_TYPE, **_bearer(token)}
    key = fleet_key()
    if key:
        headers[SIGNATURE_HEADER] = sign(data, key)
    url = _url(server)
    response = _send(client, "POST", url, content=data, headers=headers)
    try:
        result = response.json()
    except ValueError:
        result = None
    if not isinstance(result, dict):
        raise RuntimeError(
            f"POST {url} did not answer with a convtune import summary (is it a convtune "
            f"server?): {response.text.strip()[:100]!r}"
        )
    return result


def pull_bundle(
    server: str, *, device: str | None = None, token: str | None = None,
    client: httpx.Client | None = None,
) -> str:
    """GET a bundle from a convtune server (only devices whose fingerprint starts with
    `device`, when given); with $CONVTUNE_PULL_KEY or $CONVTUNE_FLEET_KEY set, its
    signature must match (tuner.signing.pull_key).

    The token (`token`, else $CONVTUNE_READ_TOKEN, else $CONVTUNE_API_TOKEN) goes in
    `Authorization: Bearer`: a server that sets a read token answers no GET without it.
    """
    token = token or os.environ.get(ENV_READ_TOKEN) or os.environ.get(ENV_TOKEN)
    params = {"device": device} if device else {}
    url = _url(server)
    response = _send(client, "GET", url, params=params, headers=_bearer(token))
    key = pull_key()
    if key:
        refusal = signature_refusal(response.content, response.headers.get(SIGNATURE_HEADER),
                                    key, pulled=True)
        if refusal is not None:
            raise RuntimeError(f"GET {url}: {refusal}")
    return response.text
