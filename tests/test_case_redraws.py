"""benchmarks/case_redraws.py: the summary of errors over draws, and a miss's message read."""

from __future__ import annotations

from benchmarks.case_redraws import OVER, summarize


def test_summary_counts_the_draws_over_the_limit() -> None:
    rows = summarize({"b cfg": [3e-5, 1e-6, 2e-6, 4e-6], "a cfg": [1e-7]}, 1e-5)
    assert [r["configuration"] for r in rows] == ["a cfg", "b cfg"]
    assert rows[1]["draws"] == 4 and rows[1]["over"] == 1 and rows[1]["max"] == 3e-5
    assert rows[1]["median"] == 3e-6


def test_a_miss_message_gives_its_configuration_and_error() -> None:
    # cases.py's message for a configuration over the tolerance.
    found = OVER.match("64x128x32-s4-f1: relative error 1.2381372280703468e-05")
    assert found is not None and found[1] == "64x128x32-s4-f1"
    assert float(found[2]) == 1.2381372280703468e-05
    assert OVER.match("64x64: results differ between thread schedules (a race)") is None
