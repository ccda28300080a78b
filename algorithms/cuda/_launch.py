"""Kernel launches prepared once: a parameter buffer built when a launch is first worked out,
whose per-run slots (operand addresses, a flag) each run fills before cuLaunchKernel.

Why: a CuPy kernel call converts every argument anew, about 6 us plus 0.36 us per argument
on the H200's host (BENCHMARKS.md, "launch_cost"): 11 us for a tensor-core kernel's 14, more
than the kernel on small layers. The launches of a run are fixed per (problem, config) but
for their operands, so the buffer is built once and a run writes only its slots, then calls
the driver through CuPy's `driver.launchKernel` (cuLaunchKernel with a kernelParams array).

A kernel object offers this path when it says how to launch it from a buffer: CuPy's
RawKernel and Function (through the driver), or tests/cuda_emu's emulated kernels (which
read the very same buffer, so the emulated cases check its layout against each kernel's
parameters). Test stand-ins that only record calls do not: `prepare` returns None for them,
and callers launch the old way. CONVTUNE_PREPARED_LAUNCH=0 turns the path off everywhere.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from algorithms.cuda import _loader, _recording
from algorithms.cuda._loader import allow_shared_memory

ENV = "CONVTUNE_PREPARED_LAUNCH"


@dataclass(frozen=True)
class Slot:
    """A parameter a run fills: its C type."""

    ctype: type[ctypes._SimpleCData[Any]]
    name: str


#: An operand's device address, and a 32-bit flag (paired stores), filled per run.
POINTER = Slot(ctypes.c_void_p, "pointer")
INT32 = Slot(ctypes.c_int32, "int32")

#: The C type of each fixed scalar type the kernels take (what CuPy would pass).
_FIXED: dict[type, type[ctypes._SimpleCData[Any]]] = {
    np.int32: ctypes.c_int32, np.uint32: ctypes.c_uint32, np.uint64: ctypes.c_uint64,
    np.float32: ctypes.c_float, np.float64: ctypes.c_double,
}
#: The emulator's signature letter of each C type ("p" pointers, "S" structures).
_LETTERS = {ctypes.c_void_p: "p", ctypes.c_int32: "i", ctypes.c_uint32: "u",
            ctypes.c_uint64: "U", ctypes.c_float: "f", ctypes.c_double: "d"}

LaunchKernel = Callable[..., None]


class Address:
    """A device address where an array would go: `.data.ptr` reads it, as of a CuPy array.
    Workspace regions go to kernels as these, without a view; a kernel's own call gets the
    address as a NumPy uint64, as CuPy passes a pointer-sized integer."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    @property
    def data(self) -> Address:
        return self


def current_stream() -> int:
    """The handle of CuPy's current stream (the caller's: runtime.caller_stream set it)."""
    return _stream()


def _cupy_stream() -> int:
    import cupy

    return int(cupy.cuda.get_current_stream().ptr)


#: What current_stream (and `enqueue`) asks; tests/cuda_emu replaces it (the emulator has
#: one stream).
_stream: Callable[[], int] = _cupy_stream


def entry(kernel: Any) -> tuple[int, LaunchKernel] | None:
    """(function handle, cuLaunchKernel-like callable) of `kernel`, or None when it can only
    be called (a test stand-in) or the path is switched off."""
    if os.environ.get(ENV, "1") == "0":
        return None
    emulated = getattr(kernel, "launch_kernel", None)
    if emulated is not None:
        return int(kernel.ptr), emulated
    if _is_cupy(kernel):
        from cupy.cuda import driver

        launch_kernel = getattr(driver, "launchKernel", None)
        if launch_kernel is None:  # a CuPy without it: its own call, as before
            return None
        # A RawKernel's Function on the current device (get_kernel caches per device), or
        # the Function itself (the NVRTC-built sm_90a kernels).
        function = getattr(kernel, "kernel", kernel)
        return int(function.ptr), launch_kernel
    return None


def _is_cupy(kernel: Any) -> bool:
    return type(kernel).__module__.partition(".")[0] == "cupy"


