"""The answer cache tells this process's writes from other processes' by generation number.

It counted its own writes (`invalidate` / `clear`) after they had committed, so a check of the
store's counter run by another thread in between (another request's answer) counted the
write as a foreign one, and the report then counted it again: the next write of another
process made the counter match and was taken for ours. Nothing was dropped, and the stale
answer stayed until some later foreign write, far past $CONVTUNE_CACHE_CHECK_S.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, update

from db import find as store_find
from db.engine import Store, open_store
from db.migrations import GENERATION_KEY
from db.models import Meta
from tests.fleet.helpers import row
from tests.tuner.fakes import small_problem
from tuner import answers as answers_module
from tuner import bundles
from tuner.results import AlgorithmResult
from tuner.service import Service
from tuner.tuning import Tuner

P = small_problem()
Q = small_problem(k=8)
CHECK_S = 10.0


class Clock:
    """Stands in for `time` in tuner.answers: checks fall due when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def due(self) -> None:
        self.now += CHECK_S


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(answers_module, "time", fake)
    return fake


@pytest.fixture
def other_store(db_url: str) -> Iterator[Store]:
    """The same database through another engine, as another process sees it: its writes
    reach no answer cache of this process."""
    open_store(db_url)  # created and upgraded by this process first
    engine = create_engine(db_url, connect_args={"timeout": 30})
    yield Store(db_url, engine)
    engine.dispose()


def times(results: list[AlgorithmResult]) -> dict[str, float | None]:
    return {r.algorithm: r.time_ms for r in results if r.usable}


def in_another_thread(work: Callable[[], Any]) -> None:
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()


def cached(facade: Service, problem: Any = Q) -> Service:
    """`facade` once `problem` is tuned and its answer is kept."""
    facade.find(problem, "cpu")  # tunes: an answer found during its own write is not kept
    facade.find(problem, "cpu")  # from the store, kept
    assert facade.cached_find(problem, "cpu") is not None
    return facade


@pytest.mark.parametrize("check_s", [0.0, CHECK_S])
def test_a_check_between_a_tunings_commit_and_its_report_masks_no_later_foreign_write(
    db_url: str, other_store: Store, clock: Clock, check_s: float
) -> None:
    facade = Service(open_store(db_url), cache_check_s=check_s)
    cached(facade, P)
    cached(facade, Q)
    before = times(facade.find(Q, "cpu"))
    report = facade.tuner._on_store
    assert report is not None

    def late(*args: Any) -> None:
        # The re-tune of P has committed, not yet reported: another thread answers Q, its
        # check of the store's counter reading P's write.
        clock.due()
        in_another_thread(lambda: facade.find(Q, "cpu"))
        report(*args)

    facade.tuner._on_store = late
    facade.find(P, "cpu", mode="tune")
    facade.tuner._on_store = report

    written = times(Tuner(other_store).find(Q, "cpu", mode="tune"))  # another process
    assert written != before  # timings never repeat to the last bit
    clock.due()
    assert times(facade.find(Q, "cpu")) == written


