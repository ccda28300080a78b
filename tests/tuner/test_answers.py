"""The in-process answer cache: answers from memory, dropped by this or another process's writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from db import find as store_find
from db.engine import open_store
from tests.tuner.fakes import small_problem
from tuner import results as R
from tuner.answers import AnswerCache
from tuner.results import AlgorithmResult
from tuner.service import Service

ROOT = Path(__file__).resolve().parents[2]

def usable_times(results: list[AlgorithmResult]) -> dict[str, float | None]:
    """Each usable algorithm's time: what the child process prints, unusable ones left out."""
    return {r.algorithm: r.time_ms for r in results if r.usable}


RETUNE = """
import json, sys
from tuner import find_algorithms
from tests.tuner.fakes import small_problem
results = find_algorithms(small_problem(), device="cpu", mode="tune")
print(json.dumps({r.algorithm: r.time_ms for r in results if r.usable}))
"""


def test_cached_answers_do_not_read_the_store(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 9: every cached find read the database (60% of convolve()'s time).
    facade = Service(open_store(db_url), cache_check_s=3600)
    facade.best(small_problem(), "cpu")  # tunes (its own write: that answer is not kept)
    first = facade.best(small_problem(), "cpu")  # from the store, then kept

    def no_reads(**_kw: object) -> None:
        raise AssertionError("a cached answer read the store")

    monkeypatch.setattr(store_find, "load_measurements", no_reads)
    for _ in range(3):
        again = facade.best(small_problem(), "cpu")
        assert (again.algorithm, again.config, again.time_ms) == (
            first.algorithm, first.config, first.time_ms
        )


def test_a_retune_in_this_process_is_seen_at_once(db_url: str) -> None:
    facade = Service(open_store(db_url), cache_check_s=3600)
    facade.find(small_problem(), "cpu")  # tunes
    before = {r.algorithm: r.time_ms for r in facade.find(small_problem(), "cpu")}  # kept
    retuned = {r.algorithm: r.time_ms for r in facade.find(small_problem(), "cpu", mode="tune")}
    after = {r.algorithm: r.time_ms for r in facade.find(small_problem(), "cpu")}
    assert after == retuned != before  # timings never repeat to the last bit


def test_another_process_write_is_seen_within_the_check_interval(db_url: str) -> None:
    facade = Service(open_store(db_url), cache_check_s=0.5)
    facade.find(small_problem(), "cpu")  # tunes
    before = usable_times(facade.find(small_problem(), "cpu"))  # kept
    env = {**os.environ, "CONVTUNE_DB_URL": db_url, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", RETUNE], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    written = json.loads(done.stdout)
    assert written != before
    time.sleep(0.6)
    assert usable_times(facade.find(small_problem(), "cpu")) == written


def test_check_interval_comes_from_the_environment(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVTUNE_CACHE_CHECK_S", "7.5")
    assert Service(open_store(db_url)).answers.check_s == 7.5
    monkeypatch.setenv("CONVTUNE_CACHE_CHECK_S", "soon")
    with pytest.raises(ValueError, match="CONVTUNE_CACHE_CHECK_S"):
        Service(open_store(db_url))


def _full_cache(db_url: str, monkeypatch: pytest.MonkeyPatch) -> AnswerCache:
    """An answer cache of three entries holding "a", "b" and "c" (answers "A", "B", "C")."""
    from tuner import answers

    monkeypatch.setattr(answers, "MAX_ENTRIES", 3)
    cache = answers.AnswerCache(open_store(db_url), check_s=3600)
    for key in "abc":
        cache.put(key, cache.token(), key.upper())
    return cache


def test_the_answer_cache_drops_the_least_recently_used(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Bug (a review of resource lifetimes): 65,536 answers kept first in first out, about
    # 0.5 GB on the CPU and an estimated 2 GB for GPU answers, fillable by anonymous finds.
    cache = _full_cache(db_url, monkeypatch)
    assert cache.get("a") == "A"  # used: b is now the least recently used
    cache.put("d", cache.token(), "D")
    assert [cache.get(k) for k in "abcd"] == ["A", None, "C", "D"]
    cache.put("c", cache.token(), "C2")  # a kept key again: nothing goes
    cache.put("e", cache.token(), "E")
    assert [cache.get(k) for k in "acde"] == [None, "C2", "D", "E"]


def test_kept_plans_leave_least_recently_used_first(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Bug (a review of resource lifetimes): plans went first in first out, and the call plans
    # all at once when full, so a working set just over MAX_PLANS built a plan at every call.
    from tuner import service as service_module

    monkeypatch.setattr(service_module, "MAX_PLANS", 2)
    facade = Service(open_store(db_url), cache_check_s=3600)
    problems = [small_problem(h=h) for h in (5, 6, 7)]
    plans = [facade.plan(p, "cpu") for p in problems[:2]]
    assert facade.plan(problems[0], "cpu") is plans[0]  # used: problems[1] leaves next
    facade.plan(problems[2], "cpu")
    assert facade.plan(problems[0], "cpu") is plans[0]
    assert facade.plan(problems[1], "cpu") is not plans[1]
    token = facade.answers.token()
    for key, plan in zip("ab", plans, strict=True):
        facade.remember_call(key, token, plan)
    assert facade.call_plan("a") is plans[0]
    facade.remember_call("c", token, plans[1])
    assert [facade.call_plan(k) for k in "abc"] == [plans[0], None, plans[1]]


def test_tuning_keeps_no_lock_per_problem_once_done(db_url: str) -> None:
    # Bug (a review of resource lifetimes): one lock per (device, problem) ever tuned was
    # kept for good: 10,000 problems, 10,001 locks.
    from tuner import tuning

    facade = Service(open_store(db_url), cache_check_s=3600)
    for h in (5, 6, 7):
        facade.find(small_problem(h=h), "cpu")
        facade.find(small_problem(h=h), "cpu", mode="tune")
    assert len(tuning._lock_for) == 0


def test_an_invalidation_survives_gets_that_reorder_the_table(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Bug (the review of the session's changes): get() moves its key to the end without the
    # lock, and invalidate() iterated the table itself: "OrderedDict mutated during
    # iteration" came out of find(mode="tune") after its write, the tuned problem's old
    # answer still served. Another thread's get() is played here inside the iteration.
    from tuner import answers

    cache = answers.AnswerCache(open_store(db_url), check_s=3600)
    problems = [small_problem(h=h) for h in (5, 6, 7)]
    keys = [("fp", p, None, "auto") for p in problems]
    for key in keys:
        cache.put(key, cache.token(), "old")
    about = answers._about

    def reordering(key: object, fingerprint: str, problem: object) -> bool:
        cache._answers.move_to_end(keys[0])  # as another thread's get() does, meanwhile
        return about(key, fingerprint, problem)  # type: ignore[arg-type]

    monkeypatch.setattr(answers, "_about", reordering)
    cache.invalidate("fp", problems[1])
    assert cache.get(keys[1]) is None and cache.get(keys[0]) == "old"


def test_a_kept_prediction_is_dropped_when_its_neighbour_is_retuned(db_url: str) -> None:
    # Pins that a prediction kept in the answer cache (a `broad` answer) is dropped by this
    # process's write of another problem: it rests on the rows of the problem it was scaled
    # from, so a re-tune of that one must show in the next cached find at once.
    facade = Service(open_store(db_url), cache_check_s=3600)
    near, wanted = small_problem(n=2), small_problem(n=4)  # twice the work, never measured
    facade.find_candidates(near, "cpu")  # tunes
    kept = facade.find_candidates(wanted, "cpu", mode="cached")  # predicted, then kept
    assert {r.source for r in kept} == {R.PREDICTED, R.NOT_MEASURED}  # unsupported: not
    assert facade.find_candidates(wanted, "cpu", mode="cached") == kept  # from memory
    retuned = {(r.algorithm, r.config): r.time_ms
               for r in facade.find_candidates(near, "cpu", mode="tune") if r.time_ms}
    after = {(r.algorithm, r.config): r.time_ms
             for r in facade.find_candidates(wanted, "cpu", mode="cached") if r.time_ms}
    assert after and after == pytest.approx({k: 2 * ms for k, ms in retuned.items()})


def test_an_answer_computed_across_an_invalidation_is_not_kept(db_url: str) -> None:
    # Pins put()'s guard: an answer whose token was taken before a write of this process
    # (another thread's re-tune or import committed meanwhile) was computed from the old
    # rows, and is not kept; one taken after it is.
    from tuner import answers

    cache = answers.AnswerCache(open_store(db_url), check_s=3600)
    problem = small_problem(h=int(np.random.default_rng().integers(5, 12)))
    key = ("fp", problem, None, "auto")
    for write in (lambda: cache.invalidate("fp", problem), cache.clear):
        token = cache.token()
        write()
        cache.put(key, token, "stale")
        assert cache.get(key) is None
        cache.put(key, cache.token(), "fresh")
        assert cache.get(key) == "fresh"
        cache.clear()


def test_a_new_answer_of_a_kept_key_evicts_nothing_and_counts_as_used(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pins put() on a full cache: a new answer of a kept key takes no other answer out, and
    # makes that key the most recently used; a prediction (broad) taken out leaves no trace
    # (the broad keys stay bounded by the cap, like the answers).
    cache = _full_cache(db_url, monkeypatch)
    cache.put("b", cache.token(), "B2")  # full, but b is kept: nothing goes
    assert len(cache) == 3
    cache.put("a", cache.token(), "A2")  # the least recently used becomes the most
    cache.put("d", cache.token(), "D")  # c goes, not a
    assert [cache.get(k) for k in "abcd"] == ["A2", "B2", None, "D"]
    for n in range(20):
        cache.put(("broad", n), cache.token(), n, broad=True)
    assert len(cache) == 3 and len(cache._broad) <= 3


def test_own_write_generations_noted_between_checks_stay_bounded(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pins MAX_OWN: a process that writes without asking for answers (no check runs) notes
    # at most MAX_OWN of its write generations, not one per write for good.
    from tuner import answers

    monkeypatch.setattr(answers, "MAX_OWN", 3)
    cache = answers.AnswerCache(open_store(db_url), check_s=3600)
    cache.current()  # one read of the store's counter: what later generations follow
    seen = cache._seen or 0
    for generation in range(seen + 1, seen + 20):
        cache.invalidate("fp", small_problem(), generation)
    assert 0 < len(cache._own) <= 3
