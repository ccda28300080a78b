"""Fallback lookups for devices whose model or architecture is unknown (empty or missing):
an unknown value is no evidence of sameness, so nothing is borrowed on its strength."""

from __future__ import annotations

import pytest

from db.engine import open_store
from tests.fleet.helpers import row, seed
from tests.fleet.test_lookup import tuner
from tests.tuner.fakes import small_problem
from tuner.devices import DeviceIdentity, fingerprint_of
from tuner.errors import NotInDatabase
from tuner.lookup import fallback_order
from tuner.results import SAME_ARCHITECTURE, SAME_MODEL


def cpu(name: str, arch: str, units: int | None = 8, driver: str = "a") -> DeviceIdentity:
    info: dict[str, object] = {"kind": "cpu", "name": name, "arch": arch, "driver": driver}
    if units is not None:
        info["units"] = units
    return DeviceIdentity(device="cpu", fingerprint=fingerprint_of(info), info=info)


@pytest.mark.parametrize("missing", ["empty", "absent"])
def test_unknown_name_and_arch_match_nothing(missing: str) -> None:
    here = cpu("", "", units=None, driver="mine")
    if missing == "absent":
        here = DeviceIdentity("cpu", here.fingerprint, {"kind": "cpu"})
    other = cpu("", "", units=4, driver="theirs")
    found = fallback_order(here.info, [(dict(other.info, fingerprint=other.fingerprint),
                                        [row("direct", 1.0)])])
    assert found == []


def test_known_values_still_match() -> None:
    here = cpu("Xeon 8480", "x86_64", units=None)
    same_model = cpu("Xeon 8480", "x86_64", units=56, driver="b")
    same_arch = cpu("EPYC 9654", "x86_64", units=96)
    found = fallback_order(here.info, [
        (dict(same_arch.info), [row("direct", 2.0)]),
        (dict(same_model.info), [row("direct", 1.0)]),
    ])
    assert [source for source, _, _ in found] == [SAME_MODEL, SAME_ARCHITECTURE]


def test_cached_find_does_not_borrow_from_an_unknown_device(store_url: str) -> None:
    # Two hosts whose CPU model could not be read: their results are not interchangeable.
    here, other = cpu("", "", driver="mine"), cpu("", "", driver="theirs")
    seed(open_store(store_url), other, small_problem(), [row("direct", 1.0), row("fft", 2.0)])
    with pytest.raises(NotInDatabase):
        tuner(store_url, here).find(small_problem(), "cpu", mode="cached")
