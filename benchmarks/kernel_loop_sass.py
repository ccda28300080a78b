"""SASS instructions in the main loop of a tensor-core kernel, per instance (no GPU needed).

Usage: python benchmarks/kernel_loop_sass.py [--file implicit_gemm_tc.cu] [--match TEXT ...]
           [--instance EXPR ...] [--kernels DIR] [--arch sm_90a] [--per-store]

Compiles each instance to a cubin with nvcc, disassembles it with cuobjdump (which needs
nvdisasm next to it or on the PATH: `pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`
gives both, under site-packages/nvidia/cu13/bin; set CUOBJDUMP or PATH), and counts the
instructions of the loop that holds the kernel's tensor-core instructions (HMMA or HGMMA):
what each warp issues per K-step, by opcode. With `--per-store` the loop is the one holding
the most global stores (STG) instead, for copy kernels (im2col.cu's): instructions per
stored element, where ptxas may unroll several elements a trip. With `--per-copy`, the loop
holding the most cp.async (LDGSTS): a warp-specialized kernel's producers, per copy. Counts
are static: where a branch inside the loop picks one of two paths (a runtime case, say),
both count. Unlike `kernel_loop_ptx.py`, this is the code the GPU runs, after ptxas's
scheduling and folding (ptxas drops cvt.rna's mask before a TF32 HMMA, for one). Compare
instances and trees (`--kernels` at a `git worktree` of an older commit), not cycles: issue
rate and stalls need the GPU.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms.cuda import shipped_kernels
from algorithms.cuda._loader import KERNELS_DIR
from benchmarks.kernel_resources import instantiation_source

#: A disassembled instruction: `/*0a10*/  @!P0 IMAD.IADD.U32 R1, R1, 0x1, R0 ;`
_LINE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
#: The tensor-core instructions whose loop is the kernel's main loop.
MMA = ("HMMA", "HGMMA")
#: Opcode families reported in their own column; the rest are summed as "other".
COLUMNS = ("HMMA", "HGMMA", "LDS", "LDSM", "LDGSTS", "LDG", "STG", "FSETP", "IMAD", "LEA",
           "IADD3", "SEL", "BAR")


def instructions(sass: str) -> list[tuple[int, str]]:
    """(address, instruction) of every instruction in cuobjdump's output, in order."""
    found = []
    for line in sass.splitlines():
        match = _LINE.match(line)
        if match and not match.group(2).startswith("@!PT "):  # never issued (ptxas padding)
            found.append((int(match.group(1), 16), match.group(2)))
    return found


def opcode(instruction: str) -> str:
    """The opcode family without predicate or modifiers: "IMAD" for `@!P0 IMAD.IADD.U32 ...`."""
    words = instruction.split()
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def main_loop(found: list[tuple[int, str]], largest: bool = False,
              key: tuple[str, ...] = MMA) -> list[str]:
    """The body of the loop (a backward branch's span) holding the most tensor-core
    instructions (`key`'s opcodes), the smallest such span on a tie (the largest with
    `largest`: a kernel compiled with one loop per case, as implicit_gemm_tc's element-wise B,
    has one per case); empty if no loop holds one."""
    best: tuple[int, int, list[str]] = (0, 0, [])
    for address, text in found:
        if opcode(text) != "BRA":
            continue
        target = re.search(r"0x([0-9a-f]+)", text.split("BRA", 1)[1])
        if target is None or int(target.group(1), 16) >= address:
            continue
        start = int(target.group(1), 16)
        body = [t for a, t in found if start <= a <= address]
        mma = sum(opcode(t) in key for t in body)
        tie = mma == best[0] and mma and (len(body) > best[1] if largest else len(body) < best[1])
        if mma > best[0] or tie:
            best = (mma, len(body), body)
    return best[2]


