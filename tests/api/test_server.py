"""A real `convtune serve` (uvicorn) process on loopback, driven over HTTP with httpx."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.api.conftest import TINY, from_npy, npy

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "server-test-token"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    port = _free_port()
    monkeypatch.setenv("CONVTUNE_API_TOKEN", TOKEN)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner.cli", "serve", "--host", "127.0.0.1",
         "--port", str(port), "--db", db_url, "--device", "cpu", "--log-level", "warning"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                output = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"server exited with {proc.returncode}: {output}")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("server did not answer /healthz within 30 s")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def test_find_and_convolve_over_http(server: str) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=server, timeout=30) as http:
        body = {"problem": TINY}
        assert http.post("/v1/find", json=body).status_code == 401
        found = http.post("/v1/find", json=body, headers=auth)
        assert found.status_code == 200, found.text
        assert found.json()["device"] == "cpu"  # --device reached the app
        assert found.json()["best"]["status"] == "ok"

        rng = np.random.default_rng(3)
        x = rng.standard_normal((1, 2, 6, 5)).astype(np.float32)
        w = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
        convolved = http.post(
            "/v1/convolve", headers=auth,
            files={"x": ("x.npy", npy(x)), "w": ("w.npy", npy(w))}, data={"padding": "1"},
        )
        assert convolved.status_code == 200, convolved.text
        y = from_npy(convolved.content)
        assert y.shape == (1, 2, 6, 5)
        assert convolved.headers["x-convtune-algorithm"] == found.json()["best"]["algorithm"]

        results = http.get("/v1/results", params={"limit": 1}).json()
        assert results["total"] > 0
        assert "convtune_find_cache_total" in http.get("/metrics").text
