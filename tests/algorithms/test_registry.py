"""The registry (algorithms/registry.py): names, backends, registration and the source hash."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest

from algorithms import registry
from algorithms.base import AlgorithmBase
from algorithms.registry import (
    ALGORITHM_NAMES,
    algorithm_sources,
    algorithms_for,
    backend,
    get_algorithm,
    hash_sources,
    register,
)


def _fake(name: str) -> type[AlgorithmBase]:
    """A class of its own for an algorithm `name` on the backend "fake"."""
    return type(f"Fake_{name}", (AlgorithmBase,), {"name": name, "backend": "fake"})


# Two classes of one name: registering the second is a double registration.
_FakeDirect, _OtherDirect = _fake("direct"), _fake("direct")
_FakeFft, _Unnamed = _fake("fft"), _fake("no_such_algorithm")


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend "fake" (backed by the CPU package's module) with an empty table of its own."""
    # The CPU package imported first: imported under the empty table, it would register its
    # algorithms there and never again, and the restored table would lack them.
    algorithms_for("cpu")
    monkeypatch.setattr(registry, "_IMPLEMENTATIONS", {})
    monkeypatch.setitem(registry.BACKEND_MODULES, "fake", "algorithms.cpu")


# Mutation gap: registration checks (an unknown name, two classes under one name) and the
# order algorithms_for returns were unpinned.
@pytest.mark.usefixtures("fake_backend")
def test_registration_checks_names_and_keeps_registry_order() -> None:
    with pytest.raises(ValueError, match="unknown algorithm name 'no_such_algorithm'"):
        register(_Unnamed())
    fft, direct = _FakeFft(), _FakeDirect()
    assert register(fft) is fft and register(direct) is direct  # fft registered first
    assert algorithms_for("fake") == [direct, fft]  # ALGORITHM_NAMES order
    again = _FakeDirect()
    assert register(again) is again  # a module imported twice registers its own class again
    with pytest.raises(ValueError, match="fake/direct is registered twice"):
        register(_OtherDirect())
    assert get_algorithm("fake", "direct") is again


# Mutation gap: unknown backends raised KeyError (or gave an empty list) with no test.
def test_unknown_backends_and_algorithms_are_value_errors() -> None:
    expected = re.escape("unknown backend 'tpu'; expected one of ['cpu', 'cuda']")
    with pytest.raises(ValueError, match=expected):
        backend("tpu")
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        algorithms_for("tpu")
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        get_algorithm("tpu", "direct")
    known = f"unknown algorithm 'nope' for backend 'cpu'; known: {list(ALGORITHM_NAMES)}"
    with pytest.raises(ValueError, match=re.escape(known)):
        get_algorithm("cpu", "nope")


# Mutation gap: the CPU backend's device description (one host device, never "cpu:N").
def test_cpu_backend_has_one_unindexed_device() -> None:
    cpu = backend("cpu")
    assert cpu.INDEXED is False
    ok, why = cpu.available()
    assert ok is True and why == "NumPy on the host"


def _expected_hash(files: dict[Path, bytes]) -> str:
    """sha256 over "<folder>/<name>" then the bytes of each file, in (folder, name) order."""
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: (p.parent.name, p.name)):
        digest.update(f"{path.parent.name}/{path.name}".encode() + files[path])
    return digest.hexdigest()[:16]


# Mutation gap: hash_sources' exact digest (what stored measurements are keyed by) was
# unpinned: its order (files of one name in two folders), names, contents and length.
def test_hash_sources_is_independent_of_order_and_covers_names_and_bytes() -> None:
    rng = np.random.default_rng()
    files = {Path(p): rng.bytes(int(rng.integers(1, 64)))
             for p in ("/a/algorithms/winograd.py", "/a/algorithms/cpu/winograd.py",
                       "/a/algorithms/base.py", "/a/algorithms/cpu/direct.py")}
    expected = _expected_hash(files)
    assert len(expected) == 16
    for order in (list(files), list(reversed(files)), sorted(files, key=str)):
        assert hash_sources(order, read=files.__getitem__) == expected
    # The same bytes under swapped names are other code.
    swapped = dict(zip(files, reversed(list(files.values())), strict=True))
    assert hash_sources(swapped, read=swapped.__getitem__) == _expected_hash(swapped) != expected


# Mutation gap: a backend's runtime is not part of its algorithms' hash (the docstring's
# "not its runtime"); the shared modules are.
def test_algorithm_sources_leave_out_the_runtime() -> None:
    package = Path(registry.__file__).resolve().parent / "cpu"
    names = {(p.parent.name, p.name) for p in algorithm_sources(package)}
    assert ("cpu", "runtime.py") not in names
    assert {("cpu", "direct.py"), ("cpu", "__init__.py"), ("algorithms", "base.py")} <= names
