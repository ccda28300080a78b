"""Property-based fuzzing of the OpenAPI schema: whatever a client sends, never a 5xx."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from api.app import create_app
from api.settings import Settings

# (schemathesis' pytest plugin trips over pytest 9, so operations are driven with Hypothesis
# directly: one test per operation, each with its own strategy from the schema.)
OPERATIONS = [
    ("POST", "/v1/find"),
    ("POST", "/v1/convolve"),
    ("POST", "/v1/jobs"),
    ("GET", "/v1/results"),
    ("GET", "/v1/jobs/{job_id}"),
    ("GET", "/v1/devices"),
    ("GET", "/v1/algorithms"),
    ("GET", "/healthz"),
    ("GET", "/metrics"),
    ("GET", "/v1/bundles"),
    ("POST", "/v1/bundles"),
]


@schemathesis.serializer("application/x-ndjson")
def _ndjson(_ctx: Any, value: Any) -> bytes:
    # Bundles are JSON lines; the fuzzer's body (any JSON value, or raw text) is sent as is,
    # so the import must refuse it with a 4xx.
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return (value if isinstance(value, str) else json.dumps(value)).encode()


EXAMPLES = {"POST /v1/find": 40, "POST /v1/convolve": 25, "POST /v1/jobs": 25}
#: Set, every operation gets this many examples instead (a longer hunt than CI's).
EXAMPLES_ENV = "CONVTUNE_API_FUZZ_EXAMPLES"


def _fuzzed_schema(db_dir: str) -> Any:
    # Tight limits: the schema admits dimensions up to real-network sizes, the settings
    # refuse anything but tiny problems before they are tuned (413); no job is ever queued.
    app = create_app(replace(
        Settings.from_env(), db_url=f"sqlite:///{db_dir}/fuzz.db",
        max_tensor_elements=512, max_problem_flops=200_000, max_body_bytes=64 * 1024,
        max_job_problems=4, max_jobs=0,
    ))
    return schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_no_server_errors(method: str, path: str) -> None:
    with tempfile.TemporaryDirectory() as db_dir:
        operation = _fuzzed_schema(db_dir)[path][method]
        seen: list[int] = []

        @settings(
            max_examples=int(os.environ.get(EXAMPLES_ENV, 0))
            or EXAMPLES.get(f"{method} {path}", 10), deadline=None, database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def run(case: schemathesis.Case) -> None:
            response = case.call()
            seen.append(response.status_code)
            case.validate_response(response, checks=[not_a_server_error])

        run()
        assert seen and all(code < 500 for code in seen)
