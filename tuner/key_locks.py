"""One lock per key, kept only while a thread holds or waits for it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class KeyLocks:
    """`with locks(key):` holds one lock per key, kept only while a thread holds or waits for
    it: one kept per (device, problem) ever asked for grew a process without bound (a review
    of resource lifetimes, 2026-11-30: 10,000 problems, 10,001 locks)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every lock (a forked child: a lock another thread held stays held in it)."""
        self._table: dict[object, tuple[threading.Lock, list[int]]] = {}
        self._guard = threading.Lock()

    def __len__(self) -> int:
        return len(self._table)

    @contextmanager
    def __call__(self, key: object) -> Iterator[None]:
        with self._guard:
            entry = self._table.get(key)
            if entry is None:  # not setdefault: that made a lock at every call
                entry = self._table[key] = (threading.Lock(), [0])
            lock, users = entry
            users[0] += 1
        try:
            with lock:
                yield
        finally:
            with self._guard:
                users[0] -= 1
                if not users[0]:
                    del self._table[key]
