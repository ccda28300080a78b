"""CUDA kernel plumbing: kernel sources, NVRTC compilation, launch arguments.

Nothing here imports CuPy at module import: `require_cupy()` does, when a kernel is first
needed, and raises a RuntimeError that says why when it cannot. Each kernel instance is
compiled by NVRTC with the options and for the architecture CuPy's RawModule would use on
the current device (`nvrtc_options`), kept in _binaries' disk cache, and loaded as a CuPy
Function, once per (device, file, name expression) and process: later processes read the
binary instead of compiling (CuPy's own cache is never read for name expressions).
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np

from algorithms.cuda._lanes import relaxed
from algorithms.problem import ConvProblem


def _kernels_dir() -> Path:
    here = Path(__file__).resolve().parent
    # `pip install .` ships the repository's kernels/ folder inside this package (see
    # pyproject.toml: a top-level `kernels` package would collide with PyPI's `kernels`);
    # a checkout or an editable install reads the folder itself.
    shipped = here / "kernels"
    return shipped if shipped.is_dir() else here.parents[1] / "kernels"


#: Where the CUDA sources live: the one locator of the repository's kernels/ folder.
KERNELS_DIR = _kernels_dir()

#: Our NVRTC options (CuPy's RawModule is given these where it still compiles: _build).
COMPILE_OPTIONS: tuple[str, ...] = ("-std=c++17",)

#: Kernel files built for one architecture's feature set (PTX "a" targets): wgmma exists only
#: on sm_90a, which CuPy's RawModule cannot target (it appends the plain -arch=sm_90 of the
#: device); these run only on a device of that compute capability.
FEATURE_ARCH: dict[str, str] = {"implicit_gemm_wgmma.cu": "sm_90a",
                                  "implicit_gemm_wgmma_nchw.cu": "sm_90a"}
#: The NVRTC options besides the architecture of a FEATURE_ARCH file: ours and CuPy's
#: --device-as-default-execution-space (these files never went through RawModule, and their
#: measured binaries were built without its -ftz=true).
NVRTC_OPTIONS: tuple[str, ...] = (*COMPILE_OPTIONS, "--device-as-default-execution-space")
#: The options besides the architecture of every other file: those CuPy's RawModule compiled
#: them with (cupy/cuda/compiler.py, CuPy 13-14), so that the binaries are the measured ones.
RAWMODULE_OPTIONS: tuple[str, ...] = (*COMPILE_OPTIONS, "-ftz=true",
                                      "--device-as-default-execution-space")


def target_arch(filename: str, arch: str) -> str:
    """The architecture kernels/`filename` is built for when others are built for `arch`."""
    return FEATURE_ARCH.get(filename, arch)


def nvrtc_options(filename: str, arch: str) -> tuple[str, ...]:
    """NVRTC's options for kernels/`filename` where the device's kernels are built for
    `arch` (sm_XY), the architecture included."""
    base = NVRTC_OPTIONS if filename in FEATURE_ARCH else RAWMODULE_OPTIONS
    return (*base, f"-arch={target_arch(filename, arch)}")


#: The C++ storage type of each problem dtype (half_t is defined in kernels/common.cuh).
CTYPES: dict[str, str] = {"float16": "half_t", "float32": "float", "float64": "double"}

#: Kernels index with 32-bit ints: every tensor and scratch buffer must stay below this.
INT32_LIMIT = 2**31 - 1

#: Most dynamic shared memory a block may take without an opt-in attribute.
DEFAULT_SMEM_LIMIT = 48 * 1024

#: A kernel file's #include of one of kernels/' own headers (common.cuh, wgmma.cuh).
_INCLUDE = re.compile(r'^#include "(\w+\.cuh)"$', re.M)
_lock = threading.Lock()
_kernels: dict[tuple[int, str, str], Any] = {}
# One lock per (device, file, name expression): two threads asking for one kernel compile it
# once, and threads asking for different ones compile them at once (NVRTC runs without the
# GIL: algorithms.cuda._ahead compiles a tuning's kernels in parallel that way).
_instance_locks: dict[tuple[int, str, str], threading.Lock] = {}


def kernel_files() -> list[Path]:
    """Every CUDA source and header the kernels are built from, in name order."""
    return sorted([*KERNELS_DIR.glob("*.cu"), *KERNELS_DIR.glob("*.cuh")])


def _snapshot() -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8") for path in kernel_files()}


#: Every kernel source and header as this process found it at import: what it compiles and
#: what its implementation hash covers. Read at the first compile instead, a kernel changed
#: on disk meanwhile (an upgrade under a running server) ran, and was stored, as the code
#: the hash taken before it described (a review of keys, 2026-11-30).
SOURCES = _snapshot()


def kernel_sources_hash() -> str:
    """sha256 of every kernel source and header this process compiles (names and text, in
    name order: SOURCES)."""
    digest = hashlib.sha256()
    for name, text in SOURCES.items():
        digest.update(name.encode())
        digest.update(text.encode("utf-8"))
    return digest.hexdigest()


def require_cupy() -> Any:
    """The cupy module, or a RuntimeError saying why the CUDA backend cannot run."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA install CuPy cannot load
        raise RuntimeError(
            f"the CUDA backend needs CuPy (pip install 'convtune[cuda]'): {exc}"
        ) from exc
    return cupy


