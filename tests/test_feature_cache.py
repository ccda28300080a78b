"""The disk cache of FEATURE_ARCH kernel binaries (algorithms/cuda/_feature.py), with a
stand-in compiler: no GPU, CuPy or NVRTC needed."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from algorithms.cuda import _feature

OPTIONS = ("-std=c++17", "-arch=sm_90a")


class FakeCompiler:
    """Counts compiles; the cubin names its inputs, with NUL bytes as a real one has."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, source: str, filename: str, name: str,
                 options: tuple[str, ...]) -> tuple[str, bytes]:
        self.calls += 1
        return f"_Z{len(name)}{name}", b"\x7fELF\0" + f"{source}|{options}".encode() + b"\0"


def _get(folder: Path, compiler: FakeCompiler, source: str = "kernel v1",
         options: tuple[str, ...] = OPTIONS, toolchain: str = "nvrtc 13.0",
         name: str = "k<half_t, 64>") -> tuple[str, bytes]:
    return _feature.binary(source, "k.cu", name, options, toolchain, compiler, folder)


def test_a_second_process_reads_the_binary_instead_of_compiling(tmp_path: Path) -> None:
    compiler = FakeCompiler()
    first = _get(tmp_path, compiler)
    assert _get(tmp_path, compiler) == first and compiler.calls == 1
    assert [p.suffix for p in tmp_path.iterdir()] == [".cubin"]  # no temporary left


@pytest.mark.parametrize("change", [dict(source="kernel v2"), dict(toolchain="nvrtc 13.1"),
                                    dict(options=("-std=c++17", "-arch=sm_100a")),
                                    dict(name="k<half_t, 128>")])
def test_any_input_of_the_binary_changes_the_key(tmp_path: Path, change: dict[str, Any]) -> None:
    compiler = FakeCompiler()
    _get(tmp_path, compiler)
    _get(tmp_path, compiler, **change)
    assert compiler.calls == 2 and len(list(tmp_path.iterdir())) == 2


def test_a_damaged_entry_is_compiled_again_and_replaced(tmp_path: Path) -> None:
    compiler = FakeCompiler()
    first = _get(tmp_path, compiler)
    (entry,) = tmp_path.iterdir()
    entry.write_bytes(b"truncated without a separator")
    assert _get(tmp_path, compiler) == first and compiler.calls == 2
    assert _get(tmp_path, compiler) == first and compiler.calls == 2


def test_an_unwritable_cache_still_gives_the_binary(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder should be")
    compiler = FakeCompiler()
    assert _get(blocked / "sub", compiler) == _get(blocked / "sub", compiler)
    assert compiler.calls == 2


def test_the_cache_lives_in_cupys_cache_directory(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path))
    assert _feature.cache_dir() == tmp_path / "convtune_feature"
    monkeypatch.delenv("CUPY_CACHE_DIR")
    assert _feature.cache_dir() == Path(os.path.expanduser("~")) / ".cupy" / "kernel_cache" / (
        "convtune_feature")


# Bug: the temporary a compile is written to was named per process only, so two threads
# compiling one instance at once (one per device) wrote the same file, and one could move
# the other's half-written binary into the cache.
def test_threads_compiling_one_instance_write_temporaries_of_their_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    both = threading.Barrier(2)
    compiler = FakeCompiler()

    def compile_together(*args: Any) -> tuple[str, bytes]:
        both.wait(timeout=10)  # each thread has found no entry and compiles
        return compiler(*args)

    moved: list[str] = []
    replace = os.replace

    def recording_replace(source: Any, target: Any) -> None:
        moved.append(str(source))
        replace(source, target)

    monkeypatch.setattr(_feature.os, "replace", recording_replace)
    results: list[tuple[str, bytes]] = []
    threads = [threading.Thread(target=lambda: results.append(_feature.binary(
        "kernel v1", "k.cu", "k<half_t, 64>", OPTIONS, "nvrtc 13.0", compile_together,
        tmp_path))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2 and results[0] == results[1] and compiler.calls == 2
    assert len(set(moved)) == 2  # one temporary each
    assert [p.suffix for p in tmp_path.iterdir()] == [".cubin"]
