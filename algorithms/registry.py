"""The append-only registry: stable algorithm names, backends, and their implementations.

Names are stored in databases and bundles and never change meaning; a retired algorithm
keeps its name reserved here. A backend is one package (tinygrad-style: its algorithms,
runtime, kernel sources, device mapping and implementation hash sit together), found by
name in BACKEND_MODULES; importing it registers its algorithms. Adding a backend touches
its own folder and this file.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol, cast

from algorithms.base import Algorithm
from algorithms.runtime import Runtime

#: Every algorithm name ever used, in order of introduction. Append only.
ALGORITHM_NAMES: tuple[str, ...] = (
    "direct", "im2col_gemm", "implicit_gemm", "fft", "implicit_gemm_tc", "winograd", "depthwise",
    "implicit_gemm_wgmma",
)

#: Backends and the package that implements each (imported on first use).
BACKEND_MODULES: dict[str, str] = {"cpu": "algorithms.cpu", "cuda": "algorithms.cuda"}

_IMPLEMENTATIONS: dict[str, dict[str, Algorithm]] = {}


class Backend(Protocol):
    """What a backend package offers besides registering its algorithms."""

    #: Whether device strings name an index ("cuda:1"); the CPU backend has one device.
    INDEXED: bool

    def available(self) -> tuple[bool, str]:
        """Whether this backend can run here, and why not (cheap; imports nothing heavy)."""
        ...

    def device_runtime(self, index: int) -> Runtime:
        """The runtime of device `index` of this backend."""
        ...

    def implementation_hash(self) -> str:
        """Hash of the code behind this backend's algorithms (keys stored measurements)."""
        ...


def backend(name: str) -> Backend:
    """The backend package `name` (imported, so its algorithms are registered)."""
    if name not in BACKEND_MODULES:
        raise ValueError(f"unknown backend {name!r}; expected one of {sorted(BACKEND_MODULES)}")
    return cast(Backend, importlib.import_module(BACKEND_MODULES[name]))


def register(algorithm: Algorithm) -> Algorithm:
    """Register one backend's implementation of a named algorithm (called at import)."""
    if algorithm.name not in ALGORITHM_NAMES:
        raise ValueError(
            f"unknown algorithm name {algorithm.name!r}: add it to ALGORITHM_NAMES first"
        )
    table = _IMPLEMENTATIONS.setdefault(algorithm.backend, {})
    if algorithm.name in table and type(table[algorithm.name]) is not type(algorithm):
        raise ValueError(f"{algorithm.backend}/{algorithm.name} is registered twice")
    table[algorithm.name] = algorithm
    return algorithm


def algorithms_for(backend_name: str) -> list[Algorithm]:
    """The implementations registered for a backend, in registry order."""
    backend(backend_name)
    table = _IMPLEMENTATIONS.get(backend_name, {})
    return [table[name] for name in ALGORITHM_NAMES if name in table]


def get_algorithm(backend_name: str, name: str) -> Algorithm:
    """One backend's implementation of `name`; ValueError names what is unknown."""
    for algorithm in algorithms_for(backend_name):
        if algorithm.name == name:
            return algorithm
    known = [a.name for a in algorithms_for(backend_name)]
    raise ValueError(f"unknown algorithm {name!r} for backend {backend_name!r}; known: {known}")


def hash_sources(files: Iterable[Path],
                 read: Callable[[Path], bytes] = Path.read_bytes) -> str:
    """A short sha256 of source files (names and bytes, in name order): an implementation hash.

    Per backend rather than per algorithm: the algorithms share helpers, and a stale result
    is worse than a re-tune. `read` gives a file's bytes (the text a backend kept, where it
    keeps its own copy).
    """
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: (p.parent.name, p.name)):
        digest.update(f"{path.parent.name}/{path.name}".encode())
        digest.update(read(path))
    return digest.hexdigest()[:16]


#: Modules outside the backend folders whose code every backend's algorithms run: the
#: interface, the backward-as-forward rearrangement (and its stride phases), and the
#: Winograd transforms both backends take their matrices from; and what decides a stored
#: status, the float64 references and the tolerances (`reference.tolerance`), since a row
#: verified under one tolerance was served under another (a review of keys, 2026-11-30).
SHARED_SOURCES: tuple[str, ...] = ("base.py", "by_forward.py", "phases.py", "winograd.py",
                                   "reference.py", "reference_gemm.py")


def algorithm_sources(package_dir: Path) -> list[Path]:
    """The Python files of a backend's algorithms (not its runtime) plus the shared ones."""
    here = Path(__file__).resolve().parent
    return [
        *(p for p in package_dir.glob("*.py") if p.name != "runtime.py"),
        *(here / name for name in SHARED_SOURCES),
    ]