def kernel_source(filename: str) -> str:
    """The text of kernels/`filename` with each of kernels/' headers it includes pasted over
    its #include line.

    Pasting (rather than `-I`) makes the headers part of the text CuPy hashes for its
    on-disk compile cache, so editing a header recompiles every kernel that includes it.
    """
    kept = SOURCES.get(filename)  # else a test's own kernels, by absolute path
    return paste_headers(kept if kept is not None else
                         (KERNELS_DIR / filename).read_text(encoding="utf-8"))


def paste_headers(text: str) -> str:
    """CUDA source `text` with each of kernels/' headers it includes pasted over its
    #include line (kernel_source's rule; also for test kernels built on those headers)."""

    def header(match: re.Match[str]) -> str:
        return SOURCES[match.group(1)].replace("#pragma once", "")

    return _INCLUDE.sub(header, text)


@functools.cache
def _cached_source(filename: str) -> str:
    # Read once per process: `run` sits inside timed regions, so no file I/O per call.
    return kernel_source(filename)


def get_kernel(filename: str, name_expression: str) -> Any:
    """The compiled kernel `name_expression` of kernels/`filename` on the current device.

    Built on first use per device (read from the disk cache, or compiled) and kept for the
    process; later calls are a dict lookup (they sit inside timed regions).
    """
    cupy = require_cupy()
    key = (cupy.cuda.runtime.getDevice(), filename, name_expression)
    kernel = _kernels.get(key)
    if kernel is None:
        with _instance_lock(key):
            kernel = _kernels.get(key)
            if kernel is None:
                # A plan's first run may come inside a CUDA graph capture (one seen first
                # there plans from the store): loading a module allocates device memory.
                with relaxed():
                    kernel = _build(cupy, filename, name_expression)
                _kernels[key] = kernel
    return kernel


def _build(cupy: Any, filename: str, name_expression: str) -> Any:
    """`name_expression` of kernels/`filename` on the current device: a Function loaded from
    _binaries' cubin, or CuPy's RawKernel where CuPy would build PTX (_device_arch)."""
    arch = _feature_arch(cupy, filename) if filename in FEATURE_ARCH else _device_arch()
    if arch is None:
        module = cupy.RawModule(code=_cached_source(filename), options=COMPILE_OPTIONS,
                                name_expressions=[name_expression])
        return module.get_function(name_expression)
    from cupy.cuda import function

    from algorithms.cuda import _binaries

    lowered, cubin = _binaries.binary(
        _cached_source(filename), filename, name_expression, nvrtc_options(filename, arch),
        _binaries.nvrtc_version(), _binaries.nvrtc_compile, _binaries.cache_dir())
    module = function.Module()
    module.load(cubin)
    return module.get_function(lowered)  # the Function holds its Module


