"""db.find at its own interface: which stored rows each query returns, what a save replaces,
and how the store's generation counter moves."""

from __future__ import annotations

import pytest

from algorithms.problem import ConvProblem
from db import find as store_find
from db.engine import open_store
from db.rows import MeasurementRow
from tests.fleet.helpers import T0, gpu, later, row, seed
from tests.tuner.fakes import small_problem
from tuner.devices import DeviceIdentity

HERE = gpu(driver="570.86.10")
OTHER = gpu(driver="550.54.15")  # the same model, other software
P1 = small_problem()
P2 = small_problem(r=1, s=1, pad=0)


def _keys(rows: list[MeasurementRow]) -> list[tuple[str, str, str]]:
    return sorted((r.algorithm, r.config, r.impl_hash) for r in rows)


# Mutation gap: load_measurements returns this device's rows of this problem made by the
# current code only; rows of older code must never be served as current.
def test_load_measurements_returns_only_current_code(store_url: str) -> None:
    store = open_store(store_url)
    seed(store, HERE, P1, [row("direct", 1.0, impl_hash="new"),
                           row("direct", 9.0, impl_hash="old"),
                           row("fft", 2.0, impl_hash="old")])
    seed(store, OTHER, P1, [row("direct", 3.0, impl_hash="new")])
    seed(store, HERE, P2, [row("direct", 4.0, impl_hash="new")])
    with store.session() as s:
        got = store_find.load_measurements(
            session=s, fingerprint=HERE.fingerprint, key=P1.key(),
            impl_hashes={"direct": "new", "fft": "new"})
    assert [(r.algorithm, r.time_ms, r.impl_hash) for r in got] == [("direct", 1.0, "new")]


# Mutation gap: other devices' rows are of the same kind, never the asking device's own,
# and only of current code (none at all when no hash is current).
def test_load_fleet_measurements_excludes_own_device_and_other_kinds(store_url: str) -> None:
    store = open_store(store_url)
    cpu_twin = gpu(kind="cpu", driver="0")  # same name and arch, another kind
    for identity in (HERE, OTHER, cpu_twin):
        seed(store, identity, P1, [row("direct", 1.0, impl_hash="new"),
                                   row("fft", 2.0, impl_hash="old")])
    with store.session() as s:
        args = dict(session=s, kind="cuda", name=HERE.info["name"], arch=HERE.info["arch"],
                    exclude_fingerprint=HERE.fingerprint, key=P1.key())
        found = store_find.load_fleet_measurements(**args, impl_hashes={"direct": "new"})
        assert [(d["fingerprint"], _keys(rows)) for d, rows in found] == [
            (OTHER.fingerprint, [("direct", "default", "new")])]
        assert store_find.load_fleet_measurements(**args, impl_hashes={}) == []


# Mutation gap: similar problems are this device's, match every field of `like`, and carry
# only rows of current code.
def test_load_similar_measurements_filters_device_fields_and_code(store_url: str) -> None:
    store = open_store(store_url)
    seed(store, HERE, P1, [row("direct", 1.0, impl_hash="new"),
                           row("fft", 2.0, impl_hash="old")])
    seed(store, HERE, P2, [row("direct", 3.0, impl_hash="new")])
    seed(store, OTHER, P1, [row("fft", 4.0, impl_hash="new")])
    with store.session() as s:
        found = store_find.load_similar_measurements(
            session=s, fingerprint=HERE.fingerprint, like={"r": 3, "s": 3},
            impl_hashes={"direct": "new", "fft": "new"})
        assert [(key, _keys(rows)) for key, rows in found] == [
            (P1.key(), [("direct", "default", "new")])]
        with pytest.raises(ValueError, match="unknown problem fields"):
            store_find.load_similar_measurements(
                session=s, fingerprint=HERE.fingerprint, like={"colour": 1}, impl_hashes={})


# Mutation gap: a save replaces only the row of the same device, problem, algorithm, config
# and code; the same candidate on another problem or device is a row of its own. Each row
# gets the store's recorded_at (merge precedence), replaced rows a new one.
def test_a_save_replaces_only_the_same_candidate_of_the_same_device_and_problem(
        store_url: str) -> None:
    from sqlalchemy import select

    from db.models import Measurement

    store = open_store(store_url)
    seed(store, HERE, P1, [row("direct", 1.0, at=T0)])
    seed(store, HERE, P2, [row("direct", 2.0, at=T0)])
    seed(store, OTHER, P1, [row("direct", 3.0, at=T0)])
    seed(store, HERE, P1, [row("direct", 4.0, at=later(1)), row("direct", 5.0, at=later(1),
                                                                impl_hash="v2")])
    with store.session() as s:
        def times(identity: DeviceIdentity, problem: ConvProblem) -> list[float | None]:
            got = store_find.load_measurements(
                session=s, fingerprint=identity.fingerprint, key=problem.key(),
                impl_hashes={"direct": "fake-v1"})
            return [r.time_ms for r in got]
        assert times(HERE, P1) == [4.0]
        assert times(HERE, P2) == [2.0]
        assert times(OTHER, P1) == [3.0]
        stamps = s.execute(select(Measurement.recorded_at)).scalars().all()
    assert len(stamps) == 4 and all(stamp is not None for stamp in stamps)


# Mutation gap: every save of rows moves the store's generation by exactly one and returns
# the value it produced; an empty save writes nothing and leaves the counter alone.
def test_a_save_moves_the_generation_once_and_returns_it(store_url: str) -> None:
    store = open_store(store_url)
    with store.session() as s:
        start = store_find.generation(session=s)
    produced = store.write(lambda s: store_find.save_measurements(
        session=s, fingerprint=HERE.fingerprint, device_info=HERE.info, key=P1.key(),
        rows=[row("direct", 1.0)]))
    assert produced == start + 1
    nothing = store.write(lambda s: store_find.save_measurements(
        session=s, fingerprint=HERE.fingerprint, device_info=HERE.info, key=P1.key(),
        rows=[]))
    assert nothing is None
    with store.session() as s:
        assert store_find.generation(session=s) == start + 1
        assert store_find.lock_for_write(session=s) == start + 2


# Mutation gap: the model's samples are the usable (ok, timed above zero) newest rows of
# each configuration on devices of the kind asked; of two rows measured at the same instant
# the later written is the newer (here a failure, so that configuration teaches nothing).
def test_timed_measurements_are_newest_usable_rows_of_one_kind(store_url: str) -> None:
    store = open_store(store_url)
    cpu_twin = gpu(kind="cpu", driver="0")
    seed(store, HERE, P1, [row("direct", 1.0),
                           row("fft", 0.0, config="zero"),
                           row("fft", 2.0, config="failed", status="failed"),
                           row("fft", 3.0, config="tie", impl_hash="old")])
    seed(store, HERE, P1, [row("fft", None, config="tie", impl_hash="new", status="failed")])
    seed(store, cpu_twin, P1, [row("direct", 5.0)])
    with store.session() as s:
        timed = store_find.load_timed_measurements(session=s, kind="cuda")
        assert [(key, r.algorithm, r.config, r.time_ms) for key, _units, r, _id in timed] == [
            (P1.key(), "direct", "default", 1.0)]
        assert store_find.count_timed_measurements(session=s, kind="cuda") == 1
