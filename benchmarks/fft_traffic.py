"""Global-memory bytes and launches of fft's two configurations, per network layer.

An analytical count, not a measurement: every pass of each configuration reads and writes its
buffers once (algorithms/cuda/fft.py's steps), with no cache. It says what "fused" removes
(the padded planes, cuFFT's passes over them and the three transposes), which a GPU run then
confirms or not. Needs neither a GPU nor nvcc:

    python benchmarks/fft_traffic.py [--networks googlenet:32,resnet50:32]
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms.base import DEFAULT_CONFIG
from algorithms.cuda import _fft_fused, fft
from algorithms.problem import ConvProblem
from tuner.networks import network_problems

#: Bytes of one float32 plane element and one complex64 spectrum element.
REAL, COMPLEX = 4, 8


@dataclass(frozen=True)
class Traffic:
    """One configuration's passes over global memory on one problem."""

    launches: int
    bytes: int


def default_traffic(problem: ConvProblem) -> Traffic:
    """cuFFT's path: per operand pad, R2C and transpose; GEMMs; transpose, C2R and crop."""
    fh, fw = fft.fft_size(problem)
    f = fh * (fw // 2 + 1)
    n, c, k, cg = problem.n, problem.c, problem.k, problem.c // problem.groups
    out_h, out_w = problem.out_hw
    item = problem.itemsize
    total = 0
    for planes, h, w in ((n * c, problem.h, problem.w), (k * cg, problem.r, problem.s)):
        total += planes * (h * w * item + fh * fw * REAL)  # pad
        total += planes * (fh * fw * REAL + f * COMPLEX)  # R2C
        total += 2 * planes * f * COMPLEX  # transpose
    total += gemm_bytes(problem, f)
    total += 2 * n * k * f * COMPLEX  # transpose back
    total += n * k * (f * COMPLEX + fh * fw * REAL)  # C2R
    total += n * k * (out_h * out_w * (REAL + item))  # crop (reads what it keeps)
    return Traffic(_launches(problem, DEFAULT_CONFIG), total)


def fused_traffic(problem: ConvProblem) -> Traffic:
    """Our own transforms: operands in, spectra out; GEMMs; spectra in, y out. Each spectrum
    (`_fft_fused.counts`) is written once and read once."""
    spectra = sum(_fft_fused.counts(problem).values()) * COMPLEX
    operands = sum(math.prod(shape) for shape in problem.operand_shapes) * problem.itemsize
    return Traffic(_launches(problem, _fft_fused.FUSED), operands + 2 * spectra)


def _launches(problem: ConvProblem, config: str) -> int:
    return fft.FftCuda().work(problem, config).launches


def gemm_bytes(problem: ConvProblem, f: int) -> int:
    """The frequency GEMMs: both spectra read once, the product written once."""
    n, c, k, cg = problem.n, problem.c, problem.k, problem.c // problem.groups
    return (n * c + k * cg + n * k) * f * COMPLEX


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", default="googlenet:32,resnet50:32",
                        help="name:batch pairs (default googlenet:32,resnet50:32)")
    args = parser.parse_args()
    print("| layer | problem | N (fused) | launches default / fused | MB default / fused |")
    print("|---|---|---|---|---|")
    for spec in args.networks.split(","):
        name, batch = spec.split(":")
        for layer, problem in network_problems(name, int(batch)):
            if fft.FUSED not in fft.FftCuda().configs(problem):
                continue
            before, after = default_traffic(problem), fused_traffic(problem)
            print(f"| {name} {layer.name} | {problem.describe()} | {_fft_fused.size(problem)} "
                  f"| {before.launches} / {after.launches} "
                  f"| {before.bytes / 1e6:.1f} / {after.bytes / 1e6:.1f} |")


if __name__ == "__main__":
    main()
