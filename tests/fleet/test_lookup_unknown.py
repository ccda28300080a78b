"""Fallback lookups for devices whose model or architecture is unknown (empty or missing):
an unknown value is no evidence of sameness, so nothing is borrowed on its strength."""

from __future__ import annotations

from pathlib import Path

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


# Bug: a hypervisor names an EPYC Milan and a Genoa (AVX-512) both "AMD EPYC", and the two
# shared one fingerprint and stood in for each other as the same model; aarch64 hosts all
# had the name "aarch64" (Graviton 2 and 3 alike).
@pytest.mark.parametrize(("first", "second"), [
    ("vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nstepping\t: 1\n"
     "model name\t: AMD EPYC\nflags\t\t: fpu avx avx2 fma\n",
     "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nstepping\t: 1\n"
     "model name\t: AMD EPYC\nflags\t\t: fpu avx avx2 fma avx512f\n"),
    ("processor\t: 0\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n",
     "processor\t: 0\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\nCPU part\t: 0xd40\n"),
])
def test_two_processor_models_under_one_name_are_two_devices(
    first: str, second: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    from algorithms.cpu.runtime import CpuRuntime

    real_open = builtins.open
    fingerprints = []
    fake = tmp_path / "cpuinfo"
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: real_open(
        fake if path == "/proc/cpuinfo" else path, *a, **k))
    for text in (first, second):
        fake.write_text(text + "\nprocessor\t: 1\nmodel name\t: ignored\n")
        fingerprints.append(CpuRuntime().fingerprint())
    monkeypatch.setattr(builtins, "open", real_open)
    here, there = fingerprints
    assert here["name"] == there["name"] and here["model_id"] != there["model_id"]
    assert fingerprint_of(here) != fingerprint_of(there)
    other = dict(there, info=there)
    assert [s for s, _, _ in fallback_order(here, [(other, [row("direct", 1.0)])])] == [
        SAME_ARCHITECTURE]
    # The same model, measured by another host, still stands in as the same model.
    same = dict(here, info=dict(here, units=64))
    assert [s for s, _, _ in fallback_order(here, [(same, [row("direct", 1.0)])])] == [
        SAME_MODEL]