def test_a_check_between_an_imports_commit_and_its_report_masks_no_later_foreign_write(
    db_url: str, other_store: Store, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    facade = cached(Service(open_store(db_url), cache_check_s=CHECK_S))
    before = times(facade.find(Q, "cpu"))
    bundle = facade.export_bundle()
    merge = bundles.import_bundle

    def late(store: Store, data: str | bytes) -> dict[str, int]:
        counts = merge(store, data)  # committed; the answer cache is not told yet
        clock.due()
        in_another_thread(lambda: facade.find(Q, "cpu"))
        return counts

    monkeypatch.setattr(bundles, "import_bundle", late)
    facade.import_bundle(bundle)
    facade.find(Q, "cpu")  # kept again before the next check falls due

    written = times(Tuner(other_store).find(Q, "cpu", mode="tune"))  # another process
    assert written != before
    clock.due()
    assert times(facade.find(Q, "cpu")) == written


def test_a_late_report_leaves_later_own_writes_attributed(
    db_url: str, clock: Clock
) -> None:
    facade = cached(Service(open_store(db_url), cache_check_s=CHECK_S))
    facade.find(P, "cpu")
    report = facade.tuner._on_store
    assert report is not None

    def late(*args: Any) -> None:
        clock.due()
        facade.answers.current()  # a check reads this write's number first: drops all
        report(*args)  # ... so the report of that number is ignored

    facade.tuner._on_store = late
    facade.find(P, "cpu", mode="tune")
    facade.tuner._on_store = report
    cached(facade, Q)
    facade.find(P, "cpu", mode="tune")  # reported in time: that write is ours
    clock.due()
    assert facade.cached_find(Q, "cpu") is not None  # no other process wrote: Q kept


def test_own_writes_reported_before_a_check_drop_only_their_answers(
    db_url: str, other_store: Store, clock: Clock
) -> None:
    facade = cached(Service(open_store(db_url), cache_check_s=CHECK_S))
    facade.find(P, "cpu", mode="tune")
    facade.find(P, "cpu", mode="tune")
    clock.due()
    assert facade.cached_find(Q, "cpu") is not None  # both writes were ours
    facade.find(P, "cpu", mode="tune")
    Tuner(other_store).find(P, "cpu", mode="tune")  # and one of another process
    clock.due()
    assert facade.cached_find(Q, "cpu") is None


def test_a_store_counter_that_went_back_drops_everything(
    db_url: str, other_store: Store, clock: Clock
) -> None:
    facade = cached(Service(open_store(db_url), cache_check_s=CHECK_S))
    clock.due()
    facade.answers.current()
    other_store.write(lambda session: session.execute(
        update(Meta).where(Meta.key == GENERATION_KEY).values(value="0")))
    clock.due()
    assert facade.cached_find(Q, "cpu") is None


def test_a_write_returns_the_generation_it_produced(db_url: str) -> None:
    store = open_store(db_url)
    info = {"kind": "cpu", "name": "test"}

    def save(rows: list[Any]) -> int | None:
        return store.write(lambda session: store_find.save_measurements(
            session=session, fingerprint="fp", device_info=info, key=P.key(), rows=rows))

    with store.session() as session:
        start = store_find.generation(session=session)
    assert save([row("direct", 1.0)]) == start + 1
    assert store.write(lambda session: store_find.lock_for_write(session=session)) == start + 2
    assert save([row("direct", 2.0)]) == start + 3
    assert save([]) is None  # nothing written, nothing counted
    with store.session() as session:
        assert store_find.generation(session=session) == start + 3


def test_the_store_s_counter_is_read_once_per_check_interval(
    db_url: str, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pins $CONVTUNE_CACHE_CHECK_S: answers read the store's counter at most once per
    # interval (issue 9: a cached find that reads the database costs most of convolve()).
    reads: list[int] = []
    generation = store_find.generation

    def counted(*, session: Any) -> int:
        reads.append(1)
        return generation(session=session)

    monkeypatch.setattr(store_find, "generation", counted)
    cache = answers_module.AnswerCache(open_store(db_url), check_s=CHECK_S)
    for _ in range(5):
        assert cache.get(("fp", P, None, "auto")) is None
    assert len(reads) == 1
    clock.due()
    cache.get(("fp", P, None, "auto"))
    assert len(reads) == 2


def test_own_writes_noted_before_a_store_went_back_mask_no_foreign_write(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pins that a store whose counter went back (replaced) forgets the write numbers this
    # process noted: kept, a number the new store reaches by another process's write was
    # taken for ours, and that write's stale answer served.
    counter = {"now": 6}
    monkeypatch.setattr(store_find, "generation", lambda *, session: counter["now"])
    cache = answers_module.AnswerCache(open_store(db_url), check_s=0)  # checks every time
    key = ("fp", P, None, "auto")
    cache.current()
    cache.invalidate("fp", Q, generation=7)  # our write, reported before any check
    counter["now"] = 5  # the store is replaced, its counter behind
    cache.current()
    counter["now"] = 6  # another process writes
    cache.put(key, cache.token(), "answer")
    assert cache.get(key) is None  # a check saw 6: not ours
    cache.put(key, cache.token(), "answer")
    counter["now"] = 7  # another process writes again: number 7 is not ours in this store
    assert cache.get(key) is None
