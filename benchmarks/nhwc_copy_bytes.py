"""Bytes the NHWC copy of x moves for the strided 1x1 layers of the built-in networks (no GPU).

Usage: python benchmarks/nhwc_copy_bytes.py [--batch 32] [--networks resnet50,googlenet]

`implicit_gemm_wgmma` (always) and `implicit_gemm_tc` ("-nhwc" configurations) copy x to
NHWC before their GEMM: 3xTF32 (float32 at math "fp32") writes two parts, the rest one. For
a 1x1 filter at a stride without padding the copy now gathers only the pixels the filter
reads (`algorithms/cuda/_rearrange.gathered`). This prints, per such layer and per copy,
the bytes read and written before (every pixel) and after (the gathered ones): reads count
whole 32-byte sectors of the rows the copy touches, since a stride-2 gather still touches
every sector of the rows it reads. Arithmetic on shapes, not a measurement.
"""

from __future__ import annotations

import argparse

from algorithms.cuda._rearrange import gathered
from algorithms.problem import ConvProblem
from tuner.networks import network_problems

SECTOR = 32


def copy_bytes(problem: ConvProblem, parts: int) -> tuple[int, int]:
    """(bytes before, bytes after) the NHWC copy of x moves, reads plus writes."""
    item = problem.itemsize
    full = problem.n * problem.c * problem.h * problem.w * item
    out_h, out_w = problem.out_hw
    gathered = problem.n * problem.c * out_h * out_w * item
    # The gather reads out_h of every stride_h rows, each row's sectors that hold a read
    # pixel: all of them whenever stride_w * item <= SECTOR.
    row_bytes = problem.w * item
    read_row = row_bytes if problem.stride[1] * item <= SECTOR else out_w * SECTOR
    read = problem.n * problem.c * out_h * min(row_bytes, read_row)
    return full + parts * full, read + parts * gathered


def main() -> None:
    """Print the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--networks", default="resnet50,googlenet,mobilenet_v2,vgg16")
    args = parser.parse_args()
    print("| network | layer | problem | copy | MB before | MB after | after/before |")
    print("|---|---|---|---|---|---|---|")
    for network in args.networks.split(","):
        for dtype, math, parts, what in (("float32", "fp32", 2, "3xTF32 (wgmma)"),
                                         ("float32", "tf32", 1, "TF32 (wgmma)"),
                                         ("float32", "fp32", 1, "bits (tc -nhwc)"),
                                         ("float16", "fp32", 1, "float16")):
            for layer, problem in network_problems(network, args.batch, dtype, math):
                if gathered(problem) == problem:  # not a strided 1x1 layer
                    continue
                before, after = copy_bytes(problem, parts)
                print(f"| {network} | {layer.name} | {problem.describe()} | {what} | "
                      f"{before / 1e6:.1f} | {after / 1e6:.1f} | {after / before:.2f} |")


if __name__ == "__main__":
    main()
