"""CONVTUNE_MAX_RUNNING: finds that may measure, and convolutions, at most so many at once."""

# Bug (a review of security, 2026-11-30, left open then): any number of finds that measure
# and of convolutions ran at once, each on one of the server's worker threads with its
# problem's tensors, so forty of them held forty problems' memory and starved every
# request that needed a thread.

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from algorithms.reference import reference_conv
from api.settings import Settings
from tests.api.conftest import TINY, from_npy, stored_rows
from tests.api.test_convolve import convolve
from tuner.api import problem_for
from tuner.service import Service


def _busy(response: Any) -> None:
    """`response` is the one-line 429 of a server with no free slot."""
    assert response.status_code == 429, response.text
    detail = response.json()["detail"]
    assert "CONVTUNE_MAX_RUNNING" in detail and "\n" not in detail
    assert int(response.headers["Retry-After"]) > 0


def test_work_beyond_the_slots_is_refused_and_reads_are_not(
    make_client: Callable[..., TestClient], db_url: str, rng: np.random.Generator
) -> None:
    client = make_client(max_running=1)
    slots = client.app.state.slots  # type: ignore[attr-defined]
    tune = {"problem": TINY, "device": "cpu", "mode": "tune"}
    x = rng.standard_normal((1, 2, 6, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    with slots.taken():  # another request is measuring
        _busy(client.post("/v1/find", json=tune))
        _busy(convolve(client, x, w))
        assert stored_rows(db_url) == 0, "a refused find measured nothing"
        # A read holds no slot: it measures nothing.
        assert client.post("/v1/find", json={**tune, "mode": "heuristic"}).status_code == 404
    assert client.post("/v1/find", json=tune).status_code == 200
    assert stored_rows(db_url) > 0
    done = convolve(client, x, w)
    assert done.status_code == 200
    np.testing.assert_allclose(from_npy(done.content), reference_conv(
        x, w, problem_for(x.shape, w.shape)), rtol=1e-5, atol=1e-5)
    # An answer already in memory needs no slot either, even in a measuring mode.
    assert client.post("/v1/find", json={**tune, "mode": "auto"}).status_code == 200
    with slots.taken():
        assert client.post("/v1/find", json={**tune, "mode": "auto"}).status_code == 200
    assert slots.used == 0


def test_a_slot_is_given_back_when_the_work_fails(
    make_client: Callable[..., TestClient], rng: np.random.Generator
) -> None:
    client = make_client(max_running=1)
    x = rng.standard_normal((1, 2, 6, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    assert convolve(client, x, w, algorithm="no_such_algorithm").status_code == 422
    assert client.app.state.slots.used == 0  # type: ignore[attr-defined]
    assert convolve(client, x, w).status_code == 200


def test_finds_measuring_at_once_beyond_the_slots_get_429(
    make_client: Callable[..., TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Real requests on the server's threads: two finds hold both slots inside the tuner,
    # the third is refused at once, and a fourth gets in once they are done.
    client = make_client(max_running=2)
    inside, release = threading.Barrier(3), threading.Event()
    real = Service.find

    def held(self: Service, *args: Any, **kwargs: Any) -> Any:
        inside.wait(timeout=30)
        release.wait(timeout=30)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Service, "find", held)
    bodies = [{"problem": {**TINY, "n": n}, "device": "cpu", "mode": "tune"} for n in (1, 2)]
    with ThreadPoolExecutor(2) as pool:
        running = [pool.submit(client.post, "/v1/find", json=body) for body in bodies]
        inside.wait(timeout=30)  # both are in the tuner, each holding a slot
        _busy(client.post("/v1/find", json={**bodies[0], "problem": {**TINY, "n": 3}}))
        release.set()
        assert [r.result().status_code for r in running] == [200, 200]
    monkeypatch.setattr(Service, "find", real)
    assert client.post("/v1/find", json={**bodies[0], "problem": {**TINY, "n": 3}}
                       ).status_code == 200


def test_no_slot_at_all_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVTUNE_MAX_RUNNING", "0")
    with pytest.raises(ValueError, match=r"\$CONVTUNE_MAX_RUNNING must be positive"):
        Settings.from_env()


# Mutation gap: `Slots.used` said 0 whatever was held (every test read it only once all
# slots were back), so a leak or a count that never went down went unseen.
def test_used_counts_the_slots_held_now() -> None:
    from fastapi import HTTPException

    from api.admission import Slots

    slots = Slots(2)
    with slots.taken():
        assert slots.used == 1
        with slots.taken():
            assert slots.used == 2
            with pytest.raises(HTTPException), slots.taken():
                pass
            assert slots.used == 2
        assert slots.used == 1
    assert slots.used == 0
