"""Keep our own host threads quiet while a candidate is timed.

A launch-bound GPU candidate is timed from the host: if another of our threads holds the
GIL meanwhile (the progress bar rendering, the claim renewal talking to the store), its
launches stall and its time is inflated and noisy (issue 11: a 0.127 ms candidate measured
0.45 ms). So timed regions hold one process-wide gate, and background chores run only
while they can take it: between timed regions, never inside one.

One gate per process, not per device: any Python thread of ours that runs during a timed
region delays its launches, so two tuning threads also time one after the other.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: Who holds the gate (a timed region or a chore) and how many chores wait for it. A plain
#: lock handed the gate to whoever grabbed it first, and a tuning thread re-took it
#: microseconds after each region, before the woken chore ran: claim renewals were passed
#: over for 4-5 regions (7 s) and a live tuner's claim expired (a review of concurrency,
#: 2026-11-30). Now a region does not start while a chore waits.
_STATE = threading.Condition()
_held = False
_chores_waiting = 0
_inside = threading.local()


def _reset_in_child() -> None:
    # A forked child has only the thread that forked: a region or a chore another thread
    # was in (or waiting for) at the fork never ends there, and held the gate for good.
    global _STATE, _held, _chores_waiting
    _STATE, _held, _chores_waiting = threading.Condition(), False, 0


os.register_at_fork(after_in_child=_reset_in_child)


def _take(chore: bool) -> None:
    global _held, _chores_waiting
    with _STATE:
        if chore:
            _chores_waiting += 1
        try:
            while _held or (not chore and _chores_waiting):
                _STATE.wait()  # off the GIL
        finally:
            if chore:
                _chores_waiting -= 1
        _held = True


def _give() -> None:
    global _held
    with _STATE:
        _held = False
        _STATE.notify_all()


@contextmanager
def timed_region() -> Iterator[None]:
    """Hold the gate while timing: chores wait until the region ends, and a region waits
    for the chores already waiting."""
    _take(chore=False)
    _inside.active = True
    try:
        yield
    finally:
        _inside.active = False
        _give()


def in_timed_region() -> bool:
    """Whether the calling thread is inside a timed region."""
    return bool(getattr(_inside, "active", False))


@contextmanager
def chore() -> Iterator[None]:
    """Background host work: waits (off the GIL) until no region is timed, then runs before
    any region that starts after it asked."""
    _take(chore=True)
    try:
        yield
    finally:
        _give()


@contextmanager
def periodic(fn: Callable[[], None], every_s: float, name: str) -> Iterator[None]:
    """Call `fn` every `every_s` seconds in a daemon thread, each call as a chore.

    The thread is stopped and joined when the block ends; `fn` must not raise.
    """
    if not every_s > 0:
        raise ValueError(f"period must be positive, got {every_s}")
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            with chore():
                if stop.is_set():  # the block ended while we waited for the gate
                    return
                fn()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
