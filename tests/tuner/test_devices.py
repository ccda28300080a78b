"""Device strings: canonical forms, and one-line errors for everything else."""

from __future__ import annotations

import pytest

from tuner.devices import parse_device


@pytest.mark.parametrize(("given", "canonical"),
                         [("cpu", "cpu"), (" CPU ", "cpu"), ("cuda", "cuda:0"),
                          ("cuda:3", "cuda:3"), ("CUDA:12", "cuda:12")])
def test_canonical_devices(given: str, canonical: str) -> None:
    assert parse_device(given) == canonical


@pytest.mark.parametrize("bad", [
    "cuda:\u0661",  # Issue 12 (9): an Arabic-Indic digit one was accepted as cuda:1.
    "cuda:\uff11",  # a fullwidth digit one
    "cpu:0", "gpu", "cuda:-1", "cuda:", "",
])
def test_other_devices_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="device"):
        parse_device(bad)


# Mutation gap: the index is canonical (an int, leading zeros dropped), at most six digits,
# and a non-string is refused with the same one-line ValueError as a bad name.
@pytest.mark.parametrize(("given", "canonical"),
                         [("cuda:007", "cuda:7"), ("cuda:000000", "cuda:0")])
def test_a_device_index_is_canonical(given: str, canonical: str) -> None:
    assert parse_device(given) == canonical


@pytest.mark.parametrize("bad", ["cuda:1234567", 0, 1.0, b"cpu", ["cpu"]])
def test_long_indices_and_non_strings_are_refused_in_one_line(bad: object) -> None:
    with pytest.raises(ValueError, match="device") as refused:
        parse_device(bad)  # type: ignore[arg-type]
    assert "\n" not in str(refused.value)


# Mutation gap: None picks the first GPU only when CUDA is usable, and a canonical device
# string's backend is the part before the colon.
@pytest.mark.parametrize(("usable", "picked"), [(True, "cuda:0"), (False, "cpu")])
def test_no_device_picks_the_gpu_only_when_one_is_usable(
    usable: bool, picked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner import devices

    monkeypatch.setattr(devices, "cuda_available", lambda: (usable, "" if usable else "no GPU"))
    devices.default_device.cache_clear()
    try:
        assert parse_device(None) == picked
    finally:
        devices.default_device.cache_clear()
    assert devices.backend_of("cuda:3") == "cuda" and devices.backend_of("cpu") == "cpu"


# Mutation gap: the fingerprint hash is stored forever in users' stores: its value for given
# fields is pinned (sha256 of canonical JSON, 32 hex digits), key order is cosmetic.
def test_the_fingerprint_hash_is_pinned_and_ignores_key_order() -> None:
    from tuner.devices import fingerprint_of

    info = {"kind": "cpu", "name": "AMD EPYC 7B13", "units": 16, "cpu_quota": 1.5,
            "python": "3.12"}
    assert fingerprint_of(info) == "b6657b25bd02687dbc605396b13a0d7d"
    assert fingerprint_of(dict(reversed(list(info.items())))) == fingerprint_of(info)
    assert fingerprint_of({**info, "units": 8}) != fingerprint_of(info)


# Mutation gap: identify() keys stores by every field the runtime reports, none dropped, and
# the same device twice is the same identity.
def test_identify_hashes_every_field_of_the_runtime() -> None:
    from algorithms.cpu.runtime import CpuRuntime
    from tuner.devices import fingerprint_of, identify

    found = identify("cpu")
    assert found.info == CpuRuntime().fingerprint()
    assert found.fingerprint == fingerprint_of(found.info) and found.device == "cpu"
    assert identify(parse_device(" CPU ")) is found
