"""Binaries of the kernels built for one architecture's feature set (_loader.FEATURE_ARCH,
e.g. wgmma on sm_90a): NVRTC compiles them, and a disk cache keeps them between processes.

CuPy's RawModule keeps its compiles in CuPy's disk cache, but it cannot target "a"
architectures, so these go through NVRTC directly (_loader._feature_kernel). Without a cache
of their own every process paid every instance's compile again: on a GPU machine, each test
worker and each benchmark step, a second or more per instance. The cache lives in CuPy's
kernel cache directory (CUPY_CACHE_DIR, default ~/.cupy/kernel_cache, per CuPy's
documentation), in a folder of its own. A file is keyed by everything that shapes the
binary (the NVRTC version, the options, the file name, the name expression and the source
text), written whole to a temporary name and renamed, so a reader sees a complete file or
none. An unwritable cache costs a compile per process, nothing else.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: (source, file name, name expression, options) -> (lowered name, cubin).
Compiler = Callable[[str, str, str, tuple[str, ...]], tuple[str, bytes]]


def cache_dir() -> Path:
    """The folder of the cached binaries, inside CuPy's kernel cache directory."""
    root = os.environ.get("CUPY_CACHE_DIR") or str(Path.home() / ".cupy" / "kernel_cache")
    return Path(root) / "convtune_feature"


def binary(source: str, filename: str, name_expression: str, options: tuple[str, ...],
           toolchain: str, compile_: Compiler, folder: Path) -> tuple[str, bytes]:
    """(lowered name, cubin) of `name_expression`: from `folder` if a compile of the same
    inputs by the same `toolchain` is there, else compiled by `compile_` and stored."""
    key = hashlib.sha256("\0".join((toolchain, *options, filename, name_expression, source))
                         .encode()).hexdigest()
    path = folder / f"{key}.cubin"
    try:
        lowered, sep, cubin = path.read_bytes().partition(b"\0")
        if sep and lowered and cubin:
            return lowered.decode(), cubin
    except (OSError, UnicodeDecodeError):
        pass  # absent or unreadable: compile
    lowered_name, cubin = compile_(source, filename, name_expression, options)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # Per process and thread: two devices' threads may compile one instance at once.
        partial = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        partial.write_bytes(lowered_name.encode() + b"\0" + cubin)
        os.replace(partial, path)
    except OSError:
        pass
    return lowered_name, cubin


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


def nvrtc_version() -> str:
    """The NVRTC that compiles here, as part of the cache key."""
    from cupy_backends.cuda.libs import nvrtc

    return "nvrtc " + ".".join(map(str, nvrtc.getVersion()))
