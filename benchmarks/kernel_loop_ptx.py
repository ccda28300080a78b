"""PTX instructions in the K-step loop of implicit_gemm_wgmma's kernels, per instance.

Usage: python benchmarks/kernel_loop_ptx.py [--kernels DIR] [--instance EXPR ...] [--nchw]

Compiles each instance (default: every shipped one of kernels/implicit_gemm_wgmma.cu, or
with --nchw of kernels/implicit_gemm_wgmma_nchw.cu) to PTX with nvcc for sm_90a and counts
the instructions from the K-step's barrier (`bar.sync`) to its `wgmma.wait_group`: what each
thread issues per K-step besides the wait itself, by kind. The NCHW kernel rounds (or
splits) its landed W chunks before the barrier, so its count starts at the K-step's
`cp.async.wait_group` instead. On the H200 (2026-11-25, VGG-16
conv4_2 float16, Nsight Compute) this kernel issued about 250 instructions a warp per
K-step at 6.45 cycles each, about three times the K-step's tensor-core time, with no warp
waiting on wgmma: the issue set the pace. PTX is not SASS (ptxas schedules, predicates and
may fold), so compare counts between trees, not with cycles. Needs nvcc, not a GPU.
`--kernels` points at another tree's kernels/ (a `git worktree` of an older commit, say)
to compare.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms.cuda import _wgmma_nchw, implicit_gemm_wgmma
from algorithms.cuda._loader import KERNELS_DIR
from benchmarks.kernel_resources import instantiation_source

#: PTX lines that are not instructions: labels, braces, directives, comments, blank.
_NOT_INSTRUCTION = re.compile(r"^\s*($|//|\$L__|[{}]|\.)")


def loop_instructions(ptx: str, from_copy_wait: bool = False) -> list[str]:
    """The instructions of the first K-step loop: from `bar.sync` (or the
    `cp.async.wait_group` before it) to `wgmma.wait_group`."""
    lines = ptx.splitlines()
    start = next(i for i, line in enumerate(lines) if "bar.sync" in line)
    if from_copy_wait:
        start = max(i for i in range(start) if "cp.async.wait_group" in lines[i])
    end = next(i for i in range(start, len(lines)) if "wgmma.wait_group" in lines[i])
    return [line.strip() for line in lines[start:end + 1] if not _NOT_INSTRUCTION.match(line)]


def kind(instruction: str) -> str:
    """An instruction's opcode without its type suffixes ("add", "cp.async", "wgmma")."""
    opcode = instruction.split()[0]
    if opcode.startswith("@"):  # a predicated instruction: its opcode is the next word
        opcode = instruction.split()[1]
    for family in ("cp.async", "wgmma", "bar", "setp", "selp", "bra", "mov", "cvt"):
        if opcode.startswith(family):
            return family
    return opcode.split(".")[0]


def compile_ptx(expression: str, kernels: Path, nvcc: str, file: str | None = None) -> str:
    """The PTX of one instance of kernels/`file` (implicit_gemm_wgmma.cu by default)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "one.cu"
        src.write_text(instantiation_source(file or implicit_gemm_wgmma.KERNEL_FILE,
                                            (expression,)))
        out = Path(tmp) / "one.ptx"
        subprocess.run([nvcc, "-arch=sm_90a", "-ptx", "-O3", "-std=c++17", f"-I{kernels}",
                        "-o", str(out), str(src)], check=True, capture_output=True, text=True)
        return out.read_text()


def main() -> None:
    """Print a Markdown table: instance, instructions per K-step, and the main kinds."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kernels", type=Path, default=KERNELS_DIR)
    parser.add_argument("--instance", action="append", default=None)
    parser.add_argument("--nchw", action="store_true",
                        help="the NCHW kernel's instances (kernels/implicit_gemm_wgmma_nchw.cu)")
    args = parser.parse_args()
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        sys.exit("kernel_loop_ptx: nvcc is not on the PATH")
    module = _wgmma_nchw if args.nchw else implicit_gemm_wgmma
    instances = args.instance or list(module.shipped_kernels())
    print(f"kernels: {args.kernels}\n")
    print("| instance | PTX instructions per K-step | cp.async | wgmma | setp/selp | bra | "
          "ld.shared | cvt |")
    print("|---|---|---|---|---|---|---|---|")
    for expression in instances:
        body = loop_instructions(compile_ptx(expression, args.kernels, nvcc,
                                             module.KERNEL_FILE), from_copy_wait=args.nchw)
        kinds = Counter(kind(line) for line in body)
        shared_loads = sum(line.split()[0].startswith("ld.shared") for line in body)
        print(f"| `{expression}` | {len(body)} | {kinds['cp.async']} | {kinds['wgmma']} | "
              f"{kinds['setp'] + kinds['selp']} | {kinds['bra']} | {shared_loads} | "
              f"{kinds['cvt']} |")


if __name__ == "__main__":
    main()
