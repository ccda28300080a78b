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
