"""Load benchmark of the HTTP service's cached path: POST /v1/find with mode=cached.

Starts `uvicorn --factory api.app:create_app` on 127.0.0.1 (loopback only) with a fresh
SQLite database, tunes one tiny problem through the API, then fires cached finds from an
asyncio httpx client at a fixed concurrency until --requests or --duration is reached.
Reports requests per second and latency percentiles, writes JSON (--out), stops the server.

    .venv/bin/python benchmarks/bench_api_load.py --workers 1 --out bench_api.json

Note: client and server share the machine; on a small one the client's CPU use counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from algorithms.cpu.runtime import CpuRuntime
from api.protocol import HTTP_PROTOCOL

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = {"n": 1, "c": 8, "h": 16, "w": 16, "k": 8, "r": 3, "s": 3, "pad": 1}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(port: int, db_url: str, workers: int) -> subprocess.Popen[bytes]:
    """uvicorn in factory mode on loopback, settings through the environment, with the HTTP
    protocol `convtune serve` uses."""
    env = {**os.environ, "CONVTUNE_DB_URL": db_url, "CONVTUNE_DEVICE": "cpu"}
    env.pop("CONVTUNE_API_TOKEN", None)
    return subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "api.app:create_app",
         "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
         "--log-level", "warning", "--no-access-log", "--http", HTTP_PROTOCOL],
        cwd=ROOT, env=env,
    )


def wait_ready(base: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Poll /healthz until the server answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("server did not start")


BODY = json.dumps({"problem": PROBLEM, "device": "cpu", "mode": "cached"}).encode()


class RawConnection:
    """A minimal keep-alive HTTP/1.1 client: the load generator must cost far less CPU
    than the server it measures, and on a 2-core machine httpx's does not."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.request = (
            f"POST /v1/find HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
        ).encode() + BODY

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def find(self) -> tuple[int, bytes]:
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def load(
    base: str, requests: int, duration: float, concurrency: int, warmup: int, client: str
) -> dict[str, Any]:
    """Fire cached finds from `concurrency` connections; latencies in milliseconds."""
    port = int(base.rsplit(":", 1)[1])
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    errors: list[str] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as http:

        async def via_httpx() -> tuple[int, bytes]:
            response = await http.post(
                "/v1/find", content=BODY, headers={"Content-Type": "application/json"}
            )
            return response.status_code, response.content

        connections = [RawConnection(port) for _ in range(concurrency)]
        for conn in connections:
            await conn.open()
        calls = [conn.find if client == "raw" else via_httpx for conn in connections]
        for i in range(warmup):
            status, payload = await calls[i % concurrency]()
            if status != 200:
                raise RuntimeError(f"warm-up find failed: {status} {payload[:300]!r}")
        issued = 0
        deadline = time.perf_counter() + duration

        async def worker(call: Any) -> None:
            nonlocal issued
            while issued < requests and time.perf_counter() < deadline:
                issued += 1
                start = time.perf_counter()
                status, payload = await call()
                latencies.append((time.perf_counter() - start) * 1e3)
                statuses[status] = statuses.get(status, 0) + 1
                if status != 200 and len(errors) < 3:
                    errors.append(payload[:300].decode(errors="replace"))

        started = time.perf_counter()
        await asyncio.gather(*(worker(call) for call in calls))
        elapsed = time.perf_counter() - started
        for conn in connections:
            conn.close()
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    return {
        "requests": len(latencies),
        "seconds": elapsed,
        "rps": len(latencies) / elapsed,
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "max_ms": latencies[-1],
        "mean_ms": statistics.fmean(latencies),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "errors": errors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="at most this many")
    parser.add_argument("--duration", type=float, default=20.0, help="at most this many s")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw",
                        help="raw: a minimal keep-alive HTTP/1.1 client (default); httpx")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = parser.parse_args(argv)
    if not 1 <= args.requests <= 20_000 or not 0 < args.duration <= 20:
        parser.error("keep it bounded: --requests 1..20000, --duration (0, 20]")

    with tempfile.TemporaryDirectory() as tmp:
        db_url = f"sqlite:///{tmp}/bench.db"
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        proc = start_server(port, db_url, args.workers)
        try:
            wait_ready(base, proc)
            seeded = httpx.post(
                f"{base}/v1/find", json={"problem": PROBLEM, "device": "cpu", "mode": "tune"},
                timeout=120,
            )
            seeded.raise_for_status()
            result = asyncio.run(
                load(base, args.requests, args.duration, args.concurrency, args.warmup,
                     args.client)
            )
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    report = {
        "benchmark": "POST /v1/find mode=cached",
        "problem": PROBLEM,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "client": args.client,
        "cpu": CpuRuntime().fingerprint()["name"],
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        **result,
    }
    rows = [
        ("workers", str(args.workers)), ("concurrency", str(args.concurrency)),
        ("client", args.client),
        ("requests", str(result["requests"])), ("seconds", f"{result['seconds']:.2f}"),
        ("requests/s", f"{result['rps']:.0f}"), ("p50 ms", f"{result['p50_ms']:.2f}"),
        ("p90 ms", f"{result['p90_ms']:.2f}"), ("p99 ms", f"{result['p99_ms']:.2f}"),
        ("max ms", f"{result['max_ms']:.2f}"), ("statuses", json.dumps(result["statuses"])),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"cached find load on {report['cpu']} ({report['cpus']} CPUs)")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    for error in result["errors"]:
        print(f"  error: {error}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if set(result["statuses"]) == {"200"} else 1


if __name__ == "__main__":
    sys.exit(main())
