"""Two requests for the same problem and device never measure it at the same time."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from algorithms.problem import ConvProblem
from db.engine import open_store
from tests.api.conftest import TINY, stored_rows
from tuner.api import problem_for
from tuner.candidates import Candidate
from tuner.measuring import Measured, Measurer
from tuner.tuning import Tuner


class TimerSpy:
    """Counts measured candidates and the most measuring passes that ever ran at once."""

    def __init__(self) -> None:
        self.calls = 0
        self.active = 0
        self.most_active = 0
        self.lock = threading.Lock()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = Measurer.measure

        def measure(measurer: Measurer, problem: ConvProblem,
                    candidates: Sequence[Candidate]) -> Measured:
            with self.lock:
                self.calls += len(candidates)
                self.active += 1
                self.most_active = max(self.most_active, self.active)
            try:
                time.sleep(0.02)  # widen the window in which a second request could overlap
                return real(measurer, problem, candidates)
            finally:
                with self.lock:
                    self.active -= 1

        monkeypatch.setattr(Measurer, "measure", measure)


def _candidates(db_url: str) -> int:
    problem = problem_for((1, 2, 6, 5), (2, 2, 3, 3), padding=1)
    candidates, _ = Tuner(open_store(db_url)).candidates(problem, "cpu")
    return len(candidates)


def _fire(client: TestClient, bodies: list[dict[str, Any]]) -> list[Any]:
    start = threading.Barrier(len(bodies))

    def post(body: dict[str, Any]) -> Any:
        start.wait()
        return client.post("/v1/find", json=body)

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(post, bodies))


def test_concurrent_auto_finds_measure_each_candidate_once(
    client: TestClient, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = TimerSpy()
    spy.install(monkeypatch)
    body = {"problem": TINY, "device": "cpu", "mode": "auto"}
    responses = _fire(client, [body, body, body])
    assert [r.status_code for r in responses] == [200, 200, 200]
    expected = _candidates(db_url)
    assert spy.calls == expected, "each candidate timed exactly once across the requests"
    assert spy.most_active == 1
    assert stored_rows(db_url) == expected
    sources = sorted(r.json()["best"]["source"] for r in responses)
    assert sources == ["fresh", "measured here", "measured here"]
    bests = {(r.json()["best"]["algorithm"], r.json()["best"]["time_ms"]) for r in responses}
    assert len(bests) == 1, "all three answers are the one measurement"


def test_concurrent_tunes_never_overlap(
    client: TestClient, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # mode=tune asks for a fresh measurement each time: both measure, but one after the
    # other, and the store keeps one row per candidate.
    spy = TimerSpy()
    spy.install(monkeypatch)
    body = {"problem": TINY, "device": "cpu", "mode": "tune"}
    responses = _fire(client, [body, body])
    assert [r.status_code for r in responses] == [200, 200]
    expected = _candidates(db_url)
    assert spy.most_active == 1, "two tunings of one problem ran at the same time"
    assert spy.calls == 2 * expected
    assert stored_rows(db_url) == expected


def test_different_problems_may_run_together(
    client: TestClient, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = TimerSpy()
    spy.install(monkeypatch)
    bodies = [{"problem": {**TINY, "n": n}, "device": "cpu", "mode": "tune"} for n in (1, 2)]
    responses = _fire(client, bodies)
    assert [r.status_code for r in responses] == [200, 200]
    assert spy.calls == 2 * _candidates(db_url)
