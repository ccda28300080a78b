"""Load emulated kernel libraries (build.py) and call their kernels as CuPy would.

`EmulatedKernel` stands for a cupy.RawKernel, `EmulatedFunction` for the plain
cupy.cuda.function.Function that _loader loads for sm_90a files; `launch_kernel` and
`func_set_attribute` stand for the driver calls (cuLaunchKernel, cuFuncSetAttribute) made
with their handles.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from typing import Any, ClassVar, cast

import numpy as np

from algorithms.cuda._loader import MAX_DYNAMIC_SHARED_SIZE_BYTES
from tests.cuda_emu.build import build, group_of

#: ctypes class and the NumPy scalar type CuPy would pass, per signature letter.
_SCALARS: dict[str, tuple[Any, type]] = {
    "i": (ctypes.c_int32, np.int32), "u": (ctypes.c_uint32, np.uint32),
    "U": (ctypes.c_uint64, np.uint64), "f": (ctypes.c_float, np.float32),
    "d": (ctypes.c_double, np.float64),
}


class EmulatedKernel:
    """A kernel instance callable like a cupy.RawKernel: kernel(grid, block, args, shared_mem).

    Pointers are anything with `.data.ptr` (host memory here), or an address as a NumPy
    uint64 (what CuPy passes for an Address). Scalars must be the exact NumPy
    type of the parameter, as 64-bit Python ints would shift every later argument on a GPU.
    `max_dynamic_shared_size_bytes` is CuPy's RawKernel attribute: a launch with more
    dynamic shared memory than it allows fails, as on a GPU (48 KiB until set).
    """

    #: (schedule, seed) for every launch: 0 forward, 1 reverse, 2 shuffled per phase.
    schedule: ClassVar[tuple[int, int]] = (0, 0)
    #: (name expression, scalar arguments) of every launch, for tests to inspect.
    launches: ClassVar[list[tuple[str, tuple[Any, ...]]]] = []
    #: How many launches came through `launch_kernel` (a prepared parameter buffer).
    prepared: ClassVar[int] = 0
    #: ptr -> kernel: the handles `launch_kernel` and func_set_attribute take.
    handles: ClassVar[dict[int, EmulatedKernel]] = {}

    def __init__(self, filename: str, name_expression: str,
                 instances: Iterable[str] = ()) -> None:
        """`instances`: the file's instances that are built in groups (`group_of`)."""
        self.name = name_expression
        self._shared_limit = 48 * 1024
        group = group_of(name_expression, instances)
        lib = ctypes.CDLL(str(build(filename, group)))
        index = group.index(name_expression)
        signature = getattr(lib, f"emu_signature_{index}")
        signature.restype = ctypes.c_char_p
        self.signature = signature().decode()
        sizes = getattr(lib, f"emu_sizes_{index}")
        sizes.restype = ctypes.POINTER(ctypes.c_uint)
        found = sizes()
        self.sizes = tuple(found[i] for i in range(len(self.signature)))
        self._launch = getattr(lib, f"emu_launch_{index}")
        self._launch.restype = None
        self._launch.argtypes = [
            *[ctypes.c_uint] * 6, ctypes.c_size_t, ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int, ctypes.c_uint,
        ]
        self.ptr = id(self)
        EmulatedKernel.handles[self.ptr] = self

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self._shared_limit

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, nbytes: int) -> None:
        self._shared_limit = nbytes

    def __call__(self, grid: tuple[int, ...], block: tuple[int, ...],
                 args: tuple[Any, ...], shared_mem: int = 0) -> None:
        if len(args) != len(self.signature):
            raise TypeError(f"{self.name}: {len(args)} arguments for {len(self.signature)}")
        values: list[Any] = []
        for i, (code, arg) in enumerate(zip(self.signature, args, strict=True)):
            if code == "p" and type(arg) is np.uint64:  # an address, as CuPy passes one
                values.append(ctypes.c_void_p(int(arg)))
            elif code == "p" and isinstance(arg, np.ndarray):  # a DeviceArray: CuPy's array
                # Nothing else: CuPy's kernel call refuses other objects (an Address, say).
                values.append(ctypes.c_void_p(int(cast(Any, arg).data.ptr)))
            elif code in _SCALARS and type(arg) is _SCALARS[code][1]:
                values.append(_SCALARS[code][0](arg))
            elif code == "S" and isinstance(arg, np.void) and arg.nbytes == self.sizes[i]:
                # A structure by value: its bytes, as CuPy passes a structured scalar.
                values.append(ctypes.create_string_buffer(arg.tobytes(), arg.nbytes))
            else:
                raise TypeError(f"{self.name}: argument {i} is {type(arg).__name__}, "
                                f"the kernel takes {code!r}")
        pointers = (ctypes.c_void_p * len(values))(
            *[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
        g = (*grid, 1, 1)[:3]
        b = (*block, 1, 1)[:3]
        EmulatedKernel.launches.append((self.name, tuple(
            a for code, a in zip(self.signature, args, strict=True)
            if code != "p" and isinstance(a, np.generic))))
        self._launch(*g, *b, shared_mem, self._shared_limit, pointers,
                             *self.schedule)

    @staticmethod
    def launch_kernel(function: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                      shared_mem: int, stream: int, params: int, extra: int) -> None:
        """CuPy's driver.launchKernel (cuLaunchKernel) for emulated kernels: `params` is
        the address of an array of pointers to each parameter's bytes, which the emulated
        launch reads by the kernel's own signature, as the driver would."""
        kernel = EmulatedKernel.handles.get(function)
        if kernel is None:
            raise ValueError(f"cuLaunchKernel: {function:#x} is not a CUfunction")
        if extra:
            raise ValueError("cuLaunchKernel: `extra` is not emulated")
        pointers = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        EmulatedKernel.prepared += 1
        EmulatedKernel.launches.append((kernel.name, kernel._scalars_at(pointers)))
        kernel._launch(gx, gy, gz, bx, by, bz, shared_mem, kernel._shared_limit, pointers,
                       *EmulatedKernel.schedule)

    def _scalars_at(self, pointers: Any) -> tuple[Any, ...]:
        """The non-pointer parameters in a parameter buffer, as the NumPy scalars a call
        would have passed (a structure as a structured scalar of int32 fields)."""
        found: list[Any] = []
        for i, (code, size) in enumerate(zip(self.signature, self.sizes, strict=True)):
            if code in _SCALARS:
                ctype, numpy_type = _SCALARS[code]
                found.append(numpy_type(ctype.from_address(pointers[i]).value))
            elif code == "S":
                fields = np.dtype([(f"f{j}", np.int32) for j in range(size // 4)])
                found.append(np.frombuffer(ctypes.string_at(pointers[i], size), fields)[0])
        return tuple(found)


#: What CuPy's plain Function says when the attribute is read or set.
_NO_SUCH_ATTRIBUTE = ("'cupy.cuda.function.Function' object has no attribute "
                      "'max_dynamic_shared_size_bytes'")


class EmulatedFunction(EmulatedKernel):
    """A kernel posing as a plain cupy.cuda.function.Function, which is what _loader loads
    for the NVRTC-built sm_90a files: it has no settable `max_dynamic_shared_size_bytes`
    (setting one raises AttributeError, as CuPy's does), only a handle `ptr` for
    cuFuncSetAttribute (`func_set_attribute`)."""

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        raise AttributeError(_NO_SUCH_ATTRIBUTE)

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, nbytes: int) -> None:
        raise AttributeError(_NO_SUCH_ATTRIBUTE)


def func_set_attribute(function: int, attribute: int, value: int) -> None:
    """cuFuncSetAttribute for EmulatedFunction handles (the one attribute we set)."""
    if attribute != MAX_DYNAMIC_SHARED_SIZE_BYTES:
        raise ValueError(f"cuFuncSetAttribute: attribute {attribute} is not emulated")
    target = EmulatedKernel.handles.get(function)
    if target is None:
        raise ValueError(f"cuFuncSetAttribute: {function:#x} is not a CUfunction")
    target._shared_limit = value
