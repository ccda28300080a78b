"""Devices: parsing "cpu" / "cuda[:N]", their runtimes, and the identity timings are keyed by."""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms.registry import BACKEND_MODULES
from tuner.runtime import Runtime

ROOT = Path(__file__).resolve().parents[1]


def parse_device(device: str | None) -> str:
    """Canonical device string: "cpu" or "cuda:N"; None picks the first GPU, else the CPU."""
    if device is None:
        return default_device()
    if not isinstance(device, str):
        raise ValueError(f"device must be a string like 'cpu' or 'cuda:0', got {device!r}")
    text = device.strip().lower()
    if text == "cpu":
        return "cpu"
    if text == "cuda":
        return "cuda:0"
    if text.startswith("cuda:") and text[5:].isdigit():
        return f"cuda:{int(text[5:])}"
    raise ValueError(f"unknown device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")


@functools.cache
def default_device() -> str:
    """The first GPU when CuPy sees one, else the CPU."""
    ok, _why = cuda_available()
    return "cuda:0" if ok else "cpu"


def cuda_available() -> tuple[bool, str]:
    """Whether a CUDA GPU can be used, and why not."""
    try:
        from tuner.runtimes.cuda import cuda_available as check
    except ImportError as exc:  # the CUDA runtime module itself failed to import
        return False, f"CUDA runtime unavailable: {exc}"
    return check()


@functools.cache
def get_runtime(device: str) -> Runtime:
    """The runtime for a canonical device string (cached: one per device per process)."""
    if device == "cpu":
        from tuner.runtimes.cpu import CpuRuntime

        return CpuRuntime()
    ok, why = cuda_available()
    if not ok:
        raise ValueError(f"device {device!r} is not usable: {why}")
    from tuner.runtimes.cuda import CudaRuntime

    return CudaRuntime(int(device.split(":")[1]))


def _hash_files(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def implementation_hash(backend: str) -> str:
    """Hash of the code behind a backend's algorithms (Python modules and CUDA kernels).

    Per backend rather than per algorithm: the algorithms share helpers, and a stale
    result is worse than a re-tune.
    """
    module = importlib.import_module(BACKEND_MODULES[backend])
    package_dir = Path(module.__file__ or "").parent
    files = [*package_dir.glob("*.py"), ROOT / "algorithms" / "base.py"]
    if backend == "cuda":
        files += [*(ROOT / "kernels").glob("*.cu"), *(ROOT / "kernels").glob("*.cuh")]
    return _hash_files([f for f in files if f.exists()])[:16]


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
    text = json.dumps(info, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@functools.cache
def identify(device: str) -> DeviceIdentity:
    """The identity of a canonical device string."""
    info = dict(get_runtime(device).fingerprint())
    return DeviceIdentity(device=device, fingerprint=fingerprint_of(info), info=info)


def backend_of(device: str) -> str:
    """The registry backend that runs on a canonical device string."""
    return "cpu" if device == "cpu" else "cuda"
