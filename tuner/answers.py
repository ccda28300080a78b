"""The in-process answer cache: a find answered once is answered again from memory.

Keyed by everything an answer depends on: device fingerprint, problem (every field,
precision included), workspace limit and find mode. Invalidation:
- a write by this process (a tuning, an import, a pull) drops the entries of what it wrote
  at once, through `invalidate` / `clear`, and every `broad` entry (predictions and
  stand-in devices' answers, which rest on other rows);
- a write by another process bumps the store's `generation` counter (db.find); the cache
  reads it at most once every `check_s` seconds ($CONVTUNE_CACHE_CHECK_S, default 2 s; 0
  reads it before every answer) and drops everything when it moved past a value that is
  not one of its own writes'. Other processes' writes therefore show within `check_s`
  seconds.
Every write bumps the counter by one, so each generation number is one write. A write of
this process reports the number it produced (read in its own transaction, see
db.find.lock_for_write) to `invalidate` / `clear`; a check lets the counter move only over
numbers reported so, and drops everything otherwise. Attribution is by number, not by
count, so a check that runs between one of our commits and its report (another thread's
answer) cannot count that write twice and take another process's write for ours: it sees a
number not yet reported, drops everything, and the late report is then ignored. A write
reported without its number is never taken for ours (the next check drops everything).
An answer computed while an invalidation happened is not kept (a local generation guards
every put), so a stale answer never survives a re-tune in this process.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from algorithms.problem import ConvProblem
from db import find as store_find
from db.engine import Store
from tuner.env import env_number

#: Default seconds between two reads of the store's generation counter.
CHECK_S = 2.0
#: Most answers kept; the least recently used go first beyond that. An answer of a GPU
#: problem is tens of KB (its ~40 candidates' results): 65,536 of them grew a server by an
#: estimated 2 GB, and anonymous heuristic finds could fill them (a review of resource
#: lifetimes, 2026-11-30: +511 MB at the cap on the CPU). An answer not kept costs one read
#: of the store.
MAX_ENTRIES = 8192
#: Most own write generations noted between two checks (beyond: the next check drops all).
MAX_OWN = 4096


def check_interval() -> float:
    """$CONVTUNE_CACHE_CHECK_S as seconds (default CHECK_S)."""
    return env_number("CONVTUNE_CACHE_CHECK_S", CHECK_S, float)


class AnswerCache:
    """Answers per key, dropped when this process or another writes what they depend on."""

    def __init__(self, store: Store, check_s: float | None = None) -> None:
        self.store = store
        self.check_s = check_interval() if check_s is None else check_s
        self._answers: OrderedDict[Hashable, Any] = OrderedDict()
        self._broad: set[Hashable] = set()  # keys of answers any write may change
        self._lock = threading.Lock()
        self._local = 0  # bumped by every invalidation in this process
        self._seen: int | None = None  # the store generation the entries reflect
        # Generations past `_seen` produced by this process's writes (already invalidated).
        self._own: set[int] = set()
        self._check_lock = threading.Lock()  # one read of the store's counter at a time
        self._next_check = 0.0

    def token(self) -> int:
        """Take before computing an answer; pass to `put` (a put after a change is dropped)."""
        return self._local

    def current(self) -> int:
        """The local generation now, after the store's counter if a check is due: a value
        kept with `token` is still good while this returns the same."""
        if time.monotonic() >= self._next_check:
            self._check_store()
        return self._local

    def get(self, key: Hashable) -> Any | None:
        """The cached answer for `key`, or None."""
        self.current()  # drops everything first when another process has written
        found = self._answers.get(key)
        if found is not None:
            # Not contextlib.suppress: this is the cached find's path, and costs it less so.
            try:  # noqa: SIM105
                self._answers.move_to_end(key)  # used: it leaves last
            except KeyError:  # dropped meanwhile by another thread: still this call's answer
                pass
        return found

    def put(self, key: Hashable, token: int, answer: Any, *, broad: bool = False) -> None:
        """Keep `answer` unless something was invalidated since `token` was taken.

        A `broad` answer (a prediction, a stand-in device's) depends on more than its own
        problem's rows, so every invalidation drops it.
        """
        with self._lock:
            if token != self._local:
                return
            if len(self._answers) >= MAX_ENTRIES and key not in self._answers:
                oldest, _ = self._answers.popitem(last=False)
                self._broad.discard(oldest)
            self._answers[key] = answer
            self._answers.move_to_end(key)  # a new answer of a kept key is used as well
            if broad:
                self._broad.add(key)

    def invalidate(
        self, fingerprint: str, problem: ConvProblem, generation: int | None = None
    ) -> None:
        """Drop every answer about `problem` on the device `fingerprint`.

        Called after this process committed one write of that problem's measurements;
        `generation` is the store generation that write produced (db.find.save_measurements),
        None where unknown (the next check of the store then drops everything).
        """
        with self._lock:
            self._local += 1
            self._mine(generation)
            # Over a copy (list() runs in C: no other thread runs meanwhile): a get() moves
            # its key to the end without the lock, and iterating the table itself then
            # raised halfway, leaving the tuned problem's old answer served (a review of
            # the session's changes, 2026-11-30).
            for key in [k for k in list(self._answers) if _about(k, fingerprint, problem)]:
                self._answers.pop(key, None)
            for key in self._broad:
                self._answers.pop(key, None)
            self._broad.clear()

    def clear(self, generation: int | None = None) -> None:
        """Drop every answer (after this process committed one write of many problems).

        `generation`: the store generation that write produced, None where unknown (the
        next check of the store then drops everything once more).
        """
        with self._lock:
            self._local += 1
            self._mine(generation)
            self._answers.clear()
            self._broad.clear()

    def _mine(self, generation: int | None) -> None:
        """Note `generation` as produced by this process (under `_lock`)."""
        if generation is None:
            return  # unknown: not ours as far as the checks go, so never a foreign one's
        if self._seen is not None and generation <= self._seen:
            return  # a check read it first, took it for another process's and dropped all
        if len(self._own) >= MAX_OWN:
            self._own.clear()  # checks stopped (no answers asked): drop all at the next one
        self._own.add(generation)

    def __len__(self) -> int:
        return len(self._answers)

    def _check_store(self) -> None:
        # One check at a time, so that the counters read come in order: a value below the
        # last one seen then means a store that went back (replaced), never a late read.
        with self._check_lock:
            started = time.monotonic()
            if started < self._next_check:
                return  # another thread checked while this one waited
            with self.store.session() as session:
                now = store_find.generation(session=session)
            with self._lock:
                # What committed before `started` is in `now`: the next check is due
                # `check_s` after it, so no write stays unseen longer than that.
                self._next_check = started + self.check_s
                seen = self._seen
                if seen is not None and now < seen:  # a store that went back: replaced
                    self._own.clear()
                    self._drop_all()
                elif seen is not None and now > seen:
                    # Our own writes were invalidated precisely already, each by its
                    # number; a number in (seen, now] not among them is another process's.
                    ours = sum(1 for g in self._own if seen < g <= now)
                    if ours != now - seen:
                        self._drop_all()
                self._seen = now
                self._own = {g for g in self._own if g > now}  # committed after our read

    def _drop_all(self) -> None:
        """Drop every answer after a write that was not this process's (under `_lock`)."""
        self._local += 1
        self._answers.clear()
        self._broad.clear()


def _about(key: Hashable, fingerprint: str, problem: ConvProblem) -> bool:
    return isinstance(key, tuple) and len(key) >= 2 and key[0] == fingerprint \
        and key[1] == problem
