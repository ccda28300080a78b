"""NaN, Infinity and 1e400 in a request: a 422 naming the field, nothing stored."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from api.routes.results import ResultsQuery
from api.schemas import FindRequest, JobRequest
from tests.api.conftest import stored_rows

PROBLEM = '"n": 1, "c": 4, "h": 8, "w": 8, "k": 4, "r": 3, "s": 3'
JSON = {"Content-Type": "application/json"}


# Review finding 7 (2026-11-30): Python's JSON parser reads NaN, Infinity and 1e400 (as
# inf); FastAPI's 422 echoes each bad input back, that rendering failed, and the client got
# 422 "Out of range float values are not JSON compliant", which named no field.
@pytest.mark.parametrize(
    ("path", "body", "loc", "echoed"),
    [
        ("/v1/find", '{"problem": {"n": NaN, "c": 4, "h": 8, "w": 8, "k": 4, "r": 3, "s": 3}}',
         ["body", "problem", "n"], "NaN"),
        ("/v1/find", '{"problem": {"n": 1e400, "c": 4, "h": 8, "w": 8, "k": 4, "r": 3, "s": 3}}',
         ["body", "problem", "n"], "Infinity"),
        ("/v1/find", f'{{"problem": {{{PROBLEM}, "pad": -Infinity}}}}',
         ["body", "problem", "pad", "constrained-int"], "-Infinity"),
        ("/v1/find", f'{{"problem": {{{PROBLEM}}}, "workspace_limit": NaN}}',
         ["body", "workspace_limit"], "NaN"),
        ("/v1/find", f'{{"problem": {{{PROBLEM}}}, "device": Infinity}}',
         ["body", "device"], "Infinity"),
        ("/v1/find", f'{{"problem": {{{PROBLEM}}}, "extra": [NaN, {{"x": -Infinity}}]}}',
         ["body", "extra"], ["NaN", {"x": "-Infinity"}]),
        ("/v1/jobs", '{"network": "alexnet", "batches": [NaN]}', ["body", "batches", 0], "NaN"),
        ("/v1/jobs", f'{{"problems": [{{{PROBLEM}, "groups": Infinity}}]}}',
         ["body", "problems", 0, "groups"], "Infinity"),
    ],
)
def test_non_finite_number_is_a_422_naming_the_field(
    client: TestClient, db_url: str, path: str, body: str, loc: list[Any], echoed: Any
) -> None:
    response = client.post(path, content=body.encode(), headers=JSON)
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert isinstance(errors, list), errors
    named = [e for e in errors if e["loc"] == loc]
    assert named, errors
    assert named[0]["input"] == echoed and named[0]["msg"] and named[0]["type"]
    assert stored_rows(db_url) == 0


# Review finding 7: the whole body is echoed when it is not an object, or lacks a field.
def test_non_finite_top_level_body_is_a_422_naming_the_body(client: TestClient) -> None:
    for body, echoed in ((b"NaN", "NaN"), (b'{"device": NaN}', {"device": "NaN"})):
        response = client.post("/v1/find", content=body, headers=JSON)
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"][0] == "body"
        assert echoed in [e["input"] for e in response.json()["detail"]]


# Review finding 7: NaN and Infinity are floats, so a float field would take them as valid
# (a NaN limit compares false with everything). No request field is a float; one added
# must refuse non-finite values (pydantic: allow_inf_nan=False) before it leaves this list.
@pytest.mark.parametrize("model", [FindRequest, JobRequest, ResultsQuery])
def test_no_request_field_takes_a_float(model: type[BaseModel]) -> None:
    assert '"number"' not in json.dumps(model.model_json_schema())