def _device_arch() -> str | None:
    """The sm_XY CuPy's RawModule builds cubins for on the current device (the device's
    compute capability, capped at what NVRTC knows); None where CuPy would build PTX instead
    (CUPY_COMPILE_WITH_PTX) or cannot say (a CuPy without this private helper)."""
    try:
        from cupy.cuda import compiler

        option, kind = compiler._get_arch_for_options_for_nvrtc()
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    if kind != "cubin" or not str(option).startswith("-arch=sm_"):
        return None
    return str(option).removeprefix("-arch=")


def _instance_lock(key: tuple[int, str, str]) -> threading.Lock:
    with _lock:
        return _instance_locks.setdefault(key, threading.Lock())


def is_loaded(filename: str, name_expression: str) -> bool:
    """Whether get_kernel has `name_expression` of kernels/`filename` for the current device
    already (a dict lookup: no compile, no disk)."""
    cupy = require_cupy()
    return (cupy.cuda.runtime.getDevice(), filename, name_expression) in _kernels


def _feature_arch(cupy: Any, filename: str) -> str:
    """FEATURE_ARCH[filename], or a RuntimeError on a device of another compute capability
    (before anything is compiled)."""
    arch = FEATURE_ARCH[filename]
    capability = str(cupy.cuda.Device().compute_capability)
    if capability != arch.removeprefix("sm_").rstrip("a"):
        raise RuntimeError(f"{filename} needs a GPU of compute capability "
                           f"{arch.removeprefix('sm_')} ({arch}); this one is {capability}")
    return arch


# CUfunction_attribute CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (cuda.h).
MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

# id(kernel) -> (the kernel, the dynamic shared memory it may take); holding the kernel
# keeps its id from being reused by another object.
_opted_in: dict[int, tuple[Any, int]] = {}


def allow_shared_memory(kernel: Any, nbytes: int) -> None:
    """Let `kernel` take `nbytes` of dynamic shared memory: beyond DEFAULT_SMEM_LIMIT a
    launch fails unless the function opted in (cuFuncSetAttribute, through CuPy's
    `RawKernel.max_dynamic_shared_size_bytes` or directly). Once per kernel and size: runs
    sit inside timed regions, where a driver call each time would cost."""
    if nbytes <= DEFAULT_SMEM_LIMIT:
        return
    found = _opted_in.get(id(kernel))
    if found is not None and found[0] is kernel and found[1] >= nbytes:
        return
    try:
        _opt_in(kernel, nbytes)
    except Exception as exc:
        if not made_context_current(exc):
            raise
        _opt_in(kernel, nbytes)
    _opted_in[id(kernel)] = (kernel, nbytes)


def _opt_in(kernel: Any, nbytes: int) -> None:
    try:
        kernel.max_dynamic_shared_size_bytes = nbytes
    except AttributeError:
        # A plain cupy.cuda.function.Function (what _build loads from a cubin) lacks
        # RawKernel's property: the driver call behind it.
        _func_set_attribute(kernel.ptr, MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)


#: CUresult CUDA_ERROR_INVALID_CONTEXT: the calling thread has no current CUDA context.
INVALID_CONTEXT = 201


def made_context_current(refused: Exception) -> bool:
    """Whether `refused` is the driver refusing a call for want of a current context on
    this thread, now made current, so that the call may go again.

    Why: our driver calls (prepared launches, the shared-memory opt-in) skip what CuPy's
    own make first (`_ensure_context`), and a thread that has made no CUDA runtime call yet
    (a server's worker thread, a DataLoader's) has no context current."""
    if getattr(refused, "status", None) != INVALID_CONTEXT:
        return False
    make_context_current()
    return True


def _runtime_call() -> None:
    # Any runtime API call makes the current device's primary context current on the
    # calling thread; the driver API never does by itself.
    require_cupy().cuda.runtime.memGetInfo()


#: What made_context_current calls; tests replace it.
make_context_current: Callable[[], None] = _runtime_call


def ensure_context() -> None:
    """Make a context current on this thread unless one is: a driver query first, which is
    allowed while a stream captures a CUDA graph, where a runtime call may not be."""
    if not require_cupy().cuda.driver.ctxGetCurrent():
        make_context_current()


