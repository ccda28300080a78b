"""Compile kernel template instances of kernels/*.cu for the CPU execution model.

The source is translate.py's translation unit (`unit_source`: the kernel file with its
CUDA-only constructs rewritten into calls of runtime.h). The library is built with
AddressSanitizer and UBSan (bounds, alignment, signed overflow, shifts), so it must be loaded
into a process started with libasan preloaded (`sanitizer_env`). Built libraries are cached
on disk, keyed by everything that goes into them. One library holds a group of a file's
instances (`groups`), as one CuPy module holds every instance of a file on a GPU.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.cuda_emu.translate import RUNTIME, unit_source

HERE = Path(__file__).resolve().parent
#: Headers runtime.h includes (part of every library's cache key).
HEADERS = (RUNTIME, HERE / "warp.h")
CXX = shutil.which("g++")
# -g1 (line tables, no variable info): sanitizer stacks still name file and line, and the
# build takes a quarter less time than with -g.
FLAGS = (
    "-std=c++17", "-O1", "-g1", "-fPIC", "-shared", "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-Wall", "-Wno-unknown-pragmas",
)
CACHE = Path(tempfile.gettempdir()) / f"convtune-cuda-emu-{os.getuid()}"


def missing_tools() -> str | None:
    """Why emulated kernels cannot be built or run here, or None."""
    if platform.machine() != "x86_64":
        return f"the fiber switch in runtime.h is x86-64 assembly, this is {platform.machine()}"
    if CXX is None:
        return "g++ is not on PATH"
    if not Path(asan_library()).is_file():
        return "g++ has no AddressSanitizer runtime (libasan.so)"
    return None


@functools.cache
def asan_library() -> str:
    """The AddressSanitizer runtime that must be preloaded into an emulating process."""
    assert CXX is not None
    out = subprocess.run([CXX, "-print-file-name=libasan.so"], capture_output=True, text=True)
    return out.stdout.strip()


def sanitizer_env() -> dict[str, str]:
    """Environment for a Python process that loads emulated kernels."""
    env = dict(os.environ)
    env["LD_PRELOAD"] = asan_library()
    # Python itself leaks by design; stop on the first real error with a stack.
    env["ASAN_OPTIONS"] = "detect_leaks=0:halt_on_error=1:abort_on_error=1"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    return env


#: Instances per translation unit: big enough to share the runtime's compile time, small
#: enough that a file's groups spread over the cores.
GROUP_SIZE = 12


def groups(instances: Iterable[str], size: int = GROUP_SIZE) -> list[tuple[str, ...]]:
    """`instances` (one file's name expressions) in sorted groups of at most `size`.

    Deterministic, so that a process that only knows the instance list (a case runner)
    finds the library another process built.
    """
    names = sorted(set(instances))
    return [tuple(names[i:i + size]) for i in range(0, len(names), size)]


def group_of(name_expression: str, instances: Iterable[str]) -> tuple[str, ...]:
    """The group of `instances` that holds `name_expression`, or it alone if none does."""
    for group in groups(instances):
        if name_expression in group:
            return group
    return (name_expression,)


@functools.cache
def _headers() -> tuple[str, ...]:
    return tuple(h.read_text(encoding="utf-8") for h in HEADERS)


def build(filename: str, group: tuple[str, ...]) -> Path:
    """The cached shared library for a group of one file's kernel instances, compiled if needed."""
    if CXX is None:
        raise RuntimeError("g++ is not on PATH")
    source = unit_source(filename, group)
    key = hashlib.sha256("\0".join([source, *_headers(), CXX, *FLAGS]).encode()).hexdigest()[:24]
    library = CACHE / f"{key}.so"
    if library.is_file():
        return library
    CACHE.mkdir(parents=True, exist_ok=True)
    src = CACHE / f"{key}.cpp"  # kept: sanitizer reports point into it
    with tempfile.TemporaryDirectory(dir=CACHE) as work:
        tmp_src, tmp_lib = Path(work) / "kernel.cpp", Path(work) / "kernel.so"
        tmp_src.write_text(source, encoding="utf-8")
        os.replace(tmp_src, src)
        done = subprocess.run([CXX, *FLAGS, str(src), "-o", str(tmp_lib)], capture_output=True,
                              text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"g++ failed on {', '.join(group)}:\n{done.stderr[-4000:]}")
        os.replace(tmp_lib, library)  # atomic: concurrent builders never see half a file
    return library


def build_all(files: Mapping[str, Iterable[str]], jobs: int | None = None) -> None:
    """Build every group of every file's instances ({file: name expressions}) in parallel."""
    units = [(f, g) for f, names in files.items() for g in groups(names)]
    # The largest groups first, so that no core is left with a big one at the end.
    units.sort(key=lambda unit: -len(unit[1]))
    with ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
        list(pool.map(lambda unit: build(*unit), units))
