"""GET endpoints: results (filters, pages), devices, algorithms, health, metrics."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from algorithms.registry import ALGORITHM_NAMES
from tests.api.conftest import TINY, stored_rows


def _tune(client: TestClient, **problem: Any) -> dict[str, Any]:
    response = client.post("/v1/find", json={"problem": {**TINY, **problem}, "device": "cpu"})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def test_results_filter_and_paginate(client: TestClient, db_url: str) -> None:
    empty = client.get("/v1/results").json()
    assert empty == {"total": 0, "limit": 100, "offset": 0, "items": []}
    first = _tune(client)
    per_problem = stored_rows(db_url)  # one row per configuration measured
    _tune(client, n=2)

    everything = client.get("/v1/results").json()
    assert everything["total"] == 2 * per_problem
    assert client.get("/v1/results", params={"n": 2}).json()["total"] == per_problem
    assert client.get("/v1/results", params={"n": 3}).json()["total"] == 0
    assert client.get("/v1/results", params={"pad_h": 1, "dtype": "float32"}).json()[
        "total"] == 2 * per_problem
    direct = client.get("/v1/results", params={"algorithm": "direct"}).json()
    assert direct["total"] == 2 * len(
        [i for i in everything["items"] if i["algorithm"] == "direct" and i["problem"]["n"] == 1]
    ) and {i["algorithm"] for i in direct["items"]} == {"direct"}
    assert client.get("/v1/results", params={"status": "ok"}).json()["total"] >= 2
    device = first["best"]["device"]
    by_device = client.get("/v1/results", params={"device": device[:8]}).json()
    assert by_device["total"] == 2 * per_problem

    page = client.get("/v1/results", params={"limit": 3, "offset": 2}).json()
    assert page["limit"] == 3 and page["offset"] == 2 and len(page["items"]) == 3
    assert page["items"][0] == everything["items"][2]
    item = page["items"][0]
    assert {"device", "device_name", "problem", "algorithm", "config", "status",
            "time_ms", "workspace_bytes", "measured_at"} <= set(item)


def test_results_filter_by_direction_and_math(client: TestClient) -> None:
    # Bug: ResultsQuery listed every problem field but these two, so a direction filter was
    # a 422 and a shape's forward and backward rows came back mixed.
    for direction in ("forward", "backward_data", "backward_filter"):
        _tune(client, direction=direction)
    rows = client.get("/v1/results", params={"h": TINY["h"]}).json()["items"]
    for direction in ("forward", "backward_data", "backward_filter"):
        page = client.get("/v1/results", params={"direction": direction}).json()
        assert page["total"] == sum(i["problem"]["direction"] == direction for i in rows) > 0
        assert {i["problem"]["direction"] for i in page["items"]} == {direction}
    assert client.get("/v1/results", params={"math": "fp32"}).json()["total"] == len(rows)
    assert client.get("/v1/results", params={"math": "tf32"}).json()["total"] == 0


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"direction": "sideways"}, "direction"),
        ({"math": "fp64"}, "math"),
        ({"limit": 0}, "limit"),
        ({"limit": 100_000}, "limit"),
        ({"offset": -1}, "offset"),
        ({"n": "big"}, "n"),
        ({"n": 2**40}, "n"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_results_bad_query_is_422(client: TestClient, params: dict[str, Any], field: str) -> None:
    response = client.get("/v1/results", params=params)
    assert response.status_code == 422, response.text
    assert any(field in e["loc"] for e in response.json()["detail"])


def test_devices(client: TestClient) -> None:
    data = client.get("/v1/devices").json()
    assert data["default"] in ("cpu", "cuda:0")
    cpu = data["here"][0]
    assert cpu["device"] == "cpu" and len(cpu["fingerprint"]) == 32
    assert data["database"] == []
    _tune(client)
    stored = client.get("/v1/devices").json()["database"]
    assert [d["fingerprint"] for d in stored] == [cpu["fingerprint"]]
    assert stored[0]["measurements"] > 0


def test_algorithms(client: TestClient) -> None:
    data = client.get("/v1/algorithms").json()
    assert list(data["algorithms"]) == list(ALGORITHM_NAMES)
    assert "cpu" in data["algorithms"]["direct"]


def test_health(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "device": "cpu", "reason": None}


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_move(client: TestClient) -> None:
    body = {"problem": TINY, "device": "cpu"}
    assert client.post("/v1/find", json={**body, "mode": "cached"}).status_code == 404
    assert client.post("/v1/find", json=body).status_code == 200  # tunes: a miss
    assert client.post("/v1/find", json=body).status_code == 200  # from the database: a hit
    assert client.post("/v1/find", json={**body, "mode": "cached"}).status_code == 200
    client.get("/v1/jobs/abc")  # 404, counted under the route template
    client.get("/no/such/path")
    text = client.get("/metrics").text
    assert re.search(r"^# TYPE convtune_http_requests_total counter", text, re.M)
    assert _metric(text, "convtune_find_cache_total", result="hit") == 2
    assert _metric(text, "convtune_find_cache_total", result="miss") == 2
    assert _metric(text, "convtune_tunings_total", origin="find") == 1
    assert _metric(text, "convtune_http_requests_total", route="/v1/find", method="POST",
                   status="200") == 3
    assert _metric(text, "convtune_http_requests_total", route="/v1/find", status="404") == 1
    assert _metric(text, "convtune_http_requests_total", route="/v1/jobs/{job_id}",
                   status="404") == 1
    assert _metric(text, "convtune_http_requests_total", route="unmatched") == 1
    assert _metric(text, "convtune_http_request_duration_seconds_count", route="/v1/find") == 4


def test_metrics_are_per_app(make_client: Any) -> None:
    first, second = make_client(), make_client()
    first.get("/healthz")
    text = second.get("/metrics").text
    assert _metric(text, "convtune_http_requests_total", route="/healthz") == 0


# GET /v1/bundles?device=...: a prefix no stored fingerprint starts with is a 404 naming it,
# one longer than any fingerprint (64 characters) a 422.
def test_bundle_export_of_an_unknown_device(client: TestClient) -> None:
    missing = client.get("/v1/bundles", params={"device": "ffffffffffff"})
    assert missing.status_code == 404 and "no device" in missing.json()["detail"]
    assert client.get("/v1/bundles", params={"device": "f" * 65}).status_code == 422
    assert client.get("/v1/bundles").status_code == 200


# Mutation gap: /v1/results' total was only read where every row fit on the page; it is
# the count of every matching row, whatever the page's limit.
def test_results_total_counts_beyond_the_page(client: TestClient, db_url: str) -> None:
    from algorithms.problem import ConvProblem
    from db.engine import open_store
    from tests.fleet.helpers import gpu, row, seed

    count = int(np.random.default_rng().integers(3, 7))
    seed(open_store(db_url), gpu(), ConvProblem(**TINY),
         [row("direct", float(i + 1), config=f"c{i}") for i in range(count)])
    page = client.get("/v1/results", params={"limit": 2, "offset": 1}).json()
    assert (page["total"], page["limit"], page["offset"], len(page["items"])) == (count, 2, 1, 2)
