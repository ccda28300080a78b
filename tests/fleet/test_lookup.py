"""Lookups that fall back across hardware, with fabricated fingerprints of other GPUs."""

from __future__ import annotations

import pytest

from db.engine import open_store
from tests.fleet.helpers import QUICK, algos, gpu, later, row, seed
from tests.tuner.fakes import Fake, small_problem
from tuner import results as R
from tuner.devices import DeviceIdentity
from tuner.errors import NotInDatabase
from tuner.lookup import fallback_order
from tuner.results import SAME_ARCHITECTURE, SAME_MODEL
from tuner.tuning import Tuner

# "This" device: an H100 with a driver nothing in the store was measured with.
HERE = gpu(driver="570.86.10")
H100_OLD_DRIVER = gpu(driver="550.54.15")
H100_OTHER_RUNTIME = gpu(driver="550.54.15", runtime="12020")
H100_PCIE = gpu("NVIDIA H100 PCIe", units=114)
H200 = gpu("NVIDIA H200", units=132, memory_bytes=141 * 2**30)
A100 = gpu("NVIDIA A100-SXM4-80GB", "8.0", 108)


def tuner(url: str, identity: DeviceIdentity = HERE) -> Tuner:
    return Tuner(open_store(url), policy=QUICK, algorithms=algos(Fake("direct"), Fake("fft")),
                 identify=lambda device: identity)


def answer(url: str) -> dict[str, tuple[float | None, str, str]]:
    results = tuner(url).find(small_problem(), "cpu", mode="cached")
    return {r.algorithm: (r.time_ms, r.source, r.device) for r in results}


def test_exact_device_first(store_url: str) -> None:
    store = open_store(store_url)
    seed(store, HERE, small_problem(), [row("direct", 1.0), row("fft", 2.0)])
    seed(store, H100_OLD_DRIVER, small_problem(), [row("direct", 5.0), row("fft", 0.5)])
    got = answer(store_url)
    assert got["direct"] == (1.0, R.MEASURED_HERE, HERE.fingerprint)


def test_same_model_with_other_software_then_nearest_units(db_url: str) -> None:
    store = open_store(db_url)
    p = small_problem()
    seed(store, A100, p, [row("direct", 9.0), row("fft", 9.5)])  # other arch: never used
    with pytest.raises(NotInDatabase, match="same model or architecture"):
        answer(db_url)
    seed(store, H100_PCIE, p, [row("direct", 3.0), row("fft", 4.0)])  # 114 SMs
    seed(store, H200, p, [row("direct", 2.0), row("fft", 1.0)])  # 132 SMs: nearer
    got = answer(db_url)
    assert {v[1] for v in got.values()} == {SAME_ARCHITECTURE}
    assert got["fft"] == (1.0, SAME_ARCHITECTURE, H200.fingerprint)
    # The same model with another driver beats any other model of the architecture; of
    # two such H100s the one whose software agrees more with ours wins.
    seed(store, H100_OTHER_RUNTIME, p, [row("direct", 7.0), row("fft", 8.0, at=later(9))])
    seed(store, H100_OLD_DRIVER, p, [row("direct", 1.5), row("fft", 2.5)])
    got = answer(db_url)
    assert got == {"direct": (1.5, SAME_MODEL, H100_OLD_DRIVER.fingerprint),
                   "fft": (2.5, SAME_MODEL, H100_OLD_DRIVER.fingerprint)}
    best = tuner(db_url).best(p, "cpu", mode="cached")
    assert (best.algorithm, best.source) == ("direct", SAME_MODEL)


def test_one_answer_comes_from_one_device_that_measured_everything(db_url: str) -> None:
    store = open_store(db_url)
    seed(store, H100_OLD_DRIVER, small_problem(), [row("direct", 1.0)])  # fft missing
    seed(store, H100_PCIE, small_problem(), [row("direct", 3.0), row("fft", 4.0)])
    got = answer(db_url)
    assert got["direct"] == (3.0, SAME_ARCHITECTURE, H100_PCIE.fingerprint)


def test_results_of_older_code_are_never_served(db_url: str) -> None:
    seed(open_store(db_url), H100_OLD_DRIVER, small_problem(),
         [row("direct", 1.0, impl_hash="fake-v0"), row("fft", 1.0, impl_hash="fake-v0")])
    with pytest.raises(NotInDatabase):
        answer(db_url)


def test_auto_mode_measures_here_instead_of_borrowing(db_url: str) -> None:
    seed(open_store(db_url), H100_OLD_DRIVER, small_problem(),
         [row("direct", 1.0), row("fft", 2.0)])
    results = tuner(db_url).find(small_problem(), "cpu")  # "measures" as HERE on the CPU
    assert {r.source for r in results} == {R.FRESH}
    assert {r.device for r in results} == {HERE.fingerprint}
    assert {v[1] for v in answer(db_url).values()} == {R.MEASURED_HERE}


def test_fallback_order_is_pure() -> None:
    dev = {"kind": "cuda", "name": "X", "arch": "9.0", "units": 100, "info": {}}
    cpu = {**dev, "kind": "cpu"}
    r = [row("direct", 1.0)]
    assert fallback_order({"kind": "cuda", "name": "Y", "arch": "9.0", "units": 90},
                          [(cpu, r), (dev, r), (dev, [])]) == [(SAME_ARCHITECTURE, dev, r)]


def test_ties_go_to_the_most_recently_measured_device() -> None:
    # Pins fallback_order's tie-breaks: of same-model devices agreeing on as many fields, and
    # of same-architecture ones as near in units (above or below), the one whose newest
    # measurement is the most recent comes first.
    here = {"kind": "cuda", "name": "X", "arch": "9.0", "units": 100, "driver": "1"}

    def device(name: str, units: int, fingerprint: str) -> dict[str, object]:
        return {"kind": "cuda", "name": name, "arch": "9.0", "units": units,
                "fingerprint": fingerprint, "info": {"driver": "2"}}

    old_model, new_model = device("X", 100, "old"), device("X", 100, "new")
    below, above = device("Y", 90, "below"), device("Y", 110, "above")
    others = [
        (old_model, [row("direct", 1.0, at=later(5)), row("fft", 1.0, at=later(6))]),
        (new_model, [row("direct", 1.0), row("fft", 1.0, at=later(10))]),  # oldest, newest
        (below, [row("direct", 1.0, at=later(1))]),
        (above, [row("direct", 1.0, at=later(2))]),
    ]
    assert [(source, d) for source, d, _ in fallback_order(here, others)] == [
        (SAME_MODEL, new_model), (SAME_MODEL, old_model),
        (SAME_ARCHITECTURE, above), (SAME_ARCHITECTURE, below)]


# Of two stand-ins alike in all else, the one whose current-code rows are newest answers:
# rows of older code (another impl_hash) neither answer nor count towards being recent.
def test_rows_of_older_code_do_not_make_a_stand_in_recent(db_url: str) -> None:
    store = open_store(db_url)
    recent = gpu(driver="550.54.15")
    stale = gpu(driver="560.35.03")
    seed(store, recent, small_problem(), [row("direct", 1.0, at=later(5)),
                                          row("fft", 2.0, at=later(5))])
    seed(store, stale, small_problem(), [
        row("direct", 3.0, at=later(1)), row("fft", 4.0, at=later(1)),
        row("direct", 0.5, impl_hash="fake-v0", at=later(60)),
        row("fft", 0.5, impl_hash="fake-v0", at=later(60)),
    ])
    got = answer(db_url)
    assert got == {"direct": (1.0, SAME_MODEL, recent.fingerprint),
                   "fft": (2.0, SAME_MODEL, recent.fingerprint)}
