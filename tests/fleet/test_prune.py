"""`convtune prune` and Service.prune: which measurements go, which stay, and what is said."""

from __future__ import annotations

import json
from typing import Any

import pytest

from algorithms.problem import ConvProblem
from db import find as store_find
from db.engine import open_store
from tests.fleet.helpers import gpu, row, seed, stored
from tuner.cli import main
from tuner.devices import identify
from tuner.errors import NotInDatabase
from tuner.pruning import current_hashes
from tuner.service import service

PROBLEM = ConvProblem(n=1, c=2, h=6, w=5, k=3, r=3, s=3, pad=1)
FIND = ["find", "--n", "1", "--c", "2", "--h", "6", "--w", "5", "--k", "3", "--r", "3",
        "--s", "3", "--pad", "1", "--device", "cpu"]


def _filled(url: str) -> dict[str, Any]:
    """A store with this code's CPU measurements (tuned for real), the same device's rows of
    older code, and a fabricated GPU's rows; how many of each."""
    assert main([*FIND, "--db", url]) == 0
    store = open_store(url)
    current = len(stored(store))
    here = identify("cpu")
    seed(store, here, PROBLEM, [row("direct", 2.0, impl_hash="older-code"),
                                row("im2col_gemm", 1.0, impl_hash="older-code")])
    other = gpu()
    seed(store, other, PROBLEM, [row("direct", 0.5), row("fft", 0.7, config="fused")])
    # The GPU's rows are of older code too, where this machine can judge the CUDA backend.
    gpu_stale = 2 if "cuda" in current_hashes()[0] else 0
    return {"store": store, "current": current, "gpu": other, "gpu_stale": gpu_stale}


def test_stale_rows_are_counted_then_deleted_and_this_codes_stay(
        store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    filled = _filled(store_url)
    store, current = filled["store"], filled["current"]
    before = stored(store)
    stale = 2 + filled["gpu_stale"]
    capsys.readouterr()
    assert main(["prune", "--stale", "--db", store_url]) == 0
    assert capsys.readouterr().out.strip() == (
        f"would delete {stale} of {current + 4} measurements; run again with --yes to delete "
        "them")
    assert stored(store) == before, "a prune without --yes deletes nothing"
    assert main(["prune", "--stale", "--yes", "--db", store_url]) == 0
    assert capsys.readouterr().out.strip() == f"deleted {stale} of {current + 4} measurements"
    left = stored(store)
    assert len(left) == current + 4 - stale
    assert not [r for r in left if r["impl_hash"] == "older-code"]
    # This code's measurements answer as before, nothing measured again.
    assert main([*FIND, "--mode", "cached", "--db", store_url]) == 0


def test_rows_of_a_device_older_than_some_days(
        store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    filled = _filled(store_url)
    store, prefix = filled["store"], filled["gpu"].fingerprint[:10]
    # The fabricated rows were measured on 2025-01-01; the tuned ones now.
    assert main(["prune", "--older-than", "36500", "--device", prefix, "--db", store_url]) == 0
    assert "would delete 0 of" in capsys.readouterr().out
    capsys.readouterr()
    assert main(["prune", "--older-than", "30", "--device", prefix, "--yes", "--json",
                 "--db", store_url]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {"matched": 2, "total": filled["current"] + 4, "deleted": True}
    left = stored(store)
    assert not [r for r in left if r["device"] == filled["gpu"].fingerprint]
    assert len(left) == filled["current"] + 2  # the older CPU rows: another device's prefix


def test_a_pruned_answer_is_not_served_from_memory(db_url: str) -> None:
    # The answer cache must not outlive the rows it came from, in this process or another.
    facade = service(db_url)
    facade.find(PROBLEM, "cpu")
    store = open_store(db_url)
    with store.session() as session:
        generation = store_find.generation(session=session)
    pruned, _ = facade.prune(device=identify("cpu").fingerprint, delete=True)
    assert pruned.deleted and pruned.matched == pruned.total > 0
    with store.session() as session:
        assert store_find.generation(session=session) > generation
    with pytest.raises(NotInDatabase):
        facade.find(PROBLEM, "cpu", mode="cached")


@pytest.mark.parametrize("args, code, message", [
    ([], 1, "give the measurements to prune: stale, older than some days, or a device's"),
    (["--older-than", "nan"], 2, "--older-than"),
    (["--older-than", "-1"], 2, "--older-than"),
    (["--device", ""], 1, "device must be a fingerprint or a prefix of one"),
])
def test_prune_usage_errors_are_one_line_and_delete_nothing(
        db_url: str, capsys: pytest.CaptureFixture[str], args: list[str], code: int,
        message: str) -> None:
    filled = _filled(db_url)
    before = stored(filled["store"])
    capsys.readouterr()
    assert main(["prune", *args, "--yes", "--db", db_url]) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert stored(filled["store"]) == before


@pytest.mark.parametrize("kwargs, message", [
    ({"older_than_days": float("nan")}, "older_than_days must be a non-negative number"),
    ({"older_than_days": -1}, "older_than_days must be a non-negative number"),
    ({"older_than_days": True}, "older_than_days must be a non-negative number"),
    ({"device": 3}, "device must be a fingerprint or a prefix of one"),
    ({}, "give the measurements to prune"),
])
def test_prune_refuses_bad_criteria(db_url: str, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        service(db_url).prune(delete=True, **kwargs)


# Mutation gap: at the store's interface every criterion narrows (a fingerprint prefix taken
# literally, measured strictly before the date, stale only on the kinds named, each kind by
# its own hashes); counting writes nothing, deleting moves the generation.
def test_prune_measurements_matches_exactly_what_every_criterion_says(store_url: str) -> None:
    from db.prune import prune_measurements
    from tests.fleet.helpers import T0, later

    store = open_store(store_url)
    cuda, cpu = gpu(), gpu(kind="cpu", driver="0")
    seed(store, cuda, PROBLEM, [row("direct", 1.0, impl_hash="new", at=T0),
                                row("fft", 2.0, impl_hash="old", at=T0),
                                row("fft", 3.0, config="x", impl_hash="old", at=later(1))])
    seed(store, cpu, PROBLEM, [row("direct", 4.0, impl_hash="cpu-old", at=T0),
                               row("fft", 5.0, impl_hash="cpu-new", at=T0)])

    def matched(**kw: Any) -> int:
        with store.session() as s:
            return prune_measurements(session=s, **kw).matched

    with store.session() as s:
        start = store_find.generation(session=s)
    assert matched(current={"cuda": {"direct": "new"}}) == 2
    assert matched(current={"cuda": {"direct": "new", "fft": "old"},
                            "cpu": {"fft": "cpu-new"}}) == 1
    assert matched(before=later(1)) == 4
    assert matched(device="%") == 0 and matched(device=cuda.fingerprint[:5]) == 3
    assert matched(device=cuda.fingerprint[:5], before=later(1),
                   current={"cuda": {"direct": "new"}}) == 1
    with store.session() as s:
        assert store_find.generation(session=s) == start
    with store.session() as s:
        pruned = prune_measurements(session=s, current={"cpu": {"fft": "cpu-new"}},
                                    delete_rows=True)
    assert (pruned.matched, pruned.total, pruned.deleted) == (1, 5, True)
    with store.session() as s:
        assert store_find.generation(session=s) == start + 1
    assert len(stored(store)) == 4