class Launch:
    """One kernel launch with every argument fixed but its Slots: `launch(stream, *values)`
    fills them in order and enqueues. Safe to share between threads (a lock covers the
    fill and the launch, which copies the parameters)."""

    def __init__(self, kernel: Any, how: tuple[int, LaunchKernel], grid: Sequence[int],
                 block: Sequence[int], args: Sequence[Any], shared_mem: int = 0) -> None:
        function, self._launch_kernel = how
        # Every slot is a 64-bit word of one array, so that a run fills them all with one
        # slice assignment; a 32-bit parameter reads the word's low half (little-endian,
        # as every CUDA host is), which holds its two's complement.
        self._slot_words = (ctypes.c_uint64 * sum(isinstance(a, Slot) for a in args))()
        fixed: list[Any] = []  # the fixed values' ctypes objects: the buffer points in them
        addresses: list[int] = []
        declared: list[tuple[str, int]] = []  # (letter, bytes) per parameter
        for arg in args:
            if isinstance(arg, Slot):
                word = len(declared) - len(fixed)  # the slots before this one
                addresses.append(ctypes.addressof(self._slot_words) + 8 * word)
                declared.append((_LETTERS[arg.ctype], ctypes.sizeof(arg.ctype)))
                continue
            if isinstance(arg, np.void):  # a structure by value (ConvShape): its bytes
                value: Any = ctypes.create_string_buffer(arg.tobytes(), arg.nbytes)
                declared.append(("S", arg.nbytes))
            elif type(arg) in _FIXED:
                value = _FIXED[type(arg)](arg)
                declared.append((_LETTERS[type(value)], ctypes.sizeof(value)))
            else:  # a Python int would be ambiguous: 32 or 64 bits
                raise TypeError(f"launch argument {arg!r} is not a Slot, structure or "
                                f"NumPy scalar")
            fixed.append(value)
            addresses.append(ctypes.addressof(value))
        _check_parameters(kernel, declared, function if _is_cupy(kernel) else 0)
        self._fixed = fixed
        self._params = (ctypes.c_void_p * max(1, len(addresses)))(*addresses)
        self._head = (function, *(*grid, 1, 1)[:3], *(*block, 1, 1)[:3], shared_mem)
        self._params_at = ctypes.addressof(self._params)
        self._lock = threading.Lock()

    def __call__(self, stream: int, *values: int) -> None:
        """Fill the slots with `values` (addresses, flags) and enqueue on `stream`."""
        with self._lock:
            # One value per slot, or ValueError (ctypes stores a negative one's bits).
            self._slot_words[:] = values  # type: ignore[call-overload]  # typeshed: one value only
            try:
                self._launch_kernel(*self._head, stream, self._params_at, 0)
            except Exception as exc:
                # CuPy's own launches make the thread's context current first; ours only
                # when refused, which costs the usual call nothing.
                if not _loader.made_context_current(exc):
                    raise
                self._launch_kernel(*self._head, stream, self._params_at, 0)


def prepare(kernel: Any, grid: Sequence[int], block: Sequence[int], args: Sequence[Any],
            shared_mem: int = 0) -> Launch | None:
    """A Launch of `kernel`, or None where it offers no launch from a buffer (`entry`)."""
    how = entry(kernel)
    return None if how is None else Launch(kernel, how, grid, block, args, shared_mem)


def _check_parameters(kernel: Any, declared: Sequence[tuple[str, int]],
                      function: int = 0) -> None:
    """The buffer must match the kernel's parameters one for one, where they are known: a
    wrong size shifts every later parameter on a GPU, silently. Known from the emulator's
    signature and sizes, or on a GPU from the driver (`driver_parameter_sizes`)."""
    name = getattr(kernel, "name", None) or getattr(kernel, "__name__", kernel)
    signature, sizes = getattr(kernel, "signature", None), getattr(kernel, "sizes", None)
    if signature is not None and sizes is not None:
        want = list(zip(signature, sizes, strict=True))
        if list(declared) != want:
            raise TypeError(f"{name}: parameters {list(declared)}, the kernel takes {want}")
        return
    found = driver_parameter_sizes(function) if function else None
    if found is not None and found != [size for _, size in declared]:
        raise TypeError(f"{name}: parameter sizes {[size for _, size in declared]}, the "
                        f"driver says the kernel takes {found}")


