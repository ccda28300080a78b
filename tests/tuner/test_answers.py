"""The in-process answer cache: answers from memory, dropped by this or another process's writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from db import find as store_find
from db.engine import open_store
from tests.tuner.fakes import small_problem
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
