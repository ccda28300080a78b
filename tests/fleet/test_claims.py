"""Claims: several tuning processes never measure the same (device, problem) twice at once."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timedelta, tzinfo
from pathlib import Path

import pytest
from sqlalchemy import insert

from db import claims
from db.engine import open_store
from db.models import Claim
from db.rows import canonical_json
from tests.fleet.helpers import QUICK, algos, stored
from tests.fleet.workers import tune
from tests.tuner.fakes import Fake, small_problem
from tuner import results as R
from tuner.claims import owner_is_dead, pid_namespace
from tuner.devices import identify
from tuner.errors import ClaimTimeout
from tuner.tuning import Tuner

ROOT = Path(__file__).resolve().parents[2]


def test_claim_is_exclusive_renewable_and_released(store_url: str) -> None:
    store = open_store(store_url)
    args = {"fingerprint": "f" * 32, "problem": '{"n":1}'}
    with store.session() as s:
        assert claims.try_claim(session=s, owner="a", ttl_s=60, **args)
    with store.session() as s:
        assert not claims.try_claim(session=s, owner="b", ttl_s=60, **args)
        assert claims.claim_holder(session=s, **args)["owner"] == "a"  # type: ignore[index]
        assert claims.renew_claim(session=s, owner="a", ttl_s=60, **args)
        assert not claims.renew_claim(session=s, owner="b", ttl_s=60, **args)
        claims.release_claim(session=s, owner="b", **args)  # not b's: stays
    with store.session() as s:
        assert claims.claim_holder(session=s, **args) is not None
        claims.release_claim(session=s, owner="a", **args)
    with store.session() as s:
        assert claims.claim_holder(session=s, **args) is None
        assert claims.try_claim(session=s, owner="b", ttl_s=60, **args)


def test_several_processes_measure_each_candidate_exactly_once(
    store_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "measured.log"
    problems = [small_problem(n=n).key() for n in (1, 2, 3)]
    orders = [problems, problems[::-1], problems[1:] + problems[:1], problems]
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(len(orders), mp_context=spawn) as pool:
        answers = list(pool.map(tune, [store_url] * 4, [str(log)] * 4, orders))

    who: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for line in log.read_text().splitlines():
        pid, problem, algorithm, config = line.split("|")
        who[(problem, algorithm, config)].add(pid)
    assert len(who) == 3 * 3  # 3 problems x (direct + fft/a + fft/b)
    assert all(len(pids) == 1 for pids in who.values()), dict(who)
    assert len(stored(open_store(store_url))) == 9
    for answer in answers:  # everyone got every answer; one of them measured it
        assert len(answer) == 9
        assert {source for *_, source in answer} <= {R.FRESH, R.MEASURED_HERE}
    fresh = [a for answer in answers for a in answer if a[-1] == R.FRESH]
    assert len(fresh) == 9
    with open_store(store_url).session() as s:
        assert claims.list_claims(session=s) == []


def _claim_row(store_url: str, owner: str, expires_in_s: float) -> None:
    problem = small_problem()
    with open_store(store_url).session() as s:
        now = claims.db_now(session=s)
        s.execute(insert(Claim).values(
            device_fingerprint=identify("cpu").fingerprint,
            problem=canonical_json(problem.key()), owner=owner, claimed_at=now,
            expires_at=now + timedelta(seconds=expires_in_s),
        ))


def test_a_killed_tuners_expired_claim_is_taken_over(store_url: str) -> None:
    # A tuner that crashed (pid 999999 is not running) left its claim behind.
    _claim_row(store_url, f"{os.uname().nodename}:999999:dead", expires_in_s=-5)
    a = Fake("direct")
    started = time.monotonic()
    results = Tuner(open_store(store_url), policy=QUICK, algorithms=algos(a)).find(
        small_problem(), "cpu"
    )
    assert results[0].source == R.FRESH and a.runs > 0
    assert time.monotonic() - started < 5
    with open_store(store_url).session() as s:
        assert claims.list_claims(session=s) == []


def test_a_hung_tuners_live_claim_expires_and_is_taken_over(store_url: str) -> None:
    # A live process claims with a 1.5 s lease and never releases or renews it.
    target = canonical_json(small_problem().key())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    hung = subprocess.Popen(
        [sys.executable, "-m", "tests.fleet.workers", store_url,
         identify("cpu").fingerprint, target, "1.5"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert hung.stdout is not None and hung.stdout.readline().strip() == "claimed"
        a = Fake("direct")
        started = time.monotonic()
        tuner = Tuner(open_store(store_url), policy=QUICK, algorithms=algos(a), claim_wait_s=30)
        results = tuner.find(small_problem(), "cpu")
        waited = time.monotonic() - started
        assert hung.poll() is None  # still alive: its claim expired, it was not released
        assert results[0].source == R.FRESH and a.runs > 0
        assert 0.5 < waited < 10
    finally:
        hung.kill()
        hung.wait()
        if hung.stdout is not None:
            hung.stdout.close()


def test_waiting_is_bounded(db_url: str) -> None:
    _claim_row(db_url, "otherhost:42:busy", expires_in_s=600)
    a = Fake("direct")
    tuner = Tuner(open_store(db_url), policy=QUICK, algorithms=algos(a), claim_wait_s=0.3)
    with pytest.raises(ClaimTimeout, match="otherhost:42:busy"):
        tuner.find(small_problem(), "cpu")
    assert a.runs == 0


def test_claim_is_renewed_while_measuring(db_url: str) -> None:
    class Slow(Fake):
        def run(self, *args: object) -> None:
            time.sleep(0.1)
            super().run(*args)  # type: ignore[arg-type]

    seen: list[float] = []
    tuner = Tuner(
        open_store(db_url), policy=QUICK, algorithms=algos(Slow("direct")), claim_ttl_s=0.3
    )
    original = claims.renew_claim

    def spy(**kw: object) -> bool:
        ok = original(**kw)  # type: ignore[arg-type]
        seen.append(time.monotonic())
        assert ok, "our claim was lost while we measured"
        return ok

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(claims, "renew_claim", spy)
        tuner.find(small_problem(), "cpu")
    assert len(seen) >= 2
    with open_store(db_url).session() as s:
        assert claims.list_claims(session=s) == []


def _claim_for(store_url: str, owner: str, ttl_s: float = 600) -> None:
    from tuner.devices import identify

    with open_store(store_url).session() as session:
        assert claims.try_claim(
            session=session, fingerprint=identify("cpu").fingerprint,
            problem=canonical_json(small_problem().key()), owner=owner, ttl_s=ttl_s,
        )


def test_claim_of_a_dead_local_process_is_taken_over_at_once(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 12 (4): after `kill -9`, the next run stalled silently until the dead tuner's
    # claim expired (up to 60 s), although the claim names this host and a gone PID.
    import socket

    from tuner.api import find_best_algorithm

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _claim_for(db_url, f"{socket.gethostname()}:{gone.pid}:deadbeef0000:{pid_namespace()}")
    started = time.monotonic()
    best = find_best_algorithm(small_problem(), "cpu", db=db_url)
    assert best.source == R.FRESH and time.monotonic() - started < 30
    assert "no longer runs" in caplog.text


# Bug (a review of 2026-11-30): a tuner in another PID namespace with this host's name (two
# containers with host networking) judged a live tuner dead by its PID, which means nothing
# in its own namespace, took its claim over, and both measured the same problem at once.
@pytest.mark.parametrize("namespace", ["4026531836999", None])
def test_a_claim_from_another_pid_namespace_is_not_taken_over(
        db_url: str, monkeypatch: pytest.MonkeyPatch, namespace: str | None) -> None:
    import socket

    from tuner.api import find_best_algorithm

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its PID is free here, as a live PID of another namespace may be
    owner = f"{socket.gethostname()}:{gone.pid}:cafe00000000"
    assert not owner_is_dead(owner)  # an older tuner's id says no namespace: alive
    if namespace is not None:
        owner += f":{namespace}"
        assert not owner_is_dead(owner)
    monkeypatch.setenv("CONVTUNE_CLAIM_WAIT_S", "0.3")
    _claim_for(db_url, owner)
    with pytest.raises(ClaimTimeout, match="cafe00000000"):
        find_best_algorithm(small_problem(), "cpu", db=db_url)


# Bug (same review): when a save failed (a locked SQLite store), the release of the claim
# failed too, and the same tuner's next attempt waited for its own leftover claim until it
# expired (up to 60 s), logging that another tuner was measuring.
def test_a_tuner_takes_back_its_own_leftover_claim(db_url: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    import logging

    tuner = Tuner(open_store(db_url), policy=QUICK, algorithms=algos(Fake("a")),
                  claim_ttl_s=600.0, claim_wait_s=0.3)
    _claim_for(db_url, tuner.owner)
    caplog.set_level(logging.INFO)
    started = time.monotonic()
    found = tuner.find(small_problem(), "cpu")
    assert {r.source for r in found} == {R.FRESH} and time.monotonic() - started < 30
    assert "taking back our own claim" in caplog.text


def test_waiting_for_a_live_claim_says_who_holds_it(
    db_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner.api import find_best_algorithm
    from tuner.errors import ClaimTimeout

    monkeypatch.setenv("CONVTUNE_CLAIM_WAIT_S", "0.3")
    _claim_for(db_url, "gpu-host-7:4242:cafe00000000")
    with pytest.raises(ClaimTimeout, match="gpu-host-7:4242"):
        find_best_algorithm(small_problem(), "cpu", db=db_url)
    assert "being measured by gpu-host-7:4242:cafe00000000 (claim until" in caplog.text


# Renewing pushes the expiry ahead: a renewed claim whose first lease ran out is still
# held, so a crashed tuner's lease is not what decides while its owner keeps renewing.
def test_renewing_pushes_the_expiry_ahead(store_url: str) -> None:
    args = {"fingerprint": "f" * 32, "problem": '{"n":1}'}
    with open_store(store_url).session() as s:
        assert claims.try_claim(session=s, owner="a", ttl_s=-5, **args)  # already run out
        assert claims.renew_claim(session=s, owner="a", ttl_s=600, **args)
    with open_store(store_url).session() as s:
        holder = claims.claim_holder(session=s, **args)
        assert holder is not None
        assert holder["expires_at"] - claims.db_now(session=s) > timedelta(seconds=500)
        assert not claims.try_claim(session=s, owner="b", ttl_s=60, **args)
        assert claims.claim_holder(session=s, **args)["owner"] == "a"  # type: ignore[index]


# A claim has expired at its expiry instant itself (expires_at <= now), not only after it.
def test_a_claim_is_expired_at_its_expiry_instant(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = {"fingerprint": "f" * 32, "problem": '{"n":1}'}
    with open_store(store_url).session() as s:
        now = claims.db_now(session=s)
    monkeypatch.setattr(claims, "db_now", lambda session: now)
    with open_store(store_url).session() as s:
        assert claims.try_claim(session=s, owner="a", ttl_s=0, **args)
    with open_store(store_url).session() as s:
        assert claims.try_claim(session=s, owner="b", ttl_s=60, **args)
        assert claims.claim_holder(session=s, **args)["owner"] == "b"  # type: ignore[index]


# On PostgreSQL the server's clock judges expiry: a tuner whose host clock runs a day ahead
# must not take over a live claim of another host.
@pytest.mark.postgres
def test_a_skewed_host_clock_does_not_expire_claims_on_postgresql(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = {"fingerprint": "f" * 32, "problem": '{"n":1}'}
    with open_store(pg_url).session() as s:
        assert claims.try_claim(session=s, owner="a", ttl_s=600, **args)

    class DayAhead(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> DayAhead:
            return cls.fromtimestamp(time.time() + 86400, tz)

    monkeypatch.setattr(claims, "datetime", DayAhead)
    with open_store(pg_url).session() as s:
        assert not claims.try_claim(session=s, owner="b", ttl_s=600, **args)
        assert claims.claim_holder(session=s, **args)["owner"] == "a"  # type: ignore[index]


# Claiming one problem sweeps only that problem's expired claim: another problem's expired
# claim stays its owner's until someone claims that problem, so its owner can still renew it.
def test_claiming_one_problem_leaves_another_problems_expired_claim(store_url: str) -> None:
    fingerprint = "f" * 32
    with open_store(store_url).session() as s:
        assert claims.try_claim(session=s, fingerprint=fingerprint, problem='{"n":1}',
                                owner="a", ttl_s=-5)
        assert claims.try_claim(session=s, fingerprint=fingerprint, problem='{"n":2}',
                                owner="b", ttl_s=60)
        assert claims.renew_claim(session=s, fingerprint=fingerprint, problem='{"n":1}',
                                  owner="a", ttl_s=60)
        assert [c["owner"] for c in claims.list_claims(session=s)] == ["a", "b"]


# list_claims answers oldest first, whatever order the rows were written in.
def test_claims_are_listed_oldest_first(store_url: str) -> None:
    with open_store(store_url).session() as s:
        now = claims.db_now(session=s)
        for owner, age_s in (("newer", 10), ("older", 3600)):
            s.execute(insert(Claim).values(
                device_fingerprint="f" * 32, problem=f'{{"owner":"{owner}"}}', owner=owner,
                claimed_at=now - timedelta(seconds=age_s), expires_at=now + timedelta(hours=1),
            ))
    with open_store(store_url).session() as s:
        assert [c["owner"] for c in claims.list_claims(session=s)] == ["older", "newer"]


# claim_holder answers for the one problem asked about, not for the device's other claims.
def test_claim_holder_is_per_problem(store_url: str) -> None:
    fingerprint = "f" * 32
    with open_store(store_url).session() as s:
        for owner, problem in (("a", '{"n":1}'), ("b", '{"n":2}')):
            assert claims.try_claim(session=s, fingerprint=fingerprint, problem=problem,
                                    owner=owner, ttl_s=60)
    with open_store(store_url).session() as s:
        holder = claims.claim_holder(session=s, fingerprint=fingerprint, problem='{"n":2}')
        assert holder is not None and holder["owner"] == "b"
        assert claims.claim_holder(session=s, fingerprint=fingerprint, problem='{"n":3}') is None


# Mutation gap: a claim lasts its whole ttl from the store's clock (not a moment less), and
# claiming, sweeping and releasing touch only the one (device, problem): one owner's other
# claims, on another problem or another device, stay held and renewable.
def test_a_claim_lasts_its_ttl_and_touches_only_its_device_and_problem(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_store(store_url).session() as s:
        start = claims.db_now(session=s)
    clock = [start]
    monkeypatch.setattr(claims, "db_now", lambda session: clock[0])
    one, two = {"fingerprint": "f" * 32, "problem": '{"n":1}'}, {"fingerprint": "f" * 32,
                                                                 "problem": '{"n":2}'}
    gone = {"fingerprint": "e" * 32, "problem": '{"n":1}'}
    with open_store(store_url).session() as s:
        for args in (one, two):
            assert claims.try_claim(session=s, owner="a", ttl_s=60, **args)
        assert claims.try_claim(session=s, owner="a", ttl_s=-5, **gone)  # expired already
        holder = claims.claim_holder(session=s, **one)
        assert holder is not None and holder["claimed_at"] == start
        assert holder["expires_at"] == start + timedelta(seconds=60)
    clock[0] = start + timedelta(seconds=59.999)
    with open_store(store_url).session() as s:
        assert not claims.try_claim(session=s, owner="b", ttl_s=60, **one)
        claims.release_claim(session=s, owner="a", **one)
        assert claims.try_claim(session=s, owner="b", ttl_s=60, **one)  # sweeps nothing else
    with open_store(store_url).session() as s:
        assert claims.renew_claim(session=s, owner="a", ttl_s=60, **gone)
        assert claims.claim_holder(session=s, **two)["owner"] == "a"  # type: ignore[index]
        assert not claims.try_claim(session=s, owner="b", ttl_s=60, **two)
        assert claims.claim_holder(session=s, fingerprint="e" * 32, problem='{"n":2}') is None
