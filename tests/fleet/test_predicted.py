"""mode="cached" predicts from this device's nearest measured problem of the same kind."""

from __future__ import annotations

import pytest

from algorithms.runtime import TimingPolicy
from db.engine import open_store
from tests.tuner.fakes import Fake, Raises, small_problem
from tuner import results as R
from tuner.errors import NotInDatabase
from tuner.tuning import Tuner

QUICK = TimingPolicy(warmup=0, budget_s=0.0, min_reps=2, max_reps=2)


def tuner(db_url: str, *algos: Fake) -> Tuner:
    return Tuner(open_store(db_url), policy=QUICK, algorithms=algos)  # type: ignore[arg-type]


def test_prediction_scales_the_nearest_problem_by_flops(db_url: str) -> None:
    algos = (Fake("a"), Fake("b", ws=64), Raises("c"))
    near = {r.algorithm: r for r in tuner(db_url, *algos).find(small_problem(n=2), "cpu")}
    tuner(db_url, *algos).find(small_problem(n=1, c=2, k=2), "cpu")  # farther away
    wanted = small_problem(n=4)  # twice the work of n=2, never measured
    got = {r.algorithm: r for r in tuner(db_url, *algos).find(wanted, "cpu", mode="cached")}
    assert {r.source for r in got.values()} == {R.PREDICTED}
    for name in ("a", "b"):
        assert got[name].status == R.OK
        assert got[name].time_ms == pytest.approx(2 * near[name].time_ms)  # type: ignore[operator]
        assert "n2 c4 9x7" in (got[name].note or "")
    assert got["c"].status == R.FAILED and got["c"].time_ms is None
    assert got["b"].workspace_bytes == 64


def test_no_prediction_across_kinds_or_groupings(db_url: str) -> None:
    algos = (Fake("a"),)
    tuner(db_url, *algos).find(small_problem(n=2), "cpu")
    for other in (small_problem(r=1, s=1, pad=0), small_problem(stride=2),
                  small_problem(dtype="float64"), small_problem(c=6, k=6, groups=6)):
        with pytest.raises(NotInDatabase):
            tuner(db_url, *algos).find(other, "cpu", mode="cached")


def test_prediction_needs_every_candidate_measured(db_url: str) -> None:
    tuner(db_url, Fake("a")).find(small_problem(n=2), "cpu")
    with pytest.raises(NotInDatabase):
        tuner(db_url, Fake("a"), Fake("b")).find(small_problem(n=4), "cpu", mode="cached")


# Only rows of the current implementations predict: a neighbour measured by older code (another
# impl_hash) stands in for nothing, as it would not answer for its own problem either.
def test_no_prediction_from_rows_of_older_code(db_url: str) -> None:
    tuner(db_url, Fake("a")).find(small_problem(n=2), "cpu")
    new = Fake("a")
    new.impl_hash = "fake-v2"
    with pytest.raises(NotInDatabase):
        tuner(db_url, new).find(small_problem(n=4), "cpu", mode="cached")


def test_auto_mode_measures_instead_of_predicting(db_url: str) -> None:
    a = Fake("a")
    tuner(db_url, a).find(small_problem(n=2), "cpu")
    assert tuner(db_url, a).find(small_problem(n=4), "cpu")[0].source == R.FRESH


class RaisesWithNul(Fake):
    """A candidate whose failure message holds a NUL (a driver's C string, say)."""

    def run(self, *args: object) -> None:
        raise RuntimeError("bad\x00launch")


# Bug (a review of 2026-11-30): PostgreSQL refuses NUL in text, so one candidate failing
# with a NUL in its message lost the whole tuning (the good candidates' rows too) and the
# find raised psycopg's DataError; SQLite stored the failure as data.
def test_a_failure_message_with_a_nul_is_stored_as_data(store_url: str) -> None:
    found = {r.algorithm: r for r in tuner(store_url, Fake("good"), RaisesWithNul("nul"))
             .find(small_problem(), "cpu")}
    assert found["good"].status == R.OK and found["nul"].status == R.FAILED
    assert "bad\\x00launch" in (found["nul"].error or "")
    stored = {r.algorithm: r for r in tuner(store_url, Fake("good"), RaisesWithNul("nul"))
              .find(small_problem(), "cpu", mode="cached")}
    assert stored["nul"].error == found["nul"].error and stored["good"].status == R.OK


def test_no_prediction_across_directions_maths_or_channel_multipliers(db_url: str) -> None:
    # Pins that a prediction's neighbour has the problem's direction, math and grouping: a
    # backward pass, TF32 arithmetic, or a grouped convolution with a channel multiplier
    # (k = 2c) is another kind of work than the forward FP32 dense or depthwise one measured.
    algos = (Fake("a"),)
    tuner(db_url, *algos).find(small_problem(n=2), "cpu")
    tuner(db_url, *algos).find(small_problem(n=2, c=6, k=6, groups=6), "cpu")  # depthwise
    assert tuner(db_url, *algos).find(small_problem(n=4), "cpu", mode="cached")
    for other in (small_problem(n=4, direction="backward_data"),
                  small_problem(n=4, direction="backward_filter"), small_problem(n=4, math="tf32"),
                  small_problem(n=4, c=6, k=12, groups=6)):
        with pytest.raises(NotInDatabase):
            tuner(db_url, *algos).find(other, "cpu", mode="cached")


def test_the_nearest_problem_is_nearest_in_every_size(db_url: str) -> None:
    # Pins the distance over n, c, h, w and k alike: of two neighbours, one twice the batch
    # away and one with four times the filters (k), the first is nearer.
    algos = (Fake("a"),)
    near = tuner(db_url, *algos).find(small_problem(n=2), "cpu")[0]
    tuner(db_url, *algos).find(small_problem(n=4, k=24), "cpu")
    got = tuner(db_url, *algos).find(small_problem(n=4), "cpu", mode="cached")[0]
    assert got.source == R.PREDICTED and "n2 c4 9x7" in (got.note or "")
    assert got.time_ms == pytest.approx(2 * near.time_ms)  # type: ignore[operator]
