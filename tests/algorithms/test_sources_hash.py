"""The implementation hash (algorithms/registry.py) covers the code the algorithms run."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

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


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_what_decides_a_stored_status_is_hashed(backend: str) -> None:
    # Bug pinned: the tolerances (reference.tolerance) and the GPU's error measure
    # (reference_gemm.errors) were outside every hash, so a row verified under one tolerance
    # was served under another: ok rows over a tightened limit came back "ok", and wrong
    # rows under a loosened one were skipped for good.
    from algorithms import reference, reference_gemm

    package = Path(importlib.import_module(f"algorithms.{backend}").__file__ or "").parent
    hashed = {path.resolve() for path in algorithm_sources(package)}
    assert Path(reference.__file__).resolve() in hashed
    assert Path(reference_gemm.__file__).resolve() in hashed


_EDIT_AFTER_IMPORT = """
import json, sys
from pathlib import Path
root, edit = Path(sys.argv[1]), sys.argv[2] == "edit"
sys.path.insert(0, str(root))
import algorithms.cpu as cpu, algorithms.cuda as cuda
from algorithms.cuda import _loader
if edit:  # after the import, before anything asks for a hash or a kernel's text
    for path, comment in ((root / "algorithms" / "cpu" / "direct.py", "#"),
                          (root / "kernels" / "direct.cu", "//")):
        path.write_text(path.read_text() + f"\\n{comment} edited under a running process\\n")
print(json.dumps({"hashes": [cpu.implementation_hash(), cuda.implementation_hash()],
                  "source_edited": "edited under" in _loader.kernel_source("direct.cu")}))
"""


def test_the_hash_and_the_kernels_are_those_the_process_imported(tmp_path: Path) -> None:
    # Bug pinned: both hashes were taken at the first tuning and the kernel text read at the
    # first compile, from disk: sources upgraded under a running server were hashed (or
    # compiled) as new while the process ran the old code, and a fresh process then served
    # the old code's times as the new code's.
    import json
    import shutil
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(root / "algorithms", tmp_path / "algorithms", ignore=ignore)
    shutil.copytree(root / "kernels", tmp_path / "kernels", ignore=ignore)
    script = tmp_path / "edit.py"
    script.write_text(_EDIT_AFTER_IMPORT)

    def run(edit: bool) -> dict[str, Any]:
        done = subprocess.run([sys.executable, str(script), str(tmp_path),
                               "edit" if edit else "read"], check=True,
                              capture_output=True, text=True, cwd=tmp_path)
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    imported = run(edit=False)
    edited_after_import = run(edit=True)
    assert edited_after_import == imported  # the hashes and the text of the code it runs
    # The edits were real: a process importing the edited sources hashes them otherwise.
    fresh = run(edit=False)
    assert fresh["hashes"][0] != imported["hashes"][0]
    assert fresh["hashes"][1] != imported["hashes"][1] and fresh["source_edited"]