def find_cuobjdump() -> str | None:
    """The cuobjdump to run: $CUOBJDUMP, else the PATH's, else a pip-installed one; None."""
    candidates = [os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump")]
    for site in sys.path:
        candidates.append(str(Path(site) / "nvidia" / "cu13" / "bin" / "cuobjdump"))
    return next((c for c in candidates if c and Path(c).is_file()), None)


def compile_sass(kernel_file: str, expression: str, kernels: Path, nvcc: str,
                 arch: str) -> str:
    """cuobjdump -sass of one instance of kernels/`kernel_file`, compiled for `arch`."""
    tool = find_cuobjdump()
    if tool is None:
        sys.exit("kernel_loop_sass: no cuobjdump (pip install nvidia-cuda-cuobjdump "
                 "nvidia-cuda-nvdisasm, or set CUOBJDUMP)")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "one.cu"
        src.write_text(instantiation_source(kernel_file, (expression,)))
        cubin = Path(tmp) / "one.cubin"
        subprocess.run([nvcc, f"-arch={arch}", "-cubin", "-O3", "-std=c++17", f"-I{kernels}",
                        "-o", str(cubin), str(src)], check=True, capture_output=True, text=True)
        env = dict(os.environ, PATH=f"{Path(tool).parent}{os.pathsep}{os.environ['PATH']}")
        return subprocess.run([tool, "-sass", str(cubin)], check=True, capture_output=True,
                              text=True, env=env).stdout


def row(expression: str, body: list[str], key: tuple[str, ...] = MMA) -> str:
    """One Markdown table row: the loop's size, per `key` instruction, and its opcode
    families."""
    kinds = Counter(opcode(t) for t in body)
    named = [kinds[c] for c in COLUMNS]
    mma = sum(kinds[m] for m in key)
    per_mma = f"{len(body) / mma:.1f}" if mma else "-"
    return (f"| `{expression}` | {len(body)} | {per_mma} | " + " | ".join(map(str, named)) +
            f" | {len(body) - sum(named)} |")


def main() -> None:
    """Print a Markdown table of the main loop's SASS per instance."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--file", default="implicit_gemm_tc.cu",
                        help="the kernel file whose shipped instances to take")
    parser.add_argument("--match", action="append", default=[],
                        help="keep shipped instances containing this text (all must match)")
    parser.add_argument("--instance", action="append", default=None,
                        help="an instance expression instead of the shipped ones")
    parser.add_argument("--kernels", type=Path, default=KERNELS_DIR)
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--largest", action="store_true",
                        help="of loops with as many tensor-core instructions, the largest")
    parser.add_argument("--per-store", action="store_true",
                        help="the loop with the most global stores, per store (copies)")
    parser.add_argument("--per-copy", action="store_true",
                        help="the loop with the most cp.async (LDGSTS), per cp.async (a "
                             "warp-specialized kernel's producers)")
    args = parser.parse_args()
    key = ("STG",) if args.per_store else ("LDGSTS",) if args.per_copy else MMA
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        sys.exit("kernel_loop_sass: nvcc is not on the PATH")
    shipped = shipped_kernels()
    if args.file not in shipped:
        sys.exit(f"kernel_loop_sass: --file must be one of {sorted(shipped)}")
    instances = args.instance or [e for e in shipped[args.file]
                                  if all(m in e for m in args.match)]
    print(f"kernels: {args.kernels}, {args.arch}\n")
    # ptxas may unroll a K loop (two K-steps a trip): compare instances per mma instruction.
    per = f"per {key[0]}" if key != MMA else "per HMMA/HGMMA"
    print(f"| instance | SASS per loop trip | {per} | " + " | ".join(COLUMNS) +
          " | other |")
    print("|---|---|---|" + "---|" * (len(COLUMNS) + 1))
    for expression in instances:
        sass = compile_sass(args.file, expression, args.kernels, nvcc, args.arch)
        print(row(expression, main_loop(instructions(sass), args.largest, key), key))


if __name__ == "__main__":
    main()
