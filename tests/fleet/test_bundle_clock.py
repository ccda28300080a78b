"""Merge precedence by the receiving store's clock, and impossible values refused (issue 12,
item 2: a bundle dated in the future won every later merge, for good)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from db.engine import open_store
from db.migrations import SCHEMA_VERSION
from db.rows import utcnow
from tests.fleet.helpers import QUICK, algos, gpu, row, seed, stored
from tests.fleet.test_bundle_validation import edited, set_field
from tests.tuner.fakes import Fake, small_problem
from tuner import results as R
from tuner.bundles import BundleError, export_bundle, import_bundle
from tuner.tuning import Tuner

HERE = gpu()
FAR_FUTURE = datetime(9999, 1, 1, tzinfo=timezone.utc)


def bundle_of(url: str, *rows: Any) -> str:
    """A bundle of `rows` measured on HERE, exported from a scratch store at `url`."""
    store = open_store(url)
    seed(store, HERE, small_problem(), list(rows))
    return export_bundle(store)


def ranking(url: str) -> list[tuple[str, float | None, str]]:
    tuner = Tuner(open_store(url), policy=QUICK, algorithms=algos(Fake("direct"), Fake("fft")),
                  identify=lambda device: HERE)
    results = tuner.find(small_problem(), "cpu", mode="cached")
    return [(r.algorithm, r.time_ms, r.source) for r in results]


def test_a_record_dated_9999_no_longer_ranks_first_as_measured_here(
    store_url: str, other_url: str
) -> None:
    # Bug (issue 12 item 2): measured_at 9999 with time_ms 1e-4 imported and then ranked
    # first as "measured here", winning every later merge.
    now = utcnow()
    seed(open_store(store_url), HERE, small_problem(),
         [row("direct", 1.0, at=now), row("fft", 2.0, at=now)])
    forged = edited(bundle_of(other_url, row("fft", 1.0, at=now)),
                    set_field("measurement", measured_at=FAR_FUTURE.isoformat(), time_ms=1e-4))
    with pytest.raises(BundleError, match=r"line \d+ \(fft on device .*in the future"):
        import_bundle(open_store(store_url), forged)
    assert ranking(store_url)[0] == ("direct", 1.0, R.MEASURED_HERE)


def test_a_future_row_already_stored_yields_to_a_later_measurement(
    store_url: str, other_url: str
) -> None:
    # Bug (issue 12 item 2): a stored row dated 9999 (imported by an older convtune) beat
    # every later measurement; it now ranks no later than when this store recorded it.
    store = open_store(store_url)
    seed(store, HERE, small_problem(), [row("fft", 1e-4, at=FAR_FUTURE)])
    fresh = bundle_of(other_url, row("fft", 2.0, at=utcnow() + timedelta(seconds=1)))
    assert import_bundle(store, fresh)["replaced"] == 1
    assert [r["time_ms"] for r in stored(store)] == [2.0]


def test_measured_at_is_kept_as_data(store_url: str, other_url: str) -> None:
    # The original measured_at (within the allowed skew) is stored as given.
    at = utcnow() + timedelta(minutes=2)
    import_bundle(open_store(store_url), bundle_of(other_url, row("fft", 2.0, at=at)))
    assert [r["measured_at"] for r in stored(open_store(store_url))] == [at.isoformat()]


def set_header(**values: Any) -> Callable[[list[dict[str, Any]]], None]:
    def change(records: list[dict[str, Any]]) -> None:
        records[0].update(values)
    return change


IMPOSSIBLE = {
    "zero time on an ok row": (set_field("measurement", time_ms=0.0), "positive time"),
    "negative time on an ok row": (set_field("measurement", time_ms=-1.0), "positive time"),
    "infinite time": (set_field("measurement", time_ms=float("inf")), "time_ms inf"),
    "NaN spread": (set_field("measurement", spread_ms=float("nan")), "spread_ms nan"),
    "NaN error on an ok row": (set_field("measurement", rel_error=float("nan")), "rel_error"),
    "infinite time on a failed row": (
        set_field("measurement", status="failed", time_ms=float("inf")), "time_ms inf"
    ),
    "a day in the future": (
        set_field("measurement", measured_at=(utcnow() + timedelta(days=1)).isoformat()),
        "in the future",
    ),
    # Counts are never negative (a forged -1 was stored as it came).
    "negative reps": (set_field("measurement", reps=-1), "reps must be a non-negative"),
    "negative workspace": (
        set_field("measurement", workspace_bytes=-1), "workspace_bytes must be a non-negative"
    ),
    "newer schema_version": (set_header(schema_version=SCHEMA_VERSION + 1), "newer"),
    "schema_version not an integer": (set_header(schema_version="5"), "schema_version"),
    "schema_version missing": (set_header(schema_version=None), "schema_version"),
}


@pytest.mark.parametrize("case", list(IMPOSSIBLE))
def test_impossible_values_are_refused(case: str, db_url: str, other_url: str) -> None:
    # Bug (issue 12 item 2): these imported and could then rank first.
    change, named = IMPOSSIBLE[case]
    text = edited(bundle_of(other_url, row("fft", 1.0)), change)
    target = open_store(db_url)
    with pytest.raises(BundleError, match=named) as refused:
        import_bundle(target, text)
    assert "\n" not in str(refused.value)
    assert stored(target) == []


def test_wrong_result_rows_keep_their_infinite_error(db_url: str, other_url: str) -> None:
    # An infinite error is what made the row wrong_result: it round-trips.
    text = bundle_of(other_url, row("fft", None, status="wrong_result", rel_error=float("inf")))
    assert import_bundle(open_store(db_url), text)["added"] == 1


def test_a_clock_running_ahead_within_the_skew_wins_only_until_the_next_measurement(
    store_url: str, tmp_path: Path
) -> None:
    # Bug (issue 12 item 2): a host whose clock ran minutes ahead out-ranked measurements
    # made after it by hosts with a right clock. Precedence is the receiving store's
    # clock: the fast row counts as of its import, so a later measurement replaces it.
    store = open_store(store_url)
    ahead = bundle_of(f"sqlite:///{tmp_path / 'ahead.db'}",
                      row("fft", 1.0, at=utcnow() + timedelta(minutes=4)))
    assert import_bundle(store, ahead)["added"] == 1
    later = bundle_of(f"sqlite:///{tmp_path / 'later.db'}",
                      row("fft", 3.0, at=utcnow() + timedelta(seconds=1)))
    assert import_bundle(store, later)["replaced"] == 1
    assert [r["time_ms"] for r in stored(store)] == [3.0]


def test_re_importing_a_row_dated_ahead_changes_nothing(store_url: str, tmp_path: Path) -> None:
    # Bug: a row dated ahead of this store's clock ranked at its import's time, so each
    # re-import of the same bundle ranked later than the last and "replaced" the row with
    # itself, refreshing its precedence over measurements recorded in between.
    store = open_store(store_url)
    ahead = bundle_of(f"sqlite:///{tmp_path / 'ahead.db'}",
                      row("fft", 1.0, at=utcnow() + timedelta(minutes=4)))
    assert import_bundle(store, ahead)["added"] == 1
    recorded = _recorded(store)
    again = import_bundle(store, ahead)
    assert (again["unchanged"], again["replaced"]) == (1, 0)
    assert _recorded(store) == recorded


def _recorded(store: Any) -> list[Any]:
    from sqlalchemy import select

    from db.models import Measurement

    with store.session() as session:
        return list(session.scalars(select(Measurement.recorded_at)))


# A row that ranks exactly as old as the stored one (measured when the store recorded a row
# dated ahead) is "unchanged", not a replacement: only a later rank replaces.
def test_an_equally_ranked_row_does_not_replace(store_url: str, tmp_path: Path) -> None:
    from db.bundles import merge_records
    from db.rows import as_utc

    store = open_store(store_url)
    ahead = bundle_of(f"sqlite:///{tmp_path / 'ahead.db'}",
                      row("fft", 1.0, at=utcnow() + timedelta(minutes=4)))
    assert import_bundle(store, ahead)["added"] == 1
    [recorded] = _recorded(store)
    with store.session() as session:
        counts = merge_records(
            session=session, devices={HERE.fingerprint: HERE.info},
            problems={0: small_problem().key()},
            measurements=[(HERE.fingerprint, 0, row("fft", 5.0, at=as_utc(recorded)))],
        )
    assert (counts["unchanged"], counts["replaced"]) == (1, 0)
    assert [r["time_ms"] for r in stored(store)] == [1.0]
