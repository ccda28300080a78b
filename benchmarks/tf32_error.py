"""Relative error of TF32 GEMM operands in direct (im2col) and Winograd convolution, simulated.

Usage: python benchmarks/tf32_error.py [--channels C] [--size H] [--seed S]

A question of accuracy, not speed, answered on the CPU in float64: one 3x3 stride-1 layer
(C input and output channels, an H x H input, no padding) on standard-normal data, as the
tuner verifies it. The GEMM operands are read three ways: as float32 ("fp32"), truncated to
TF32 (the low 13 mantissa bits cleared: what the tensor cores do with FP32 operands nobody
rounded) and rounded to TF32 (cvt.rna). For Winograd the operands are the transformed filter
U and input V, and the output transform follows in float64. Prints the relative error
against the float64 reference (‖y - ref‖ / ‖ref‖); math "tf32" allows 1e-3
(algorithms/reference.py). algorithms/cuda/winograd.py lets only F(2x2) read TF32 because
of this table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.reference import TF32_TOLERANCE  # noqa: E402
from algorithms.winograd import TRANSFORMS  # noqa: E402

READS = ("fp32", "tf32 truncated", "tf32 rounded")


def read(a: np.ndarray, how: str) -> np.ndarray:
    """`a` as float32 read `how` (see READS), returned in float64."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
    if how == "tf32 truncated":
        bits = bits & np.uint32(0xFFFFE000)
    elif how == "tf32 rounded":  # round half away from zero, as cvt.rna.tf32.f32
        bits = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return bits.view(np.float32).astype(np.float64)


def direct(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Valid 3x3 correlation of x (c, H, W) with w (k, c, 3, 3), in float64."""
    out = x.shape[1] - 2
    y = np.zeros((w.shape[0], out, out))
    for r in range(3):
        for s in range(3):
            y += np.einsum("kc,cpq->kpq", w[:, :, r, s], x[:, r:r + out, s:s + out])
    return y


def winograd(x: np.ndarray, w: np.ndarray, config: str, how: str) -> np.ndarray:
    """The same layer by Winograd `config`, its GEMM operands U and V read `how`; the
    output's whole tiles only."""
    t = TRANSFORMS[config]
    bt, g, at = (np.array(m, dtype=np.float64) for m in (t.bt, t.g, t.at))
    alpha, m = t.m + 2, t.m
    u = read(np.einsum("ij,kcjl,ml->kcim", g, w, g), how)
    tiles = (x.shape[1] - 2) // m
    y = np.zeros((w.shape[0], tiles * m, tiles * m))
    for ti in range(tiles):
        for tj in range(tiles):
            d = x[:, ti * m:ti * m + alpha, tj * m:tj * m + alpha]
            v = read(np.einsum("ij,cjl,ml->cim", bt, d, bt), how)
            y[:, ti * m:(ti + 1) * m, tj * m:(tj + 1) * m] = np.einsum(
                "ij,kjl,ml->kim", at, np.einsum("kcij,cij->kij", u, v), at)
    return y


def relative(y: np.ndarray, ref: np.ndarray) -> float:
    """‖y - ref‖ / ‖ref‖ over y's extent."""
    ref = ref[:, :y.shape[1], :y.shape[2]]
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))


def main() -> None:
    """Print the error table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=128)
    parser.add_argument("--size", type=int, default=26)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.channels < 1 or args.size < 6:
        parser.error("--channels must be >= 1 and --size >= 6")
    rng = np.random.default_rng(args.seed)
    c = args.channels
    x = read(rng.standard_normal((c, args.size, args.size)), "fp32")
    w = read(rng.standard_normal((c, c, 3, 3)), "fp32")
    ref = direct(x, w)
    print(f"3x3 layer, c = k = {c}, {args.size}x{args.size} input, seed {args.seed}; "
          f"relative error against float64 (math \"tf32\" allows {TF32_TOLERANCE:g})\n")
    print("| path | " + " | ".join(READS) + " |")
    print("|---" * (len(READS) + 1) + "|")
    rows = {"direct GEMM (im2col)": [relative(direct(read(x, h), read(w, h)), ref)
                                     for h in READS]}
    for config in TRANSFORMS:
        rows[f"winograd {config}"] = [relative(winograd(x, w, config, h), ref) for h in READS]
    for name, errors in rows.items():
        print(f"| {name} | " + " | ".join(f"{e:.2e}" for e in errors) + " |")


if __name__ == "__main__":
    main()
