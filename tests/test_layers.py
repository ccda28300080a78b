"""The layers import one way: kernels <- algorithms <- tuner -> db; api, CLI, nn on the tuner."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Package (or module prefix) -> what it must never import. A front end goes through the
#: tuner's facade (tuner.service) instead of the store or the registry.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "algorithms": ("tuner", "db", "api"),
    "db": ("algorithms", "tuner", "api"),
    "tuner": ("api",),
    "api": ("db", "algorithms.registry"),
    "tuner/cli": ("db", "algorithms.registry", "api"),
}


def imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for module in imports(path):
            if any(module == f or module.startswith(f + ".") for f in forbidden):
                out.append(f"{path.relative_to(ROOT)} imports {module}")
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_runs_back_up_the_layers(package: str) -> None:
    assert _violations(package, FORBIDDEN[package]) == []


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    # The rule must be able to fail: an algorithms module importing the tuner is caught.
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from tuner.service import service\n")
    assert "tuner.service" in imports(bad)
