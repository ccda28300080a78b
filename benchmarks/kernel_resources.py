"""Registers, shared memory and spills of every shipped CUDA kernel instance, from ptxas.

Compiles exactly the template instances the Python side ships
(algorithms.cuda.shipped_kernels()) with nvcc --resource-usage and prints a Markdown table.
These are compile-time facts, not speeds: they need nvcc, not a GPU.

    python benchmarks/kernel_resources.py --arch sm_90
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms.cuda import shipped_kernels
from algorithms.cuda._loader import KERNELS_DIR, nvrtc_options, target_arch

NVCC = shutil.which("nvcc")


@dataclass(frozen=True)
class Usage:
    """What ptxas reports for one compiled entry function."""

    entry: str
    registers: int
    shared_bytes: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int


def instantiation_source(filename: str, names: tuple[str, ...]) -> str:
    """A translation unit that instantiates `names` of kernels/`filename` (by address)."""
    keep = ",\n".join(f"    (void*)&{name}" for name in names)
    return f'#include "{filename}"\n\nvoid* convtune_keep[] = {{\n{keep}\n}};\n'


def compile_report(src: Path, arch: str, ftz: bool = False) -> subprocess.CompletedProcess[str]:
    """nvcc's output for `src` on `arch`, warnings as errors, with ptxas's resource usage;
    `ftz`: denormals flushed to zero, where the loader builds the file so
    (_loader.nvrtc_options), so that the report is of the binaries that run."""
    if NVCC is None:
        raise RuntimeError("nvcc is not on PATH")
    # A feature target ("sm_90a") only by -gencode: -arch=sm_90a also runs a plain sm_90 pass.
    target = (f"-gencode=arch=compute_{arch[3:]},code={arch}" if arch.endswith("a")
              else f"-arch={arch}")
    cmd = [
        NVCC, "-std=c++17", target, *(["-ftz=true"] if ftz else []), "-I", str(KERNELS_DIR),
        "-Werror", "all-warnings", "--resource-usage", "-c", str(src),
        "-o", str(src.with_suffix(f".{arch}.o")),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def compile_all(
    archs: tuple[str, ...], workdir: Path, workers: int = 4
) -> dict[tuple[str, str], str]:
    """(kernel file, arch) -> nvcc's combined output; RuntimeError naming a failed compile.
    A file built for one architecture only (_loader.FEATURE_ARCH) is compiled for that one
    under every `arch` key."""
    jobs: dict[tuple[str, str], Path] = {}
    for filename, names in shipped_kernels().items():
        src = workdir / f"keep_{Path(filename).stem}.cu"
        src.write_text(instantiation_source(filename, names))
        for arch in archs:
            jobs[(filename, arch)] = src
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {key: pool.submit(compile_report, src, target_arch(*key),
                                    "-ftz=true" in nvrtc_options(*key))
                   for key, src in jobs.items()}
        results = {key: fut.result() for key, fut in futures.items()}
    out: dict[tuple[str, str], str] = {}
    for key, proc in results.items():
        text = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed for {key}:\n{text}")
        out[key] = text
    return out


_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
# ptxas's numbered notes (C7511, C7515, C7517, C7519, ...) are advice about lost speed, most of
# them wgmma's: its instructions run one at a time, or a warpgroup.arrive/wait the compiler had
# to add. None is an error, so nvcc -Werror passes them.
_ADVISORY = re.compile(r"ptxas info\s*: \((C\d+)\) (.*)")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def advisories(report: str) -> list[str]:
    """ptxas's numbered performance notes in a report ("C7511: Potential Performance Loss...")."""
    return [f"{m.group(1)}: {m.group(2)}" for m in _ADVISORY.finditer(report)]


def usages(report: str) -> list[Usage]:
    """One Usage per entry function in a ptxas --resource-usage report."""
    found: list[Usage] = []
    blocks = _ENTRY.split(report)[1:]  # [entry, text, entry, text, ...]
    for entry, text in zip(blocks[::2], blocks[1::2], strict=True):
        stack, used, smem = _STACK.search(text), _USED.search(text), _SMEM.search(text)
        if stack is None or used is None:
            raise ValueError(f"no resource line for {entry}")
        found.append(Usage(
            entry=entry, registers=int(used.group(1)),
            shared_bytes=int(smem.group(1)) if smem else 0,
            stack_bytes=int(stack.group(1)), spill_stores=int(stack.group(2)),
            spill_loads=int(stack.group(3)),
        ))
    return found


def demangled(names: list[str]) -> list[str]:
    """C++ names of mangled entries (cu++filt when available, else as given)."""
    tool = shutil.which("cu++filt") or shutil.which("c++filt")
    if tool is None or not names:
        return names
    done = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
    lines = done.stdout.splitlines()
    return lines if len(lines) == len(names) else names


def markdown(rows: list[tuple[str, Usage]], arch: str) -> str:
    """The table of every instance on `arch`."""
    lines = [
        f"| kernel instance ({arch}) | registers | smem (B) | spills st/ld (B) | stack (B) |",
        "|---|---|---|---|---|",
    ]
    # The template arguments say which instance; the parameter list is the same for all.
    names = [n.split("(")[0].removeprefix("void ") for n in demangled([u.entry for _, u in rows])]
    for (_, u), name in zip(rows, names, strict=True):
        lines.append(f"| `{name}` | {u.registers} | {u.shared_bytes} | "
                     f"{u.spill_stores}/{u.spill_loads} | {u.stack_bytes} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the resource table of every shipped kernel instance."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90", help="GPU architecture (default sm_90)")
    args = parser.parse_args(argv)
    if NVCC is None:
        print("nvcc is not on PATH", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        reports = compile_all((args.arch,), Path(tmp))
    rows = [(filename, u) for (filename, _), text in sorted(reports.items())
            for u in usages(text)]
    print(markdown(rows, args.arch))
    notes = [f"- {filename}: {note}" for (filename, _), text in sorted(reports.items())
             for note in advisories(text)]
    print("\nptxas performance notes:", *(notes or ["none"]), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
