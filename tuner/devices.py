"""Devices: parsing "cpu" / "cuda[:N]", their runtimes, and the identity timings are keyed by.

A device string names a backend of the registry ("cpu", or "cuda:N" for an indexed one);
everything backend-specific (runtime, availability, implementation hash) comes from that
backend's package.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from algorithms.registry import BACKEND_MODULES, backend
from algorithms.runtime import Runtime
from db.rows import canonical_json

# ASCII digits only: str.isdigit() also accepts other scripts' digits (Arabic-Indic one,
# U+0661, say), which int() converts.
_DEVICE = re.compile(r"^([a-z]+)(?::([0-9]{1,6}))?$")


def parse_device(device: str | None) -> str:
    """Canonical device string: "cpu" or "cuda:N"; None picks the first GPU, else the CPU."""
    if device is None:
        return default_device()
    if not isinstance(device, str):
        raise ValueError(f"device must be a string like 'cpu' or 'cuda:0', got {device!r}")
    match = _DEVICE.match(device.strip().lower())
    name = match.group(1) if match else None
    if match is None or name not in BACKEND_MODULES:
        raise ValueError(f"unknown device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    index = match.group(2)
    if not backend(name).INDEXED:
        if index is not None:
            raise ValueError(f"unknown device {device!r}: '{name}' takes no index")
        return name
    return f"{name}:{int(index or 0)}"


@functools.cache
def default_device() -> str:
    """The first GPU when CuPy sees one, else the CPU."""
    ok, _why = cuda_available()
    return "cuda:0" if ok else "cpu"


def cuda_available() -> tuple[bool, str]:
    """Whether a CUDA GPU can be used, and why not."""
    try:
        return backend("cuda").available()
    except ImportError as exc:  # the CUDA backend package itself failed to import
        return False, f"CUDA backend unavailable: {exc}"


def backend_of(device: str) -> str:
    """The registry backend that runs on a canonical device string."""
    return device.split(":", 1)[0]


def _index(device: str) -> int:
    _, _, index = device.partition(":")
    return int(index or 0)


def get_runtime(device: str) -> Runtime:
    """The runtime for a canonical device string (one per device per process)."""
    impl = backend(backend_of(device))
    ok, why = impl.available()
    if not ok:
        raise ValueError(f"device {device!r} is not usable: {why}")
    return impl.device_runtime(_index(device))


def implementation_hash(backend_name: str) -> str:
    """Hash of the code behind a backend's algorithms (Python modules and kernels)."""
    return backend(backend_name).implementation_hash()


@dataclass(frozen=True)
class DeviceIdentity:
    """A device's fingerprint fields and their hash, which keys every stored measurement."""

    device: str  # "cpu" / "cuda:N": where it runs in this process (not part of the identity)
    fingerprint: str
    info: dict[str, Any]

    def __hash__(self) -> int:
        return hash(self.fingerprint)


def fingerprint_of(info: dict[str, Any]) -> str:
    """The identity hash of fingerprint fields: sha256 of their canonical JSON."""
    return hashlib.sha256(canonical_json(info).encode()).hexdigest()[:32]


@functools.cache
def identify(device: str) -> DeviceIdentity:
    """The identity of a canonical device string."""
    info = dict(get_runtime(device).fingerprint())
    return DeviceIdentity(device=device, fingerprint=fingerprint_of(info), info=info)
