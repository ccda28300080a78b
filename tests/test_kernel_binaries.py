"""The disk cache of kernel binaries (algorithms/cuda/_binaries.py), with a
stand-in compiler: no GPU, CuPy or NVRTC needed."""

from __future__ import annotations

import os
import sys
import threading
import types
from pathlib import Path
from typing import Any, ClassVar

import pytest

from algorithms.cuda import _binaries, _loader

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
    return _binaries.binary(source, "k.cu", name, options, toolchain, compiler, folder)


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
    assert _binaries.cache_dir() == tmp_path / "convtune_kernels"
    monkeypatch.delenv("CUPY_CACHE_DIR")
    assert _binaries.cache_dir() == Path(os.path.expanduser("~")) / ".cupy" / "kernel_cache" / (
        "convtune_kernels")


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

    monkeypatch.setattr(_binaries.os, "replace", recording_replace)
    results: list[tuple[str, bytes]] = []
    threads = [threading.Thread(target=lambda: results.append(_binaries.binary(
        "kernel v1", "k.cu", "k<half_t, 64>", OPTIONS, "nvrtc 13.0", compile_together,
        tmp_path))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2 and results[0] == results[1] and compiler.calls == 2
    assert len(set(moved)) == 2  # one temporary each
    assert [p.suffix for p in tmp_path.iterdir()] == [".cubin"]


# What get_kernel builds on a GPU host, with a stand-in CuPy: its compute capability, the
# architecture option CuPy's RawModule would pick, and Functions loaded from cubins.
class _Function:
    def __init__(self, module: _Module, name: str) -> None:
        self.module, self.name = module, name


class _Module:
    def __init__(self) -> None:
        self.cubin = b""

    def load(self, cubin: bytes) -> None:
        self.cubin = cubin

    def get_function(self, name: str) -> _Function:
        return _Function(self, name)


class _RawModule:
    built: ClassVar[list[str]] = []

    def __init__(self, code: str, options: tuple[str, ...],
                 name_expressions: list[str]) -> None:
        self.options = options

    def get_function(self, name: str) -> str:
        _RawModule.built.append(name)
        return f"RawKernel {name}"


def _stand_in_cupy(monkeypatch: pytest.MonkeyPatch, arch: tuple[str, str] = ("-arch=sm_90",
                                                                              "cubin"),
                   capability: str = "90") -> None:
    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    function = types.ModuleType("cupy.cuda.function")
    compiler = types.ModuleType("cupy.cuda.compiler")
    function.Module = _Module  # type: ignore[attr-defined]
    compiler._get_arch_for_options_for_nvrtc = lambda: arch  # type: ignore[attr-defined]
    cuda.runtime = types.SimpleNamespace(getDevice=lambda: 0)  # type: ignore[attr-defined]
    cuda.Device = lambda: types.SimpleNamespace(compute_capability=capability)  # type: ignore[attr-defined]
    cuda.function, cuda.compiler = function, compiler  # type: ignore[attr-defined]
    cupy.cuda, cupy.RawModule = cuda, _RawModule  # type: ignore[attr-defined]
    for name, module in (("cupy", cupy), ("cupy.cuda", cuda), ("cupy.cuda.function", function),
                         ("cupy.cuda.compiler", compiler)):
        monkeypatch.setitem(sys.modules, name, module)
    _RawModule.built = []


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """What NVRTC was asked to compile, (name expression, options) each; the cache in
    tmp_path, and a fresh process's kept kernels."""
    done: list[tuple[str, tuple[str, ...]]] = []

    def nvrtc_compile(source: str, filename: str, name: str,
                      options: tuple[str, ...]) -> tuple[str, bytes]:
        done.append((name, options))
        return f"_lowered_{name}", b"\x7fELF\0cubin of " + name.encode()

    monkeypatch.setattr(_binaries, "nvrtc_compile", nvrtc_compile)
    monkeypatch.setattr(_binaries, "nvrtc_version", lambda: "nvrtc 13.0")
    monkeypatch.setattr(_binaries, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(_loader, "_kernels", {})
    monkeypatch.setattr(_loader, "_cached_source", lambda filename: f"source of {filename}")
    return done


# Bug: get_kernel built every kernel through CuPy's RawModule with a name expression, and
# CuPy never reads its disk cache back for name expressions, so every process (each tuning,
# test worker and process running a tuned plan) compiled every kernel it used again.
def test_a_second_process_loads_a_kernel_without_compiling_it(
        monkeypatch: pytest.MonkeyPatch, compiles: list[tuple[str, tuple[str, ...]]]) -> None:
    _stand_in_cupy(monkeypatch)
    name = "direct_conv<float, 8, 8>"
    kernel = _loader.get_kernel("direct.cu", name)
    assert _loader.get_kernel("direct.cu", name) is kernel and len(compiles) == 1
    monkeypatch.setattr(_loader, "_kernels", {})  # a new process: nothing loaded yet
    again = _loader.get_kernel("direct.cu", name)
    assert len(compiles) == 1 and _RawModule.built == []
    assert (again.name, again.module.cubin) == (kernel.name, kernel.module.cubin)
    assert kernel.name == f"_lowered_{name}" and kernel.module.cubin.endswith(name.encode())


def test_kernels_are_built_with_the_options_cupys_rawmodule_used(
        monkeypatch: pytest.MonkeyPatch, compiles: list[tuple[str, tuple[str, ...]]]) -> None:
    # The binaries must be those measured: RawModule added -ftz=true and the device's arch;
    # the sm_90a files never went through it.
    _stand_in_cupy(monkeypatch)
    _loader.get_kernel("direct.cu", "a")
    _loader.get_kernel("implicit_gemm_wgmma.cu", "b")
    assert compiles == [("a", ("-std=c++17", "-ftz=true", "--device-as-default-execution-space",
                               "-arch=sm_90")),
                        ("b", ("-std=c++17", "--device-as-default-execution-space",
                               "-arch=sm_90a"))]


@pytest.mark.parametrize("arch", [("-arch=compute_90", "ptx"), None])
def test_where_cupy_would_build_ptx_its_own_rawmodule_builds_the_kernel(
        monkeypatch: pytest.MonkeyPatch, compiles: list[tuple[str, tuple[str, ...]]],
        arch: tuple[str, str] | None) -> None:
    # CUPY_COMPILE_WITH_PTX, or a CuPy whose private helper is gone: left to CuPy, uncached.
    _stand_in_cupy(monkeypatch, *(() if arch is None else (arch,)))
    if arch is None:
        del sys.modules["cupy.cuda.compiler"]._get_arch_for_options_for_nvrtc
    assert _loader.get_kernel("direct.cu", "a") == "RawKernel a"
    assert compiles == [] and _RawModule.built == ["a"]


def test_a_feature_file_on_another_gpu_fails_before_compiling(
        monkeypatch: pytest.MonkeyPatch, compiles: list[tuple[str, tuple[str, ...]]]) -> None:
    _stand_in_cupy(monkeypatch, capability="80")
    with pytest.raises(RuntimeError, match=r"needs a GPU of compute capability 90a \(sm_90a\); "
                                           r"this one is 80"):
        _loader.get_kernel("implicit_gemm_wgmma.cu", "b")
    assert compiles == []


# A damaged cache file must not reach the driver (a cubin that fails cuModuleLoadData would
# fail every run of its kernel until someone deletes the file).
def test_an_entry_whose_cubin_fails_its_digest_is_compiled_again(tmp_path: Path) -> None:
    compiler = FakeCompiler()
    first = _get(tmp_path, compiler)
    (entry,) = tmp_path.iterdir()
    data = bytearray(entry.read_bytes())
    data[-2] ^= 0xFF  # one byte of the cubin flipped
    entry.write_bytes(bytes(data))
    assert _get(tmp_path, compiler) == first and compiler.calls == 2


# Two NVRTC builds of one version (a patch release: getVersion says 13.0 for both) may
# compile differently; the key names the library file too, as CuPy's names its build.
def test_the_toolchain_names_the_mapped_nvrtc_library(tmp_path: Path) -> None:
    library = tmp_path / "libnvrtc.so.13.0.88"
    library.write_bytes(b"\x7fELF" + b"\0" * 60)
    builtins = tmp_path / "libnvrtc-builtins.so.13.0"
    builtins.write_bytes(b"x")
    maps = tmp_path / "maps"
    maps.write_text(
        f"7f00-7f10 r--p 00000000 08:01 1 {builtins}\n"
        "7f10-7f20 rw-p 00000000 00:00 0 \n"
        f"7f20-7f30 r-xp 00001000 08:01 2 {library}\n")
    found = _binaries.mapped_library("libnvrtc.so", maps)
    assert found == (str(library), "64", str(library.stat().st_mtime_ns))
    assert _binaries.mapped_library("libnvrtc.so", tmp_path / "absent") == ()
    assert _binaries.mapped_library("libcuda.so", maps) == ()


# Regression: the key took the first libnvrtc.so* in /proc/self/maps, which is in address
# order; a cu12 PyTorch's NVRTC mapped below CuPy's CUDA 13 one would have named the key.
def test_the_toolchain_names_the_nvrtc_of_its_own_major_version(tmp_path: Path) -> None:
    torch_nvrtc = tmp_path / "libnvrtc.so.12"
    torch_nvrtc.write_bytes(b"x" * 12)
    cupy_nvrtc = tmp_path / "libnvrtc.so.13"
    cupy_nvrtc.write_bytes(b"x" * 13)
    maps = tmp_path / "maps"
    maps.write_text(f"7f00-7f10 r-xp 00000000 08:01 1 {torch_nvrtc}\n"
                    f"7f20-7f30 r-xp 00000000 08:01 2 {cupy_nvrtc}\n")
    name = _binaries.toolchain((13, 0), maps)
    assert name == f"nvrtc 13.0 {cupy_nvrtc} 13 {cupy_nvrtc.stat().st_mtime_ns}"
    assert _binaries.toolchain((12, 8), maps).startswith(f"nvrtc 12.8 {torch_nvrtc} 12 ")
    assert _binaries.toolchain((13, 0), tmp_path / "absent") == "nvrtc 13.0"


# Regression: a write that failed partway (a full disk) left its temporary file behind for
# good; the binary is still returned, and the folder keeps nothing of the failed write.
def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def half_written(self: Path, data: bytes) -> int:
        with open(self, "wb") as file:
            file.write(data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", half_written)
    compiler = FakeCompiler()
    assert _get(tmp_path, compiler)[0].startswith("_Z")
    assert list(tmp_path.iterdir()) == []


# Bug: the digest covered the cubin only, so a damaged kernel name was read as valid: no
# compile again, and every get_function of it failed.
def test_an_entry_whose_name_is_damaged_is_compiled_again(tmp_path: Path) -> None:
    compiler = FakeCompiler()
    first = _get(tmp_path, compiler)
    (entry,) = tmp_path.iterdir()
    data = bytearray(entry.read_bytes())
    data[1] ^= 0x01  # one byte of the lowered name
    entry.write_bytes(bytes(data))
    assert _get(tmp_path, compiler) == first and compiler.calls == 2


def test_the_cache_folder_needs_no_home_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    # Bug: Path.home() raised where there is no home (no $HOME, a container's UID without
    # a passwd entry), failing every kernel build; CuPy's own default does not.
    def homeless() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("CUPY_CACHE_DIR", raising=False)
    monkeypatch.setattr(Path, "home", homeless)
    assert _binaries.cache_dir().name == _binaries.FOLDER


def test_a_crashed_writer_s_old_temporary_is_swept(tmp_path: Path) -> None:
    # Bug: a process killed mid-write left its <key>.cubin.<pid>.<tid>.tmp (0.5 MB) for good.
    import os
    import time

    stale = tmp_path / "abc.cubin.123.456.tmp"
    fresh = tmp_path / "def.cubin.123.789.tmp"  # perhaps another process writing right now
    for path in (stale, fresh):
        path.write_bytes(b"partial")
    old = time.time() - 2 * _binaries.STALE_S
    os.utime(stale, (old, old))
    _get(tmp_path, FakeCompiler())
    assert not stale.exists() and fresh.exists()
