"""The append-only registry: stable algorithm names and their implementations per backend.

Names are stored in databases and bundles and never change meaning; a retired algorithm
keeps its name reserved here. Implementations register themselves per backend.
"""

from __future__ import annotations

import importlib

from algorithms.base import Algorithm

#: Every algorithm name ever used, in order of introduction. Append only.
ALGORITHM_NAMES: tuple[str, ...] = ("direct", "im2col_gemm", "implicit_gemm", "fft")

#: Backends and the module that registers their implementations when imported.
BACKEND_MODULES: dict[str, str] = {"cpu": "algorithms.cpu", "cuda": "algorithms.cuda"}

_IMPLEMENTATIONS: dict[str, dict[str, Algorithm]] = {}


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


def algorithms_for(backend: str) -> list[Algorithm]:
    """The implementations registered for `backend`, in registry order."""
    if backend not in BACKEND_MODULES:
        raise ValueError(f"unknown backend {backend!r}; expected one of {sorted(BACKEND_MODULES)}")
    importlib.import_module(BACKEND_MODULES[backend])
    table = _IMPLEMENTATIONS.get(backend, {})
    return [table[name] for name in ALGORITHM_NAMES if name in table]


def get_algorithm(backend: str, name: str) -> Algorithm:
    """One backend's implementation of `name`; ValueError names what is unknown."""
    for algorithm in algorithms_for(backend):
        if algorithm.name == name:
            return algorithm
    known = [a.name for a in algorithms_for(backend)]
    raise ValueError(f"unknown algorithm {name!r} for backend {backend!r}; known: {known}")