def driver_parameter_sizes(function: int) -> list[int] | None:
    """The byte size of each parameter of CUfunction `function`, from the driver
    (cuFuncGetParamInfo, CUDA 12.4+), or None where it cannot say (an older driver, no
    libcuda): checked once per prepared launch, so a buffer that does not fit a kernel fails
    loudly on its first run instead of corrupting it."""
    get = _param_info()
    if get is None:
        return None
    offset, size = ctypes.c_size_t(), ctypes.c_size_t()
    sizes: list[int] = []
    while get(ctypes.c_void_p(function), ctypes.c_size_t(len(sizes)), ctypes.byref(offset),
              ctypes.byref(size)) == 0:
        sizes.append(size.value)
    return sizes or None  # none at all: the call itself failed, so nothing is known


@functools.cache
def _param_info() -> Callable[..., int] | None:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        get = lib.cuFuncGetParamInfo
    except (OSError, AttributeError):
        return None
    get.restype = ctypes.c_int
    return cast(Callable[..., int], get)


@dataclass(frozen=True)
class KernelLaunch:
    """One launch of a kernel worked out once, per (problem, config) where callers cache
    it: the kernel's file and name expression, grid, block, dynamic shared memory, and its
    arguments, Slots where each run's operands go.

    `bind(get_kernel)` gives the Launch of the kernel that `get_kernel` returns (prepared
    once per kernel object: kernels are per device, and tests swap them), or None where
    the kernel offers none; `call` launches the old way, with the run's arrays or Addresses
    (and int32 flags) in the Slots' places. `enqueue` picks between the two.
    """

    file: str
    name: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: tuple[Any, ...]
    shared_mem: int = 0
    #: id(kernel) -> (kernel, its Launch or None)
    prepared: dict[int, tuple[Any, Launch | None]] = field(
        default_factory=dict, compare=False, repr=False)

    def bind(self, get_kernel: Callable[[str, str], Any]) -> Launch | None:
        """The prepared Launch of this device's kernel, or None (`prepare`)."""
        kernel = get_kernel(self.file, self.name)
        found = self.prepared.get(id(kernel))
        if found is None or found[0] is not kernel:
            # The opt-in to more shared memory is the function's, kept: set it once here.
            allow_shared_memory(kernel, self.shared_mem)
            found = self.prepared[id(kernel)] = (
                kernel, prepare(kernel, self.grid, self.block, self.args, self.shared_mem))
        return found[1]

    def call(self, get_kernel: Callable[[str, str], Any], *operands: Any) -> None:
        """Launch through the kernel's own call, `operands` filling the Slots in order."""
        values = iter(operands)
        args = tuple(_np_value(arg, next(values)) if isinstance(arg, Slot) else arg
                     for arg in self.args)
        kernel = get_kernel(self.file, self.name)
        allow_shared_memory(kernel, self.shared_mem)  # a no-op within the default 48 KiB
        kernel(self.grid, self.block, args, shared_mem=self.shared_mem)


def _np_value(slot: Slot, value: Any) -> Any:
    """A Slot's value as a kernel call takes it: flags as int32, an Address as the 64-bit
    integer CuPy passes in a pointer's place, arrays as they are."""
    if slot is INT32:
        return np.int32(value)
    return np.uint64(value.ptr) if isinstance(value, Address) else value


def enqueue(launch: KernelLaunch, get_kernel: Callable[[str, str], Any],
            *operands: Any) -> None:
    """Launch `launch` on the current stream with `operands` (arrays or Addresses for
    pointers, ints for flags): prepared where the kernel offers it, else through its own
    call."""
    taking = _recording.active()  # a dry run (_replay): write the launch down, make none
    if taking is not None and taking.names_only:  # before bind, which would compile it
        taking.kernels.append((launch.file, launch.name))
        return
    bound = launch.bind(get_kernel)
    if bound is None:
        if taking is not None:
            taking.refuse(f"{launch.name} launches through its own call")
            return
        launch.call(get_kernel, *operands)
        return
    # One comprehension, no helper per operand: this runs for every launch of every run.
    values = [op.ptr if type(op) is Address else
              int(op) if isinstance(op, (int, np.integer)) else op.data.ptr
              for op in operands]
    if taking is not None:
        taking.add(bound, (_recording.STREAM, *values))
        return
    bound(_stream(), *values)
