"""The store at its edges: values a column cannot hold, time zones, LIKE wildcards, races."""

from __future__ import annotations

import os
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url

from db import bundles as db_bundles
from db import find as store_find
from db import keys, reports
from db.engine import open_store
from tests.fleet.helpers import gpu, later, row, seed, stored
from tests.tuner.fakes import small_problem
from tuner.bundles import export_bundle

H100 = gpu()


def test_problem_too_large_for_a_column_is_a_value_error(store_url: str) -> None:
    key = small_problem().key() | {"n": 2**31}
    store = open_store(store_url)
    with store.session() as s:
        # Looking it up answers "not stored" (PostgreSQL would refuse the bind otherwise).
        assert keys.find_problem_id(session=s, key=key) is None
        assert store_find.load_measurements(
            session=s, fingerprint=H100.fingerprint, key=key, impl_hashes={"direct": "x"}
        ) == []
        assert store_find.load_similar_measurements(
            session=s, fingerprint=H100.fingerprint, like={"r": 2**40},
            impl_hashes={"direct": "x"},
        ) == []
        total, _ = reports.list_results(session=s, filters={"n": 2**40})
        assert total == 0
    with pytest.raises(ValueError, match="n=2147483648"), store.session() as s:
        keys.ensure_problem(session=s, key=key)


def test_device_too_large_for_a_column_is_a_value_error(store_url: str) -> None:
    info = dict(gpu().info, units=2**31)
    with pytest.raises(ValueError, match="units"), open_store(store_url).session() as s:
        keys.ensure_device(session=s, fingerprint="f" * 32, info=info)



# Mutation gap: the column bounds are exact (both ends of INTEGER fit, one past does not;
# units below 0 are refused, memory_bytes up to BIGINT's end fits), a device's fields are
# stored as given, and problems differing only in direction or math are rows of their own.
def test_column_bounds_are_exact_and_every_key_field_counts(store_url: str) -> None:
    assert keys.out_of_range({"n": 2**31 - 1, "pad_h": -(2**31)}) is None
    assert keys.out_of_range({"pad_h": -(2**31) - 1}) == "pad_h"
    store = open_store(store_url)
    base = small_problem().key() | {"n": 2**31 - 1}  # a key: ConvProblem caps n lower
    twins = [base, base | {"math": "tf32"}, base | {"direction": "backward_data"}]
    with store.session() as s:
        ids = [keys.ensure_problem(session=s, key=key) for key in twins]
        assert len(set(ids)) == 3
        assert [keys.find_problem_id(session=s, key=key) for key in twins] == ids
        keys.ensure_device(session=s, fingerprint="b" * 32,
                           info=dict(H100.info, memory_bytes=2**63 - 1))
    with pytest.raises(ValueError, match="units"), store.session() as s:
        keys.ensure_device(session=s, fingerprint="c" * 32, info=dict(H100.info, units=-1))
    with store.session() as s:
        [device] = reports.list_devices(session=s)
    assert (device["kind"], device["name"], device["arch"], device["units"],
            device["memory_bytes"]) == ("cuda", H100.info["name"], "9.0", 132, 2**63 - 1)


def test_measured_at_is_stored_and_read_as_utc(store_url: str) -> None:
    # Written with a +05:30 offset: the same instant comes back, in UTC, on both dialects.
    url = store_url
    if url.startswith("postgresql"):
        # A session time zone other than UTC: PostgreSQL answers in it unless converted.
        kolkata = make_url(url).update_query_dict({"options": "-c timezone=Asia/Kolkata"})
        url = kolkata.render_as_string(hide_password=False)
    store = open_store(url)
    at = later(0).astimezone(timezone(timedelta(hours=5, minutes=30)))
    seed(store, H100, small_problem(), [row("direct", 1.0, at=at)])
    with store.session() as s:
        _, page = reports.list_results(session=s)
    assert page[0]["measured_at"] == later(0).isoformat()