def _func_set_attribute(function: int, attribute: int, value: int) -> None:
    # cuFuncSetAttribute on a CUfunction handle; tests/cuda_emu replaces it.
    from cupy.cuda import driver

    driver.funcSetAttribute(function, attribute, value)


def fastdiv(d: int) -> tuple[int, int]:
    """(mul, shift) with n // d == (umulhi(n, mul) + n) >> shift for 0 <= n, d < 2**31.

    The device side is `fast_div` in kernels/common.cuh.
    """
    if not 1 <= d <= INT32_LIMIT:
        raise ValueError(f"fastdiv divisor must be in [1, 2**31), got {d}")
    shift = 0
    while (1 << shift) < d:
        shift += 1
    mul = ((1 << 32) * ((1 << shift) - d)) // d + 1
    return mul, shift


@functools.lru_cache(maxsize=4096)  # asked on every launch, the same for a given problem
def fastdiv_args(*divisors: int) -> tuple[np.uint32, ...]:
    """Kernel arguments (mul, shift) per divisor, flattened, as uint32 scalars."""
    out: list[np.uint32] = []
    for d in divisors:
        mul, shift = fastdiv(d)
        out += [np.uint32(mul), np.uint32(shift)]
    return tuple(out)


#: kernels/common.cuh's ConvShape: sixteen int32 fields, in its order.
CONV_SHAPE = np.dtype([(name, np.int32) for name in (
    "N", "C", "H", "W", "K", "R", "S", "P", "Q", "pad_h", "pad_w", "str_h", "str_w", "dil_h",
    "dil_w", "groups")])


def _shape_values(problem: ConvProblem) -> tuple[int, ...]:
    out_h, out_w = problem.out_hw
    return (problem.n, problem.c, problem.h, problem.w, problem.k, problem.r, problem.s,
            out_h, out_w, *problem.pad, *problem.stride, *problem.dilation, problem.groups)


@functools.lru_cache(maxsize=4096)  # asked on every launch, the same for a given problem
def shape_args(problem: ConvProblem) -> tuple[np.int32, ...]:
    """The CONV_SHAPE_PARAMS kernel arguments of kernels/common.cuh, in its order."""
    return tuple(np.int32(v) for v in _shape_values(problem))


@functools.lru_cache(maxsize=4096)  # asked on every launch, the same for a given problem
def shape_struct(problem: ConvProblem) -> tuple[np.void]:
    """The CONV_SHAPE_STRUCT kernel argument of kernels/common.cuh: one ConvShape (a NumPy
    structured scalar, which CuPy passes as the C structure of the same layout), as a
    1-tuple so that launches splice it where shape_args' ints went."""
    return (cast(np.void, np.array(_shape_values(problem), dtype=CONV_SHAPE)[()]),)


def tensors_fit_int32(problem: ConvProblem, *extra_elements: int) -> bool:
    """Whether x, w, y and any scratch buffers all have fewer than 2**31 elements."""
    sizes = [int(np.prod(s)) for s in (problem.input_shape, problem.filter_shape,
                                        problem.output_shape)]
    return max([*sizes, *extra_elements]) <= INT32_LIMIT


def grid_stride_blocks(total: int, threads: int = 256, cap: int = 65536) -> int:
    """Blocks for a grid-stride loop over `total` elements."""
    return max(1, min(cap, -(-total // threads)))


def require_aligned(what: str, array: Any, alignment: int) -> None:
    """ValueError unless `array`'s device address is a multiple of `alignment` bytes.

    A misaligned access is a hard CUDA error that poisons the context; a host-side check
    turns a caller-supplied misaligned buffer (a sliced workspace, say) into a clear error.
    CuPy's own allocations are 256-byte aligned, so the tuner and `convolve` always pass.
    """
    ptr = int(array.data.ptr)
    if ptr % alignment:
        raise ValueError(
            f"{what} at device address {ptr:#x} is not {alignment}-byte aligned"
        )


def ceil_div(a: int, b: int) -> int:
    """⌈a / b⌉ for positive ints."""
    return -(-a // b)
