"""Relative error of TF32 GEMM operands in direct (im2col) and Winograd convolution, simulated.

Usage: python benchmarks/tf32_error.py [--channels C] [--size H] [--seed S] [--draws N]

A question of accuracy, not speed, answered on the CPU in float64: one 3x3 stride-1 layer
(C input and output channels, an H x H input, no padding) on standard-normal data, as the
tuner verifies it. The GEMM operands are read three ways: as float32 ("fp32"), truncated to
TF32 (the low 13 mantissa bits cleared: what the tensor cores do with FP32 operands nobody
rounded) and rounded to TF32 (cvt.rna). For Winograd the operands are the transformed filter
U and input V, and the output transform follows in float64. Prints the relative error
against the float64 reference (‖y - ref‖ / ‖ref‖); math "tf32" allows 1e-3
(algorithms/reference.py). algorithms/cuda/winograd.py lets only F(2x2) read TF32 because
of this table.

`--draws N` then draws N small random problems as the random tests do
(tests/random_problems.py, every direction) and counts how many exceed 1e-3 with TF32
operands (truncated, rounded) against the float64 reference, by their count of outputs:
the norm-wise bound is loose on a handful of sums, which is why those tests draw math
"tf32" only for problems of 32 outputs or more.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.reference import TF32_TOLERANCE, reference, relative_error  # noqa: E402
from algorithms.winograd import TRANSFORMS  # noqa: E402
from tests.precision import make_problem  # noqa: E402
from tests.random_problems import random_problem  # noqa: E402

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


def random_exceedances(draws: int, seed: int) -> dict[str, list[int]]:
    """Per read ("tf32 truncated", "tf32 rounded") and output-count class ("< 32", ">= 32"):
    [problems, exceeding TF32_TOLERANCE] over `draws` random small problems."""
    rng = np.random.default_rng(seed)
    counts = {f"{how}, {size} outputs": [0, 0] for how in READS[1:] for size in ("< 32", ">= 32")}
    directions = ("forward", "backward_data", "backward_filter")
    for _ in range(draws):
        keywords = {**random_problem(rng, str(rng.choice(directions))), "dtype": "float32"}
        try:
            problem = make_problem(**keywords)
        except ValueError:  # the dilated filter does not fit the padded input
            continue
        a_shape, b_shape, out_shape = problem.operand_shapes
        a = read(rng.standard_normal(a_shape), "fp32")
        b = read(rng.standard_normal(b_shape), "fp32")
        ref = reference(a, b, problem)
        size = "< 32" if np.prod(out_shape) < 32 else ">= 32"
        for how in READS[1:]:
            entry = counts[f"{how}, {size} outputs"]
            entry[0] += 1
            entry[1] += relative_error(reference(read(a, how), read(b, how), problem),
                                       ref) > TF32_TOLERANCE
    return counts


def main() -> None:
    """Print the error table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=128)
    parser.add_argument("--size", type=int, default=26)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--draws", type=int, default=0,
                        help="random small problems to check too (0: none)")
    args = parser.parse_args()
    if args.channels < 1 or args.size < 6 or args.draws < 0:
        parser.error("--channels must be >= 1, --size >= 6 and --draws >= 0")
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
    if args.draws:
        print(f"\n{args.draws} random small problems (tests/random_problems.py), float32:\n")
        print("| TF32 operands, outputs | problems | over 1e-3 |")
        print("|---|---|---|")
        for name, (problems, over) in random_exceedances(args.draws, args.seed).items():
            print(f"| {name} | {problems} | {over} |")


if __name__ == "__main__":
    main()