def test_device_prefix_is_not_a_like_pattern(store_url: str) -> None:
    store = open_store(store_url)
    seed(store, H100, small_problem(), [row("direct", 1.0)])
    with store.session() as s:
        for pattern in ("%", "_" * 8, H100.fingerprint[:4] + "%"):
            total, _ = reports.list_results(session=s, filters={"device": pattern})
            assert total == 0, pattern
        assert reports.list_results(session=s, filters={"device": H100.fingerprint[:8]})[0] == 1
    for pattern in ("%", "_"):
        with pytest.raises(ValueError, match="no device"):
            export_bundle(store, device=pattern)


@pytest.mark.parametrize("what", ["device", "problem"])
def test_ensure_survives_a_concurrent_insert(
    store_url: str, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    # Another process inserts the same device (problem) between our lookup and our insert:
    # we use its row instead of failing the whole transaction.
    store = open_store(store_url)
    key = small_problem().key()
    finder = "find_device_id" if what == "device" else "find_problem_id"
    real = getattr(keys, finder)
    calls = {"n": 0}

    def racing(**kwargs: Any) -> int | None:
        calls["n"] += 1
        if calls["n"] == 1:
            with store.session() as other:  # commits before we insert
                if what == "device":
                    keys.ensure_device(session=other, fingerprint=H100.fingerprint,
                                          info=H100.info)
                else:
                    keys.ensure_problem(session=other, key=key)
            return None
        result: int | None = real(**kwargs)
        return result

    with store.session() as s:
        monkeypatch.setattr(keys, finder, racing)
        if what == "device":
            ident = keys.ensure_device(session=s, fingerprint=H100.fingerprint, info=H100.info)
            assert ident == real(session=s, fingerprint=H100.fingerprint)
        else:
            ident = keys.ensure_problem(session=s, key=key)
            assert ident == real(session=s, key=key)
        monkeypatch.setattr(keys, finder, real)
        # The transaction is still usable after the refused insert.
        store_find.save_measurements(session=s, fingerprint=H100.fingerprint,
                                  device_info=H100.info, key=key, rows=[row("fft", 2.0)])
    assert calls["n"] >= 2


def test_merge_records_converts_offsets(store_url: str) -> None:
    # db.bundles compares and stores instants, whatever offset its caller's rows carry.
    store = open_store(store_url)
    key = small_problem().key()
    seed(store, H100, small_problem(), [row("direct", 1.0, at=later(0))])
    plus_two = later(0).astimezone(timezone(timedelta(hours=2)))
    with store.session() as s:
        counts = db_bundles.merge_records(
            session=s, devices={H100.fingerprint: H100.info}, problems={0: key},
            measurements=[(H100.fingerprint, 0, row("direct", 5.0, at=plus_two))],
        )
    assert counts["unchanged"] == 1


@pytest.mark.parametrize("name", ["device", "algorithm", "config", "status", "dtype"])
def test_nul_in_a_text_filter_matches_nothing(store_url: str, name: str) -> None:
    # PostgreSQL refuses NUL in a text parameter: the filter must not reach it as one.
    store = open_store(store_url)
    seed(store, H100, small_problem(), [row("direct", 1.0)])
    with store.session() as s:
        assert reports.list_results(session=s, filters={name: "a\x00"}) == (0, [])
    with pytest.raises(ValueError, match="no device"):
        export_bundle(store, device="\x00")


def test_results_route_with_nul_in_a_filter_is_not_a_500(db_url: str) -> None:
    from api.app import create_app
    from api.settings import Settings
    from tests.api.conftest import TestClient

    with TestClient(create_app(Settings(db_url=db_url)), raise_server_exceptions=False) as c:
        assert c.get("/v1/results", params={"algorithm": "a\x00"}).json()["total"] == 0
        assert c.get("/v1/bundles", params={"device": "\x00"}).status_code == 404


def test_a_layers_write_takes_as_many_statements_however_many_rows(store_url: str) -> None:
    # Bug pinned: storing a layer read the table once per row, each read flushing the
    # insert before it: 11 ms a layer on a CPU, 19 ms on the H200's host (2026-11-27).
    store = open_store(store_url)
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    def write(problem: Any, rows: int) -> int:
        statements.clear()
        event.listen(store.engine, "before_cursor_execute", count)
        try:
            seed(store, H100, problem, [row(f"a{i % 3}", 1.0 + i, config=f"c{i}")
                                        for i in range(rows)])
        finally:
            event.remove(store.engine, "before_cursor_execute", count)
        return len(statements)

    seed(store, H100, small_problem(k=2), [row("warm", 1.0)])  # device known to both
    assert write(small_problem(k=3), 3) == write(small_problem(k=5), 30)
    assert write(small_problem(k=3), 3) == write(small_problem(k=5), 30)  # now updates
    kept = [r for r in stored(store) if r["problem"] == small_problem(k=5).describe()]
    assert sorted(r["time_ms"] for r in kept) == [1.0 + i for i in range(30)]


def test_a_configuration_given_twice_in_one_write_keeps_the_last(store_url: str) -> None:
    store = open_store(store_url)
    seed(store, H100, small_problem(), [row("direct", 2.0), row("direct", 1.5)])
    assert [r["time_ms"] for r in stored(store)] == [1.5]


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_a_process_keeps_only_so_many_stores_open(tmp_path: Path) -> None:
    # Bug (a review of resource lifetimes): every database a process used stayed open, with
    # its services and fitted models: at about 340 SQLite files, out of file descriptors.
    import gc
    import weakref

    from db import engine
    from tests.tuner.fakes import small_problem
    from tuner import service as service_module
    from tuner.model import model_cache
    from tuner.service import service

    memory = service("sqlite://")
    memory.find(small_problem(), "cpu")
    before = _descriptors()
    first = weakref.ref(service(f"sqlite:///{tmp_path}/0.db").store)
    for i in range(engine.MAX_STORES * 3):
        opened = service(f"sqlite:///{tmp_path}/{i}.db")
        opened.find(small_problem(), "cpu")
        model_cache(opened.store).model("cpu")  # as a fast find would: kept by its store
    del opened
    assert len(engine._STORES) == engine.MAX_STORES + 1  # the in-memory one stays open
    assert len(service_module._SERVICES) <= engine.MAX_STORES + 1
    assert _descriptors() - before <= 3 * engine.MAX_STORES
    gc.collect()
    assert first() is None  # gone, with its model cache
    assert service("sqlite://") is memory and memory.find(small_problem(), "cpu", mode="cached")
    # A closed store opens again, its measurements still there.
    again = service(f"sqlite:///{tmp_path}/0.db")
    assert again.find(small_problem(), "cpu", mode="cached")


def test_closing_stores_survives_uses_that_reorder_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Bug (the review of the session's changes): opened_store() moves its URL to the end
    # without the lock, and closing the least recently used iterated the table itself:
    # open_store raised "OrderedDict mutated during iteration" after adding its store.
    from db import engine

    hot = f"sqlite:///{tmp_path}/hot.db"
    open_store(hot)
    in_memory = engine._in_memory

    def reordering(url: Any) -> bool:
        engine.opened_store(hot)  # as another thread's cached call would, meanwhile
        return in_memory(url)

    monkeypatch.setattr(engine, "_in_memory", reordering)
    for i in range(engine.MAX_STORES + 2):
        open_store(f"sqlite:///{tmp_path}/{i}.db")
    assert engine.is_open(open_store(hot))


# Exports and merges read ids in chunks (IN lists of _CHUNK ids): every id of every chunk is
# read, so a store with more devices or problems than one chunk round-trips whole.
def test_ids_beyond_one_chunk_export_and_merge_whole(
    store_url: str, other_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner.bundles import import_bundle

    monkeypatch.setattr(db_bundles, "_CHUNK", 2)
    store = open_store(store_url)
    for units in (100, 101, 102):
        seed(store, gpu(units=units), small_problem(), [row("direct", 1.0)])
    for n in (2, 3, 4):
        seed(store, H100, small_problem(n=n), [row("direct", 2.0)])
    text = export_bundle(store)
    assert len(stored(store)) == 6
    other = open_store(other_url)
    assert import_bundle(other, text)["added"] == 6
    assert stored(other) == stored(store)
    assert import_bundle(other, text)["unchanged"] == 6
