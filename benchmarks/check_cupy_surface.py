"""Every CuPy name our code uses, checked against an installed CuPy, without a GPU.

Sixteen sessions of GPU-side code ran only against stand-ins of CuPy (tests/cuda_emu, the
stand-in modules of the host-path benchmarks), which accept whatever they are given. A
CuPy wheel imports on a machine without a GPU (with its `[ctk]` extra it also loads cuFFT's
and cuBLAS's bindings), so what our code asks of its modules can be checked here: each
dotted name rooted at `cupy`, `cupyx` or `cupy_backends` (imported under any alias, at any
depth of the file) must resolve, and each call of a resolved function or class must bind to
its signature (Python's, or the one Cython embeds in the first line of the docstring).
Calls through instances (`stream.use()`) are not seen: their types are not known here.

    pip install 'cupy-cuda13x[ctk]'   # in a separate environment is fine
    python benchmarks/check_cupy_surface.py [paths...]

Prints one line per problem and exits 1 when there is any; a module whose shared library
cannot be found is reported as not checked, not as a problem.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The packages whose names are checked.
ROOTS = ("cupy", "cupyx", "cupy_backends")
#: Where our code lives, from the repository root.
DEFAULT_PATHS = ("algorithms", "tuner", "db", "api", "benchmarks", "tests")
_MISSING = object()  # what a name that does not resolve looks up to


class _Default:
    """A default the docstring gives: its value does not matter to binding."""

    def __repr__(self) -> str:
        return "..."


_DEFAULT = _Default()


@dataclass(frozen=True)
class Finding:
    """One name or call that does not fit the installed CuPy."""

    where: str
    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}: {self.why}"


class Unloadable(Exception):
    """A module that exists but whose shared library is not on this machine."""


def resolve(dotted: str) -> Any:
    """The object `dotted` names, importing submodules on the way; AttributeError if none."""
    parts = dotted.split(".")
    done = parts[0]
    obj = _import(done)
    for part in parts[1:]:
        done = f"{done}.{part}"
        obj = getattr(obj, part) if hasattr(obj, part) else _import(done)
    return obj


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        raise AttributeError(f"no {name}") from None
    except ImportError as exc:  # the module exists; a library it loads does not
        if ".so" in str(exc):
            raise Unloadable(f"{name}: {str(exc).splitlines()[0]}") from None
        raise


def _split(params: str) -> Iterator[str]:
    """A docstring parameter list split at its top-level commas."""
    depth, quote, start = 0, "", 0
    for i, ch in enumerate(params):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            yield params[start:i].strip()
            start = i + 1
    if params[start:].strip():
        yield params[start:].strip()


def docstring_signature(obj: Any) -> inspect.Signature | None:
    """The signature Cython (or NumPy's ufunc docs) put in the docstring's first line:
    `name(type arg, type arg=default, *, kw=default)`; None when there is none."""
    first = (getattr(obj, "__doc__", None) or "").strip().partition("\n")[0]
    match = re.match(r"^[\w.]+\((.*)\)(\s*->.*)?$", first)
    if match is None:
        return None
    pieces = [p.replace("\\*", "*") for p in _split(match.group(1))]
    while pieces and pieces[-1] == "*":  # "..., *)": a bare star with nothing after it
        pieces.pop()
    slash = pieces.index("/") if "/" in pieces else 0  # the positional-only ones before it
    kind: inspect._ParameterKind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    out: list[inspect.Parameter] = []
    for i, piece in enumerate(pieces):
        if piece in ("/", "*"):
            kind = inspect.Parameter.KEYWORD_ONLY if piece == "*" else kind
            continue
        head, eq, _ = piece.partition("=")
        name = head.split()[-1]
        if name.startswith("**"):
            out.append(inspect.Parameter(name[2:], inspect.Parameter.VAR_KEYWORD))
        elif name.startswith("*"):
            out.append(inspect.Parameter(name[1:], inspect.Parameter.VAR_POSITIONAL))
            kind = inspect.Parameter.KEYWORD_ONLY
        else:
            own = inspect.Parameter.POSITIONAL_ONLY if i < slash else kind
            out.append(inspect.Parameter(name, own,
                                         default=_DEFAULT if eq else inspect.Parameter.empty))
    try:
        return inspect.Signature(out)
    except ValueError:  # a docstring line that only looks like a signature
        return None


def signature(obj: Any) -> inspect.Signature | None:
    """`obj`'s signature from Python, else from its docstring, else None."""
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return docstring_signature(obj)


def _dotted(node: ast.AST) -> str | None:
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(names)])


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> the CuPy name it stands for, from every import in the file."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.partition(".")[0] in ROOTS:
                    local = alias.asname or alias.name.partition(".")[0]
                    found[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.partition(".")[0] in ROOTS:
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return found


def check_source(text: str, where: str) -> tuple[list[Finding], set[str], set[str]]:
    """(findings, names resolved, modules not checked) for one file's source."""
    tree = ast.parse(text)
    aliases = _aliases(tree)
    findings: list[Finding] = []
    resolved: set[str] = set()
    unloadable: set[str] = set()

    def full_name(node: ast.AST) -> str | None:
        dotted = _dotted(node)
        if dotted is None:
            return None
        head, dot, rest = dotted.partition(".")
        return None if head not in aliases else aliases[head] + dot + rest

    def lookup(name: str, line: int) -> Any:
        try:
            obj = resolve(name)
        except Unloadable as exc:
            unloadable.add(str(exc))
            return _MISSING
        except AttributeError as exc:
            findings.append(Finding(f"{where}:{line}", name, str(exc)))
            return _MISSING
        resolved.add(name)
        return obj

    for value in aliases.values():  # each import itself
        lookup(value, 0)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            name = full_name(node)
            if name is not None:
                lookup(name, node.lineno)
        if isinstance(node, ast.Call):
            name = full_name(node.func)
            if name is None:
                continue
            obj = lookup(name, node.lineno)
            if obj is _MISSING or any(isinstance(a, ast.Starred) for a in node.args) \
                    or any(k.arg is None for k in node.keywords):
                continue
            sig = signature(obj)
            if sig is None:
                continue
            try:
                sig.bind(*node.args, **{k.arg: k.value for k in node.keywords if k.arg})
            except TypeError as exc:
                findings.append(Finding(f"{where}:{node.lineno}", f"{name}(...)",
                                        f"{exc} (signature {name.rpartition('.')[2]}{sig})"))
    return list(dict.fromkeys(findings)), resolved, unloadable  # a call's name: found twice


def python_files(paths: list[str]) -> list[Path]:
    """The .py files under `paths`, sorted."""
    files: set[Path] = set()
    for path in map(Path, paths):
        files |= {path} if path.is_file() else set(path.rglob("*.py"))
    return sorted(files)


def main(argv: list[str] | None = None) -> int:
    """Check the files; print the findings; 1 if any."""
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("paths", nargs="*", default=list(DEFAULT_PATHS))
    args = parser.parse_args(argv)
    try:
        version = importlib.import_module("cupy").__version__
    except ImportError as exc:
        print(f"error: CuPy is not importable here ({exc})", file=sys.stderr)
        return 2
    findings: list[Finding] = []
    resolved: set[str] = set()
    unloadable: set[str] = set()
    files = python_files(args.paths)
    for file in files:
        found, names, missing = check_source(file.read_text(), str(file))
        findings += found
        resolved |= names
        unloadable |= missing
    for finding in sorted(findings, key=str):
        print(finding)
    for line in sorted(unloadable):
        print(f"not checked (library not found): {line}")
    print(f"CuPy {version}: {len(files)} files, {len(resolved)} names resolved, "
          f"{len(findings)} problems")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
