"""Tuning from forked processes: each child claims as itself, on connections of its own, and
a killed tuner nobody reaped frees its claims (a review of concurrency, 2026-11-30)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from db.engine import open_store
from tests.fleet.helpers import QUICK, algos
from tests.tuner.fakes import Fake, small_problem
from tuner.claims import owner_is_dead, pid_namespace
from tuner.tuning import Tuner

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _in_child(answer: Callable[[], object]) -> str:
    """The forked child's pid and what `answer` gives there, as "pid|text"."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, then leave without pytest's teardown
        try:
            os.write(write, str(answer()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return f"{pid}|{text}"


# Bug: a tuner's claim owner was made when the tuner was, so every child forked from a
# process that had tuned (a multiprocessing pool after a first find) claimed as its parent,
# took its siblings' live claims as its own leftovers, and all measured one problem at once.
def test_a_forked_child_claims_as_itself(db_url: str) -> None:
    tuner = Tuner(open_store(db_url), policy=QUICK, algorithms=algos(Fake("a")))
    tuner.find(small_problem(), "cpu")
    parent = tuner.owner
    pid, child = _in_child(lambda: tuner.owner).split("|")
    assert child != parent and f":{pid}:" in child
    assert tuner.owner == parent  # the parent's own is kept


# Bug: a forked child used the connections its parent's pools held (SQLite's must not
# cross a fork): the child's pools now start empty.
def test_a_forked_child_opens_connections_of_its_own(db_url: str) -> None:
    store = open_store(db_url)
    Tuner(store, policy=QUICK, algorithms=algos(Fake("a"))).find(small_problem(), "cpu")
    def kept() -> int:  # connections the pool (a QueuePool) holds for the next session
        pool: Any = store.engine.pool
        return int(pool.checkedin())

    assert kept() >= 1  # the parent's
    _pid, inherited = _in_child(kept).split("|")
    assert inherited == "0"


# Bug: a killed tuner that nobody reaped (a supervisor that never waited) still answered
# signal 0, and held its claims until they expired (62 s, against 4 s once reaped).
def test_an_unreaped_dead_tuner_is_dead() -> None:
    if not os.path.exists("/proc/self/stat") or pid_namespace() is None:
        pytest.skip("no /proc: a zombie cannot be told from a live process here")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        owner = f"{socket.gethostname()}:{child.pid}:cafe00000000:{pid_namespace()}"
        assert not owner_is_dead(owner)  # running
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not owner_is_dead(owner) and time.monotonic() < deadline:
            time.sleep(0.01)  # the kill lands; the child stays unreaped, a zombie
        assert owner_is_dead(owner)
    finally:
        child.kill()
        child.wait()


# Bug (in the fix above): disposing an in-memory SQLite store's pool in the child left it a
# new, empty database ("no such table"): its one connection is the database.
def test_a_forked_child_keeps_its_copy_of_an_in_memory_store() -> None:
    from sqlalchemy import select

    from db.models import Measurement

    store = open_store("sqlite://")
    Tuner(store, policy=QUICK, algorithms=algos(Fake("a"))).find(small_problem(), "cpu")

    def rows() -> int:
        with store.session() as session:
            return len(list(session.scalars(select(Measurement.id))))

    assert rows() >= 1
    _pid, seen = _in_child(rows).split("|")
    assert seen == str(rows())


# Bug: a forked child inherited the timing gate (and the per-problem tuning locks) as other
# threads held them at the fork, and those threads do not exist in the child: its first
# timed region (its first tuning) waited for good.
@pytest.mark.parametrize("held", ["timed region", "tuning lock"])
def test_a_child_forked_while_another_thread_held_the_gate_can_tune(held: str) -> None:
    import threading

    from tuner import quiet, tuning

    key = ("fingerprint", small_problem())
    inside, done = threading.Event(), threading.Event()

    def holder() -> None:
        with quiet.timed_region() if held == "timed region" else tuning._lock_for(key):
            inside.set()
            done.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    inside.wait(10)

    def enter_in_child() -> str:
        entered = threading.Event()

        def enter() -> None:
            with quiet.timed_region(), tuning._lock_for(key):
                entered.set()

        threading.Thread(target=enter, daemon=True).start()
        return "entered" if entered.wait(2) else "stuck"

    try:
        _pid, answer = _in_child(enter_in_child).split("|")
    finally:
        done.set()
        thread.join()
    assert answer == "entered"


# Bug (the review of the session's changes): a store closed for db.engine.MAX_STORES but
# still held (a kept service) refilled its pool, and a forked child used those connections:
# the fork handler walked only the stores still open.
def test_a_forked_child_drops_a_closed_but_held_store_s_connections(tmp_path: Any) -> None:
    from db import engine

    held = open_store(f"sqlite:///{tmp_path}/held.db")
    for i in range(engine.MAX_STORES):
        open_store(f"sqlite:///{tmp_path}/{i}.db")
    assert not engine.is_open(held)
    Tuner(held, policy=QUICK, algorithms=algos(Fake("a"))).find(small_problem(), "cpu")
    def kept() -> int:  # connections its pool (a QueuePool) holds for the next session
        pool: Any = held.engine.pool
        return int(pool.checkedin())

    assert kept() >= 1
    _pid, inherited = _in_child(kept).split("|")
    assert inherited == "0"
