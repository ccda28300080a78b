"""Bytes a wgmma run of a stride-1 pointwise layer (with --taps, of a layer whose filter has
taps) moves through DRAM at least, with NHWC copies of the operands and with
implicit_gemm_wgmma's NCHW configurations (no GPU).

Usage: python benchmarks/pointwise_bytes.py [--batch 32] [--networks resnet50,...] [--taps]
                                            [--results bench_tf32.json ...]

An NHWC configuration of `implicit_gemm_wgmma` copies x and w before its GEMM (one part at
math "tf32", TF32 big and small parts at "fp32", each as large as the operand) and the GEMM
reads the copies; an NCHW configuration ("-nchw", `algorithms/cuda/_wgmma_nchw.py`) reads x
and w as they are, but for a filter with taps, which it transposes first (w read, then
written, then read by the GEMM). Both write y once. Each operand is counted once per pass
over it (the least either can move: a GEMM re-reads tiles through L2, not DRAM, when they
fit). With
`--results` (bench_gpu JSON files), each layer's row also gives cuDNN's time and the best
NHWC wgmma time of that run, next to the time the NCHW bytes alone take at the copy
bandwidth the H100 reached (BANDWIDTH). Arithmetic on shapes, not a measurement.
"""

from __future__ import annotations

import argparse
import json
from math import prod
from pathlib import Path

from algorithms.cuda import _wgmma_nchw
from algorithms.problem import ConvProblem
from tuner.networks import network_problems

#: Bytes per second of a device-to-device copy on the H100 (issue 10: about 3.0 TB/s).
BANDWIDTH = 3.0e12


def moved(problem: ConvProblem) -> tuple[int, int]:
    """(NHWC bytes, NCHW bytes) a run moves at least: copies, then the GEMM's reads and y."""
    item = problem.itemsize
    x, w, y = (prod(s) * item for s in problem.operand_shapes)
    parts = _wgmma_nchw.copies(problem.math)
    nhwc = (x + parts * x) + (w + parts * w) + parts * (x + w) + y
    transpose = 2 * w if _wgmma_nchw.taps(problem) else 0
    return nhwc, x + w + y + transpose


def stored_times(paths: list[str]) -> dict[tuple[str, str, str], tuple[float, float]]:
    """(network, layer, math) -> (cuDNN ms, best NHWC wgmma ms) from bench_gpu JSON files."""
    found: dict[tuple[str, str, str], tuple[float, float]] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        for row in data["rows"]:
            configs = row["algorithms"].get("implicit_gemm_wgmma", {}).get("configs", {})
            times = [c["ms"] for name, c in configs.items()
                     if c.get("status") == "ok" and _wgmma_nchw.SUFFIX not in name]
            math = row["problem"].get("math", "fp32")
            if times:
                found[row["network"], row["layer"], math] = (row["cudnn"]["ms"], min(times))
    return found


def main() -> None:
    """Print the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--networks", default="resnet50,googlenet,mobilenet_v2,vgg16")
    parser.add_argument("--results", nargs="*", default=[])
    parser.add_argument("--taps", action="store_true",
                        help="the layers whose filter has taps, not the pointwise ones")
    args = parser.parse_args()
    times = stored_times(args.results)
    print("| network | layer | problem | math | MB NHWC | MB NCHW | NCHW/NHWC | "
          "NCHW bytes at 3.0 TB/s (us) | cuDNN (us) | wgmma NHWC best (us) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for network in args.networks.split(","):
        for math in ("tf32", "fp32"):
            for layer, problem in network_problems(network, args.batch, "float32", math):
                wanted = _wgmma_nchw.taps(problem) if args.taps else problem.pointwise
                if not (_wgmma_nchw.offered(problem) and wanted):
                    continue  # strided 1x1: nhwc_copy_bytes.py's gathers
                nhwc, nchw = moved(problem)
                cudnn, best = times.get((network, layer.name, math), (None, None))
                stored = (f"{cudnn * 1e3:.1f} | {best * 1e3:.1f}" if cudnn is not None
                          and best is not None else "- | -")
                print(f"| {network} | {layer.name} | {problem.describe()} | {math} | "
                      f"{nhwc / 1e6:.1f} | {nchw / 1e6:.1f} | {nchw / nhwc:.2f} | "
                      f"{nchw / BANDWIDTH * 1e6:.1f} | {stored} |")


if __name__ == "__main__":
    main()
