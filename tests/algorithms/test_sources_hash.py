"""The implementation hash (algorithms/registry.py) covers the code the algorithms run."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from algorithms.registry import SHARED_SOURCES, algorithm_sources

#: Top-level modules of `algorithms` that hashed code may import without being hashed: the
#: problem model (a change there is a change of the stored key, not of an implementation),
#: the registry, the runtime interface, and the backend packages themselves.
_UNHASHED = {"problem", "registry", "runtime", "cpu", "cuda"}


def _imported(path: Path) -> set[str]:
    """The `algorithms.<module>` names a file imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[0] == "algorithms" and len(parts) > 1:
                names.add(parts[1])
    return names


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_every_shared_module_the_algorithms_import_is_hashed(backend: str) -> None:
    # Bug pinned: algorithms/phases.py (strided backward_data) was imported by by_forward.py
    # but missing from SHARED_SOURCES, so editing it would have kept stale stored
    # measurements current.
    package = Path(importlib.import_module(f"algorithms.{backend}").__file__ or "").parent
    hashed = algorithm_sources(package)
    imported = set().union(*(_imported(path) for path in hashed)) - _UNHASHED
    assert {f"{name}.py" for name in imported} <= set(SHARED_SOURCES)
    assert {path.name for path in hashed} >= set(SHARED_SOURCES)
