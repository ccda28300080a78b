"""Compile kernel template instances of kernels/*.cu for the CPU execution model.

The source is the loader's own text (`kernel_source`, what NVRTC compiles on a GPU) with two
CUDA-only constructs rewritten into calls of runtime.h: `__shared__` declarations and inline
PTX (each `asm` statement becomes `emu::ptx_<mnemonic>(operands in template order)`, so a new
instruction fails to compile until runtime.h emulates it). The library is built with
AddressSanitizer and UBSan (bounds, alignment, signed overflow, shifts), so it must be loaded
into a process started with libasan preloaded (`sanitizer_env`). Built libraries are cached
on disk, keyed by everything that goes into them. One library holds a group of a file's
instances (`groups`), as one CuPy module holds every instance of a file on a GPU.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np

from algorithms.cuda._loader import MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel_source

HERE = Path(__file__).resolve().parent
RUNTIME = HERE / "runtime.h"
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

_ASM = re.compile(r"\basm\s*(?:volatile\s*)?\((.*?)\)\s*;", re.S)
_SHARED = re.compile(
    r"(extern\s+)?__shared__\s+(?:__align__\(\s*(\d+)\s*\)\s+)?"
    r"([A-Za-z_][\w:<>, ]*?)\s+(\w+)\s*((?:\[[^\]]*\])+)\s*;"
)


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


def _split_top(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside parentheses and string literals."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == '"' and text[i - 1] != "\\":
            quoted = not quoted
        elif not quoted and ch in "([":
            depth += 1
        elif not quoted and ch in ")]":
            depth -= 1
        elif not quoted and depth == 0 and ch == sep:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _asm_call(match: re.Match[str]) -> str:
    sections = _split_top(match.group(1), ":")
    # The template may be several adjacent string literals, which C++ concatenates.
    literal = r'"((?:[^"\\]|\\.)*)"'
    if re.fullmatch(rf"\s*(?:{literal}\s*)+", sections[0]) is None:
        raise ValueError(f"cannot read asm template in {match.group(0)!r}")
    template = "".join(re.findall(literal, sections[0]))
    operands: list[str] = []
    for section in sections[1:3]:
        for operand in _split_top(section, ","):
            if operand.strip():
                expr = re.fullmatch(r'\s*"[^"]*"\s*\((.*)\)\s*', operand, re.S)
                if expr is None:
                    raise ValueError(f"cannot read asm operand {operand!r}")
                operands.append(expr.group(1).strip())
    instruction = _predicated(template.strip()) or template.strip().rstrip(";")
    mnemonic = instruction.split()[0]
    order = [operands[int(i)] for i in re.findall(r"%(\d+)", instruction)]
    name = mnemonic.replace("::", "_").replace(".", "_")  # fence.proxy.async.shared::cta
    return f"emu::ptx_{name}({', '.join(order)});"


#: A block that turns an instruction's predicate into a register: `{ .reg .pred P; INSTR P,
#: operands; selp.u32 %N, 1, 0, P; }` (mbarrier.try_wait has no other form).
_PREDICATED = re.compile(
    r"\{\s*\.reg\s+\.pred\s+(\w+)\s*;\s*([\w.:]+)\s+\1\s*,\s*([^;]*);\s*"
    r"selp\.u32\s+(%\d+)\s*,\s*1\s*,\s*0\s*,\s*\1\s*;\s*\}")


def _predicated(template: str) -> str | None:
    """A predicated block's instruction with the register in the predicate's place (the
    emulator's function sets it to 0 or 1), or None for any other template."""
    found = _PREDICATED.fullmatch(template)
    if found is None:
        return None
    _, mnemonic, rest, register = found.groups()
    return f"{mnemonic} {register}, {rest}"


_DEFINE = re.compile(r"^#define[ \t]+(\w+)[ \t]+((?:.*\\\n)*.*)$", re.M)


def _expand_macros(text: str) -> str:
    """Each asm statement with the file's object-like macros expanded in it (a wgmma's 64
    accumulator operands are written once, as a macro, for every instruction that takes
    them)."""
    macros = {name: body.replace("\\\n", " ") for name, body in _DEFINE.findall(text)}
    if not macros:
        return text
    names = re.compile(rf"\b({'|'.join(map(re.escape, macros))})\b")

    def expand(match: re.Match[str]) -> str:
        return names.sub(lambda m: macros[m.group(1)], match.group(0))

    return _ASM.sub(expand, text)


def _shared_decl(match: re.Match[str]) -> str:
    extern, alignment, ctype, name, dims = match.groups()
    if extern:
        if dims.replace(" ", "") != "[]":
            raise ValueError(f"extern __shared__ {name} must be unsized")
        return f"{ctype}* {name} = reinterpret_cast<{ctype}*>(emu::dynamic_shared());"
    return f"auto& {name} = emu::shared_array<{ctype}{dims}>({alignment or 0});"


def _closing(text: str, start: int, pair: str) -> int:
    """Index of the bracket closing the one `pair[0]` at `start`."""
    depth = 0
    for i in range(start, len(text)):
        depth += {pair[0]: 1, pair[1]: -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise ValueError(f"unbalanced {pair} at offset {start}")


def _check_launch_bounds(text: str) -> str:
    """Each `__launch_bounds__(max_threads, ...)` kernel first checks its block size."""
    out, pos = [], 0
    for match in re.finditer(r"__launch_bounds__\s*\(", text):
        close = _closing(text, match.end() - 1, "()")
        max_threads = _split_top(text[match.end():close], ",")[0]
        params = text.index("(", close + 1)
        body = text.index("{", _closing(text, params, "()")) + 1
        out += [text[pos:body], f" emu::check_launch_bounds({max_threads});"]
        pos = body
    return "".join(out) + text[pos:]


@functools.cache
def translate(filename: str) -> str:
    """The kernel file's loader text with shared declarations and PTX rewritten for the CPU.

    `filename` names a file of kernels/, or is an absolute path (a test's own kernels, which
    include common.cuh the same way: `KERNELS_DIR / filename` is then that path).
    """
    text = _SHARED.sub(_shared_decl, _ASM.sub(_asm_call, _expand_macros(kernel_source(filename))))
    text = _check_launch_bounds(text)
    leftover = re.search(r"\b(asm|__shared__)\b", text)
    if leftover:
        raise ValueError(f"{filename}: unsupported {leftover.group(1)} construct remains")
    return text


#: What makes a kernel's threads need fibers: a barrier, a warp-synchronous instruction (its
#: lanes park until the whole warp or warpgroup has arrived), or an mbarrier wait.
_FIBERS = re.compile(r"__syncthreads|emu::ptx_(?:mma|ldmatrix|wgmma|mbarrier_try_wait)")
_NOT_FUNCTIONS = frozenset({"if", "for", "while", "switch", "return", "sizeof", "alignof",
                            "decltype", "static_assert"})
#: A name before "(" (a definition's or a call's); a call may pass template arguments.
_NAME_PAREN = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(")
_BODY_OPEN = re.compile(r"\s*(?:const\s*)?\{")


@functools.cache
def _function_bodies(source: str) -> dict[str, str]:
    """Function name -> the bodies of every definition of that name in `source` (comments out)."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    bodies: dict[str, list[str]] = {}
    for match in _NAME_PAREN.finditer(text):
        if match.group(1) in _NOT_FUNCTIONS:
            continue
        try:
            close = _closing(text, match.end() - 1, "()")
            brace = _BODY_OPEN.match(text, close + 1)
            if brace is not None:
                bodies.setdefault(match.group(1), []).append(
                    text[brace.end() - 1:_closing(text, brace.end() - 1, "{}") + 1])
        except ValueError:  # unbalanced from here on (a parenthesis in a string): no body
            continue
    return {name: "\n".join(parts) for name, parts in bodies.items()}


def needs_fibers(source: str, kernel: str) -> bool:
    """Whether `kernel`, or a function it calls (by name, transitively), has a barrier or a
    warp-synchronous instruction. Calls are matched by name alone, so this errs towards
    fibers; a kernel misjudged as fiber-free fails loudly at its first barrier (runtime.h).
    """
    bodies = _function_bodies(source)
    if kernel not in bodies:
        raise ValueError(f"kernel {kernel} not found")
    seen, todo = {kernel}, [kernel]
    while todo:
        body = bodies[todo.pop()]
        if _FIBERS.search(body):
            return True
        for name in _CALL.findall(body):
            if name in bodies and name not in seen:
                seen.add(name)
                todo.append(name)
    return False


@functools.cache
def unit_source(filename: str, group: tuple[str, ...]) -> str:
    """A translation unit that exports the launcher, signature and parameter sizes of each
    instance of `group`.

    Instance i of the group is `emu_launch_i` / `emu_signature_i` / `emu_sizes_i`. One unit
    holds many instances because the runtime, compiled with the sanitizers, is most of a
    unit's compile time: a group of 12 builds in about the time of two single instances.
    """
    text = translate(filename)
    parts = [
        # Only a file with wgmma tracks which cp.async landings still need a proxy fence.
        f"#define EMU_USES_WGMMA {int('emu::ptx_wgmma' in text)}\n"
        f'#include "{RUNTIME}"\n{text}\n'
    ]
    for i, name in enumerate(group):
        fibers = needs_fibers(text, name.split("<")[0].strip())
        parts.append(
            f'extern "C" const char* emu_signature_{i}() {{ return emu::signature(&{name}); }}\n'
            f'extern "C" const unsigned* emu_sizes_{i}() {{\n'
            f"    return emu::parameter_sizes(&{name});\n}}\n"
            f'extern "C" void emu_launch_{i}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, '
            "unsigned by, unsigned bz, std::size_t smem, std::size_t smem_limit, void** args, "
            "int schedule, unsigned seed) {\n"
            f"    emu::launch(&{name}, dim3{{gx, gy, gz}}, dim3{{bx, by, bz}}, smem, "
            f"smem_limit, args, schedule, seed, {str(fibers).lower()});\n}}\n"
        )
    return "".join(parts)


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
