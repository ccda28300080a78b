"""Translate kernel template instances of kernels/*.cu for the CPU execution model.

The source is the loader's own text (`kernel_source`, what NVRTC compiles on a GPU) with two
CUDA-only constructs rewritten into calls of runtime.h: `__shared__` declarations and inline
PTX (each `asm` statement becomes `emu::ptx_<mnemonic>(operands in template order)`, so a new
instruction fails to compile until runtime.h emulates it). `unit_source` wraps a group of a
file's instances into one translation unit, which build.py compiles and caches.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from algorithms.cuda._loader import kernel_source

HERE = Path(__file__).resolve().parent
RUNTIME = HERE / "runtime.h"

_ASM = re.compile(r"\basm\s*(?:volatile\s*)?\((.*?)\)\s*;", re.S)
_SHARED = re.compile(
    r"(extern\s+)?__shared__\s+(?:__align__\(\s*(\d+)\s*\)\s+)?"
    r"([A-Za-z_][\w:<>, ]*?)\s+(\w+)\s*((?:\[[^\]]*\])+)\s*;"
)


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
