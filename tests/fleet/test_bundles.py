"""Bundles: round trips between stores, merge semantics, and corrupt files refused."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import pytest

from algorithms.problem import ConvProblem
from db.engine import open_store
from db.migrations import SCHEMA_VERSION
from tests.fleet.helpers import gpu, later, row, seed, stored
from tests.tuner.fakes import small_problem
from tuner.bundles import BundleError, export_bundle, import_bundle, read_bundle

H100 = gpu()
A100 = gpu("NVIDIA A100-SXM4-80GB", "8.0", 108, driver="535.104.05")


def populate(url: str) -> None:
    store = open_store(url)
    seed(store, H100, small_problem(), [
        row("direct", 1.5), row("fft", 0.7),
        row("implicit_gemm", None, config="bn1024", status="failed", error="boom"),
    ])
    seed(store, H100, small_problem(n=8), [row("im2col_gemm", 2.25, workspace_bytes=4096)])
    seed(store, A100, small_problem(), [row("direct", 2.0, at=later(5))])


def body(text: str) -> list[str]:
    """The records of a bundle without its header (created_at differs per export)."""
    return text.splitlines()[1:-1]


def test_round_trip_between_stores(store_url: str, other_url: str) -> None:
    populate(store_url)
    text = export_bundle(open_store(store_url))
    bundle = read_bundle(text)
    assert bundle.header["format"] == "convtune-bundle" and bundle.header["version"] == 1
    assert bundle.header["schema_version"] == SCHEMA_VERSION
    assert bundle.counts() == {"devices": 2, "problems": 2, "measurements": 5}
    counts = import_bundle(open_store(other_url), text)
    assert counts["added"] == 5 and counts["replaced"] == counts["unchanged"] == 0
    assert stored(open_store(other_url)) == stored(open_store(store_url))
    # Exported again from the copy: the same records, byte for byte (the trailer also
    # hashes the header, whose created_at differs).
    assert body(export_bundle(open_store(other_url))) == body(text)


@pytest.mark.postgres
def test_sqlite_to_postgres_and_back(db_url: str, pg_url: str, other_url: str) -> None:
    populate(db_url)
    import_bundle(open_store(pg_url), export_bundle(open_store(db_url)))
    import_bundle(open_store(other_url), export_bundle(open_store(pg_url)))
    assert stored(open_store(pg_url)) == stored(open_store(db_url)) == stored(open_store(other_url))


def test_export_one_device_by_prefix(db_url: str) -> None:
    populate(db_url)
    bundle = read_bundle(export_bundle(open_store(db_url), device=A100.fingerprint[:10]))
    assert list(bundle.devices) == [A100.fingerprint]
    assert [r.algorithm for _, _, r in bundle.measurements] == ["direct"]
    with pytest.raises(ValueError, match="no device"):
        export_bundle(open_store(db_url), device="ffffffffffff")


def test_merge_semantics(store_url: str) -> None:
    store = open_store(store_url)
    p = small_problem()
    seed(store, H100, p, [row("direct", 1.0, at=later(10)), row("fft", 3.0, at=later(10))])
    mine = export_bundle(store)

    # Re-importing what the store already holds changes nothing.
    assert import_bundle(store, mine)["unchanged"] == 2
    before = stored(store)

    other = open_store(f"{store_url}_other" if store_url.startswith("sqlite") else "sqlite://")
    seed(other, H100, p, [
        row("direct", 9.0, at=later(5)),  # older than ours: ignored
        row("fft", 0.5, at=later(20)),  # newer: replaces ours
        row("im2col_gemm", 4.0, at=later(1)),  # new: added
        row("fft", 7.0, impl_hash="fake-v2", at=later(1)),  # other code: its own row
    ])
    counts = import_bundle(store, export_bundle(other))
    assert (counts["added"], counts["replaced"], counts["older_ignored"]) == (2, 1, 1)
    after = {(r["algorithm"], r["impl_hash"]): r["time_ms"] for r in stored(store)}
    assert after == {
        ("direct", "fake-v1"): 1.0, ("fft", "fake-v1"): 0.5,
        ("im2col_gemm", "fake-v1"): 4.0, ("fft", "fake-v2"): 7.0,
    }
    assert len(before) == 2
    # Importing the old bundle again does not bring the replaced row back.
    assert import_bundle(store, mine)["older_ignored"] == 1
    assert {(r["algorithm"], r["impl_hash"]): r["time_ms"] for r in stored(store)} == after


def _rehash(lines: list[str]) -> list[str]:
    """Recompute the trailer so that only the record edits are wrong."""
    trailer = json.loads(lines[-1])
    trailer["sha256"] = hashlib.sha256("".join(x + "\n" for x in lines[:-1]).encode()).hexdigest()
    return [*lines[:-1], json.dumps(trailer)]


def _edit(kind: str, field: str, value: object) -> Callable[[list[str]], list[str]]:
    def edit(lines: list[str]) -> list[str]:
        for i, line in enumerate(lines):
            record = json.loads(line)
            if record.get("type") == kind:
                if isinstance(record.get(field), dict) and isinstance(value, dict):
                    record[field] = {**record[field], **value}
                else:
                    record[field] = value
                lines[i] = json.dumps(record)
                break
        return _rehash(lines)
    return edit


CORRUPTIONS: dict[str, tuple[Callable[[list[str]], list[str]], str]] = {
    "empty": (lambda lines: [], "empty"),
    "foreign": (lambda lines: ['{"hello": "world"}', *lines[1:]], "not a convtune bundle"),
    "not json": (lambda lines: ["PK\x03\x04 zip", *lines[1:]], "not a convtune bundle"),
    "future": (lambda lines: [lines[0].replace('"version":1', '"version":9'), *lines[1:]],
               "newer than this convtune"),
    "truncated": (lambda lines: lines[:-3], "truncated"),
    "edited": (lambda lines: [lines[0], *(x.replace("1.5", "0.1") for x in lines[1:])],
               "checksum mismatch"),
    "bad json line": (lambda lines: _rehash([lines[0], "{nope", *lines[1:]]), "line 2"),
    "unknown status": (_edit("measurement", "status", "great"), "unknown status"),
    "unknown algorithm": (_edit("measurement", "algorithm", "winograd9000"), "unknown algorithm"),
    "invalid problem": (_edit("problem", "key", {"groups": 3}), "invalid problem"),
    "bad fingerprint": (_edit("device", "info", {"name": "forged"}), "does not match"),
    "bad time": (_edit("measurement", "measured_at", "yesterday"), "measured_at"),
    "miscounted": (_edit("trailer", "measurements", 99), "counts"),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_corrupt_bundles_are_refused_and_the_store_untouched(db_url: str, name: str) -> None:
    populate(db_url)
    text = export_bundle(open_store(db_url))
    target = open_store("sqlite://")
    seed(target, A100, small_problem(), [row("fft", 1.25)])
    before = stored(target)
    corrupt, message = CORRUPTIONS[name]
    bad = "\n".join(corrupt(text.splitlines())) + "\n"
    with pytest.raises(BundleError, match=message) as info:
        import_bundle(target, bad)
    assert "\n" not in str(info.value)
    assert stored(target) == before


def test_problem_keys_survive(db_url: str, other_url: str) -> None:
    p = ConvProblem(n=3, c=6, h=11, w=5, k=9, r=3, s=1, pad=(1, 0), stride=(2, 1),
                    dilation=(1, 2), groups=3, dtype="float64")
    seed(open_store(db_url), H100, p, [row("direct", 1.0)])
    bundle = read_bundle(export_bundle(open_store(db_url)))
    assert [ConvProblem.from_key(k) for k in bundle.problems.values()] == [p]


# A bundle holding one measurement twice (two exports joined by hand, say) merges the newer
# of its two records, in whichever order they come.
def test_the_newer_of_two_records_of_one_measurement_is_merged(store_url: str) -> None:
    from db.bundles import merge_records

    older, newer = row("fft", 2.0, at=later(1)), row("fft", 1.0, at=later(2))
    store = open_store(store_url)
    for n, records in ((1, [older, newer]), (2, [newer, older])):
        with store.session() as session:
            counts = merge_records(
                session=session, devices={H100.fingerprint: H100.info},
                problems={0: small_problem(n=n).key()},
                measurements=[(H100.fingerprint, 0, r) for r in records],
            )
        assert counts["added"] == 1
    assert [r["time_ms"] for r in stored(store)] == [1.0, 1.0]


# Problems are numbered by their key, not by the ids a store happened to give them: two
# stores holding the same measurements export the same records.
def test_stores_with_the_same_data_export_the_same_records(db_url: str, other_url: str) -> None:
    problems = [small_problem(n=3), small_problem(n=1), small_problem(n=2)]
    for url, order in ((db_url, problems), (other_url, problems[::-1])):
        for p in order:
            seed(open_store(url), H100, p, [row("direct", float(p.n))])
    assert body(export_bundle(open_store(db_url))) == body(export_bundle(open_store(other_url)))
