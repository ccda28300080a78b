"""Kernel binaries: NVRTC compiles each kernel instance, and a disk cache keeps the cubin
between processes.

Why our own cache: CuPy's RawModule keeps its compiles in CuPy's disk cache, but up to
CuPy 14.1 it never read that cache back when given name expressions (cupy/cuda/compiler.py,
_compile_with_cache_cuda: "We force recompiling to retrieve C++ mangled names"; 14.2 stores
the mangled names with the cubin, cupy/cupy#10177), and every kernel of ours is a template
instance named by one. So every process compiled every instance it used again: each test
worker, each benchmark step, each tuning, and each process that ran a tuned plan, 0.05-0.6 s
an instance on the project's CPU machine, and `convtune warm` filled a cache nobody read.
RawModule cannot target "a" architectures either (_loader.FEATURE_ARCH), which is how this
module began, and one cache of our own serves every CuPy version alike.

The cache lives in CuPy's kernel cache directory (CUPY_CACHE_DIR, default
~/.cupy/kernel_cache, per CuPy's documentation), in a folder of its own. A file is keyed by
everything that shapes the binary (the NVRTC version, the options, the file name, the name
expression and the source text), holds a digest of the cubin, and is written whole to a
temporary name and renamed, so a reader sees a complete file or none; a file that fails
its digest is compiled again and replaced. An unwritable cache costs a compile per process,
nothing else.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The cache's folder in CuPy's kernel cache directory.
FOLDER = "convtune_kernels"

#: (source, file name, name expression, options) -> (lowered name, cubin).
Compiler = Callable[[str, str, str, tuple[str, ...]], tuple[str, bytes]]


def cache_dir() -> Path:
    """The folder of the cached binaries, inside CuPy's kernel cache directory."""
    # CuPy's own default, spelled as CuPy spells it: Path.home() raised where there is no
    # home (no $HOME, a container's UID without a passwd entry), failing every kernel build.
    root = os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache")
    return Path(root) / FOLDER


def binary(source: str, filename: str, name_expression: str, options: tuple[str, ...],
           toolchain: str, compile_: Compiler, folder: Path) -> tuple[str, bytes]:
    """(lowered name, cubin) of `name_expression`: from `folder` if a compile of the same
    inputs by the same `toolchain` is there, else compiled by `compile_` and stored."""
    key = hashlib.sha256("\0".join((toolchain, *options, filename, name_expression, source))
                         .encode()).hexdigest()
    path = folder / f"{key}.cubin"
    try:
        found = _read(path.read_bytes())
        if found is not None:
            return found
    except OSError:
        pass  # absent or unreadable: compile
    lowered_name, cubin = compile_(source, filename, name_expression, options)
    # Per process and thread: two devices' threads may compile one instance at once.
    partial = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    _sweep(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        name = lowered_name.encode()
        partial.write_bytes(b"\0".join((name, _digest(name, cubin), cubin)))
        os.replace(partial, path)
    except OSError:
        # A full disk may leave part of the file: nothing else would ever remove it.
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
    return lowered_name, cubin


#: Age past which a temporary of the cache is a crashed writer's (a write takes ms).
STALE_S = 3600.0


def _sweep(folder: Path) -> None:
    """Remove temporaries a killed process left (kill -9 mid-write: 0.5 MB each, kept for
    good before; a review of the state on disk, 2026-11-30)."""
    with contextlib.suppress(OSError):
        now = time.time()
        for stale in folder.glob("*.cubin.*.tmp"):
            if now - stale.stat().st_mtime > STALE_S:
                stale.unlink(missing_ok=True)


def _digest(name: bytes, cubin: bytes) -> bytes:
    """The digest of an entry: the lowered name with the cubin (a damaged name, not covered
    once, was read as valid and failed every later get_function)."""
    return hashlib.sha256(name + b"\0" + cubin).hexdigest().encode()


def _read(entry: bytes) -> tuple[str, bytes] | None:
    """(lowered name, cubin) of a cache file's bytes; None for a damaged or foreign one."""
    parts = entry.split(b"\0", 2)
    if len(parts) != 3 or not parts[0] or not parts[2] or _digest(parts[0], parts[2]) != parts[1]:
        return None
    try:
        return parts[0].decode(), parts[2]
    except UnicodeDecodeError:
        return None


def nvrtc_compile(source: str, filename: str, name_expression: str,
                  options: tuple[str, ...], nvrtc: Any = None) -> tuple[str, bytes]:
    """One NVRTC compile of `name_expression` to a cubin; RuntimeError with NVRTC's log.
    `nvrtc`: a module with CuPy's NVRTC calls (default CuPy's own; benchmarks/bench_compile
    passes the nvidia-cuda-nvrtc wheel's where CuPy is absent)."""
    if nvrtc is None:
        from cupy_backends.cuda.libs import nvrtc as cupy_nvrtc

        nvrtc = cupy_nvrtc
    program = nvrtc.createProgram(source, filename, (), ())
    try:
        nvrtc.addNameExpression(program, name_expression)
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError as exc:
            raise RuntimeError(f"NVRTC failed on {name_expression} ({' '.join(options)}): "
                               f"{nvrtc.getProgramLog(program)}") from exc
        return nvrtc.getLoweredName(program, name_expression), nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)


@functools.cache
def nvrtc_version() -> str:
    """The NVRTC that compiles here, as part of the cache key: its version, and the library
    file this process maps (path, size, time), which tells two builds of one version apart
    (a patch release keeps getVersion's major.minor, and may compile differently)."""
    from cupy_backends.cuda.libs import nvrtc

    return toolchain(nvrtc.getVersion())  # the library is loaded by now


def toolchain(version: tuple[int, int], maps: Path = Path("/proc/self/maps")) -> str:
    """The cache key's name of NVRTC `version` (major, minor) and the library file of that
    major version this process maps. By soname: PyTorch may map an NVRTC of its own, of
    another CUDA major, at a lower address than CuPy's (a cu12 torch beside CUDA 13)."""
    major, minor = version
    return " ".join(("nvrtc", f"{major}.{minor}", *mapped_library(f"libnvrtc.so.{major}", maps)))


def mapped_library(prefix: str, maps: Path = Path("/proc/self/maps")) -> tuple[str, ...]:
    """(path, size, modification time) of the first library this process maps whose file
    name starts with `prefix`; () where that cannot be read (not Linux, or not mapped).
    /proc/self/maps is in address order, not load order: `prefix` should name one library."""
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return ()
    for line in lines:
        fields = line.split(None, 5)  # address perms offset dev inode path
        if len(fields) == 6 and os.path.basename(fields[5]).startswith(prefix):
            try:
                stat = os.stat(fields[5])
            except OSError:
                continue
            return fields[5], str(stat.st_size), str(stat.st_mtime_ns)
    return ()
