"""Prometheus metrics with a per-app registry, and the middleware that records requests.

Under `serve --workers N` each worker is a process with its own counters; `serve` then sets
$PROMETHEUS_MULTIPROC_DIR (prometheus_client's multiprocess mode: every process writes its
values to files there) and /metrics sums every worker's files, so a scrape answered by any
worker shows the same, never decreasing, totals.
"""

from __future__ import annotations

import os
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tuner import results as R
from tuner.results import AlgorithmResult


class Metrics:
    """The service's counters and histograms, in their own registry (one per app)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "convtune_http_requests", "HTTP requests by route, method and status.",
            ["route", "method", "status"], registry=self.registry,
        )
        self.latency = Histogram(
            "convtune_http_request_duration_seconds", "HTTP request latency by route.",
            ["route", "method"], registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                     30, 60),
        )
        self.tunings = Counter(
            "convtune_tunings",
            "Problems measured by finds and jobs (a find that measured anything).",
            ["origin"], registry=self.registry,
        )
        self.find_cache = Counter(
            "convtune_find_cache", "Finds answered wholly from the database (hit) or not (miss).",
            ["result"], registry=self.registry,
        )
        self.jobs = Counter(
            "convtune_jobs", "Background jobs by final state.", ["state"],
            registry=self.registry,
        )

    def record_find(self, results: list[AlgorithmResult] | None, origin: str = "find") -> None:
        """A hit when every result came from the database; a miss otherwise (None: not found)."""
        if results is None:
            self.find_cache.labels("miss").inc()
            return
        fresh = any(r.source == R.FRESH for r in results)
        if origin == "find":
            self.find_cache.labels("miss" if fresh else "hit").inc()
        if fresh:
            self.tunings.labels(origin).inc()


#: Set (by `serve --workers N`, or by hand) before prometheus_client is imported.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: The methods counted by name (HTTP's, RFC 9110, and PATCH); any other is "other".
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE",
                      "PATCH"})


def exposition(registry: CollectorRegistry) -> bytes:
    """The Prometheus text of `registry`, or of every process's metrics in multiprocess mode."""
    if os.environ.get(MULTIPROC_ENV):
        combined = CollectorRegistry()
        MultiProcessCollector(combined)
        return generate_latest(combined)
    return generate_latest(registry)


class MetricsMiddleware:
    """Counts every request by route template (not raw path) and times it."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route: Any = scope.get("route")
            # The template keeps the label set small whatever paths clients send.
            name = getattr(route, "path", None) or "unmatched"
            # Any method a client invents counted as "other": each new label value is a
            # series kept for good (a review of security, 2026-11-30: 3,000 requests of
            # random 4,000-letter methods grew /metrics to 257 MB, unauthenticated).
            method = scope.get("method", "")
            method = method if method in _METHODS else "other"
            self.metrics.requests.labels(name, method, str(status)).inc()
            self.metrics.latency.labels(name, method).observe(time.perf_counter() - start)
