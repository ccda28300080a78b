"""How many requests may do work at once in one server process (finds that may measure,
convolutions): the rest are refused at once with 429, not queued on worker threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import HTTPException, status

#: Seconds a refused client is told to wait (Retry-After).
RETRY_AFTER_S = 5


class Slots:
    """At most `size` requests hold a slot at once; a request finding none gets 429.

    Without a bound every request that measures or convolves took one of the server's
    worker threads (40) and its memory: forty large uploads, or forty tunings of distinct
    problems, held forty problems' tensors at once, and every store read waited for a
    thread (a review of security, 2026-11-30, left it open; closed 2026-11-30).
    Waiting requests are not queued: the jobs API (POST /v1/jobs) is the queue.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        """Slots held now."""
        return self._used

    @contextmanager
    def taken(self) -> Iterator[None]:
        """Hold a slot for the block; HTTPException 429 (Retry-After) when none is free."""
        with self._lock:
            if self._used >= self.size:
                raise HTTPException(
                    status.HTTP_429_TOO_MANY_REQUESTS,
                    f"{self.size} finds that may measure or convolutions already run in this "
                    "server process (CONVTUNE_MAX_RUNNING); retry later, or queue the "
                    "problems as a job (POST /v1/jobs)",
                    headers={"Retry-After": str(RETRY_AFTER_S)},
                )
            self._used += 1
        try:
            yield
        finally:
            with self._lock:
                self._used -= 1
