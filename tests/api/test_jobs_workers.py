"""Jobs and metrics under `serve --workers N` (issue 12, item 7): every worker process
answers for every job, and counters summed over the workers never go backwards."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from tests.api.conftest import TINY
from tests.api.test_jobs import wait_for
from tests.api.test_server import ROOT, _free_port


def test_a_job_created_by_one_worker_is_polled_through_another(
    make_client: Callable[..., TestClient],
) -> None:
    # Bug (issue 12 item 7): jobs lived in one worker's memory, so a poll that reached
    # the other worker got 404.
    first, second = make_client(), make_client()
    created = first.post("/v1/jobs", json={"problems": [TINY], "device": "cpu"})
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    polled = second.get(f"/v1/jobs/{job_id}")
    assert polled.status_code == 200, polled.text
    assert polled.json()["id"] == job_id and polled.json()["progress"]["total"] == 1
    final = wait_for(second, job_id)
    assert final["state"] == "done" and final["results"][0]["best"]["status"] == "ok"
    assert second.get("/v1/jobs/0123abcd").status_code == 404


def test_finished_jobs_beyond_the_kept_number_are_dropped(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(jobs_kept=1)
    ids = []
    for _ in range(2):
        ids.append(client.post("/v1/jobs", json={"problems": [TINY], "device": "cpu"}).json()["id"])
        assert wait_for(client, ids[-1])["state"] == "done"
    assert client.get(f"/v1/jobs/{ids[0]}").status_code == 404
    assert client.get(f"/v1/jobs/{ids[1]}").status_code == 200


#: One worker process: `requests` requests, then its /metrics count of /healthz requests.
WORKER = textwrap.dedent("""
    import sys, warnings
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient
    from api.app import create_app
    from api.settings import Settings
    with TestClient(create_app(Settings(db_url=sys.argv[1]))) as client:
        for _ in range(int(sys.argv[2])):
            client.get("/healthz")
        for line in client.get("/metrics").text.splitlines():
            if line.startswith("convtune_http_requests_total") and '"/healthz"' in line:
                print(float(line.rsplit(" ", 1)[1]))
""")


def test_counters_summed_over_worker_processes_never_go_backwards(
    db_url: str, tmp_path: Path
) -> None:
    # Bug (issue 12 item 7): each worker had its own registry, so a scrape that reached
    # the other worker saw a smaller count. `serve --workers N` sets this directory.
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")}
    (tmp_path / "metrics").mkdir()
    seen = []
    for requests in (3, 1, 2):  # three scrapes, each answered by another worker process
        done = subprocess.run([sys.executable, "-c", WORKER, db_url, str(requests)], env=env,
                              capture_output=True, text=True, timeout=120, check=True)
        seen.append(float(done.stdout.split()[-1]))
    assert seen == sorted(seen) and seen[-1] == 6.0, seen


def test_serve_with_two_workers_answers_every_poll_and_counts_up(db_url: str) -> None:
    # Bug (issue 12 item 7), end to end: `convtune serve --workers 2`, each request on a
    # new connection (so either worker may answer it).
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner.cli", "serve", "--port", str(port), "--db", db_url,
         "--device", "cpu", "--workers", "2", "--log-level", "warning"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={k: v for k, v in os.environ.items() if k != "CONVTUNE_API_TOKEN"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _answers(f"{base}/healthz"):
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.2)
        job = httpx.post(f"{base}/v1/jobs", json={"problems": [TINY], "device": "cpu"}).json()
        counts = []
        for _ in range(20):
            polled = httpx.get(f"{base}/v1/jobs/{job['id']}")
            assert polled.status_code == 200, polled.text
            scrape = httpx.get(f"{base}/metrics").text
            counts.append(sum(
                float(line.rsplit(" ", 1)[1]) for line in scrape.splitlines()
                if line.startswith("convtune_http_requests_total") and "/v1/jobs/" in line
            ))
        assert counts == sorted(counts) and counts[-1] >= 20, counts
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False
