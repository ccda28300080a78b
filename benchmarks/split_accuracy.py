"""How accurate a float32 GEMM is when each operand is split into two 16-bit parts, against
3xTF32 (CPU simulation of the tensor core's arithmetic, accuracy only, no speed).

Why: strict FP32 on tensor cores is 3xTF32 today (implicit_gemm_tc, implicit_gemm_wgmma), whose
three TF32 products cost three times the tensor work of one, and whose big and small parts
take 8 bytes an element. Two FP16 parts carry as many mantissa bits (11 + 11) as two TF32
ones, at half the tensor work a product (FP16 wgmma runs K = 16 where TF32 runs 8) and half
the bytes, but FP16's exponent range is narrow (6e-5 to 65504 in normal numbers): the
operands must be scaled first. This script measures whether a per-tensor power-of-two scale
(max |a| * s near 2^14) keeps the product FP32-accurate (relative error <= 1e-5, the
`math="fp32"` bar) on inputs of every kind, before anyone writes the kernel.

The model of a tensor-core instruction is the emulator's (tests/cuda_emu/warp.h
`product_sums`): each wgmma adds its K products exactly to the accumulator and truncates the
sum to float32 (round toward zero). The kernels' order is kept: per 32-byte K slice the two
small-term products, then the big one, into partial sums added to the float32 accumulator
every FLUSH_STEPS K-steps (kernels/wgmma.cuh). Error: the tuner's relative_error, the norm
of the difference over the norm of the float64 product.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.reference import reference, relative_error  # noqa: E402
from tests.cuda_emu.warp_cases import from_bf16, tf32, to_bf16  # noqa: E402
from tests.precision import make_problem  # noqa: E402
from tests.random_problems import random_problem  # noqa: E402

#: wgmma.cuh FLUSH_STEPS: K-steps (four wgmma K slices each) per partial sum.
FLUSH_STEPS = 4


def bf16_rn(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even), as float32."""
    return from_bf16(to_bf16(a))


def f16_rn(a: np.ndarray) -> np.ndarray:
    """float32 -> float16 (round to nearest even, subnormals and overflow as IEEE), as float32."""
    with np.errstate(over="ignore"):
        return a.astype(np.float32).astype(np.float16).astype(np.float32)


def round_toward_zero(s: np.ndarray) -> np.ndarray:
    """The float32 nearest each of `s` that is not farther from zero (warp.h's)."""
    f = s.astype(np.float32)
    over = np.isfinite(f) & (np.abs(f.astype(np.float64)) > np.abs(s))
    f[over] = np.nextafter(f[over], np.float32(0))
    return f


Split = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, float]]


def split_tf32(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """3xTF32's parts (rearrange.cu PARTS 2): tf32(a), tf32(a - tf32(a)); no scale."""
    big = tf32(a)
    return big, tf32(a.astype(np.float32) - big), 1.0


def split_16(round16: Callable[[np.ndarray], np.ndarray], scaled: bool) -> Split:
    """Two 16-bit parts of a * s: hi = r(a s), lo = r(a s - hi); s = 1, or the power of two
    that takes max |a| to [2^14, 2^15) (below FP16's 65504, with room for nothing else)."""

    def split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        s = 1.0
        peak = float(np.abs(a).max())
        if scaled and peak > 0:
            s = 2.0 ** (14 - int(np.floor(np.log2(peak))))
        scaled_a = (a.astype(np.float64) * s).astype(np.float32)  # exact: a power of two
        hi = round16(scaled_a)
        return hi, round16(scaled_a - hi), s

    return split


def tensor_core_gemm(a: np.ndarray, b: np.ndarray, split: Split, slice_k: int,
                     step_k: int, truncate: bool = True) -> np.ndarray:
    """a (m x K) @ b (K x n) as the wgmma kernels run it with two parts an operand: per slice
    of `slice_k` (one wgmma), small-term products then the big one, each truncated (or, with
    `truncate` False, rounded to nearest) into the partial sums; the partials added to the
    float32 accumulator every FLUSH_STEPS K-steps of `step_k`; the result unscaled."""
    to_float = round_toward_zero if truncate else (lambda v: v.astype(np.float32))
    a_big, a_small, sa = split(a)
    b_big, b_small, sb = split(b)
    m, k = a.shape
    n = b.shape[1]
    acc = np.zeros((m, n), np.float32)
    part = np.zeros((m, n), np.float32)
    flush_every = FLUSH_STEPS * step_k
    as64 = [x.astype(np.float64) for x in (a_big, a_small, b_big, b_small)]
    ab, asm, bb, bsm = as64
    for k0 in range(0, k, slice_k):
        cut = slice(k0, k0 + slice_k)
        for left, right in ((asm, bb), (ab, bsm), (ab, bb)):
            part = to_float(part.astype(np.float64) + left[:, cut] @ right[cut, :])
        if (k0 + slice_k) % flush_every == 0 or k0 + slice_k >= k:
            acc = (acc + part).astype(np.float32)
            part[...] = 0
    return acc.astype(np.float64) / (sa * sb)


def inputs(kind: str, m: int, n: int, k: int, rng: np.random.Generator) -> tuple[
        np.ndarray, np.ndarray]:
    """(a, b) float32 of one kind: the tuner's check inputs, or a network's, or harder."""
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    if kind == "activations":  # ReLU outputs against He-initialised weights
        a = np.maximum(a, 0.0)
        b *= np.sqrt(2.0 / k)
    elif kind == "wide":  # magnitudes log-uniform over 2^-24 .. 2^8 (32 binades)
        a = np.sign(a) * 2.0 ** rng.uniform(-24, 8, a.shape)
        b = np.sign(b) * 2.0 ** rng.uniform(-24, 8, b.shape)
    elif kind == "outliers":  # one element in a thousand 10^4 times the others
        a[rng.random(a.shape) < 1e-3] *= 1e4
    elif kind == "large":  # past FP16's range unscaled
        a *= 1e5
        b *= 1e3
    elif kind == "small":  # below FP16's normal numbers unscaled
        a *= 1e-6
        b *= 1e-4
    elif kind.startswith("rows_"):  # the second half of a's rows (an image of the batch)
        a[m // 2:] /= float(kind.removeprefix("rows_"))  # that many times smaller
    return a.astype(np.float32), b.astype(np.float32)


def measured_rows(kind: str, m: int) -> slice:
    """The rows whose error is reported: the smaller half's for a "rows_" kind (one scale
    per tensor serves the larger; the whole product's error would hide the smaller's)."""
    return slice(m // 2, None) if kind.startswith("rows_") else slice(None)


METHODS: dict[str, tuple[Split, int, int] | None] = {
    "float32 (NumPy's SGEMM)": None,
    "3xTF32 (shipped)": (split_tf32, 8, 32),
    "3xFP16, scaled": (split_16(f16_rn, True), 16, 64),
    "3xFP16, unscaled": (split_16(f16_rn, False), 16, 64),
    "3xBF16 (FP32's range: no scale)": (split_16(bf16_rn, False), 16, 64),
}
KINDS = ("normal", "activations", "wide", "outliers", "large", "small", "rows_1e5", "rows_1e6",
         "rows_1e7")


def conv_draws(split: Split, draws: int, min_outputs: int, rng: np.random.Generator
               ) -> tuple[int, int, float]:
    """(draws, how many past 1e-5, the worst error) of `split`'s three products, summed
    exactly, on small random float32 forward problems of the random tests' kind
    (tests/random_problems.py) with C/groups a multiple of 8 and `min_outputs` outputs or
    more: where a norm-wise error over few outputs meets one cancelling sum."""
    over, worst, done = 0, 0.0, 0
    while done < draws:
        kw = {**random_problem(rng, "forward"), "dtype": "float32", "math": "fp32"}
        try:
            problem = make_problem(**kw)
        except ValueError:  # the dilated filter does not fit
            continue
        x_shape, w_shape, y_shape = problem.operand_shapes
        if (problem.c // problem.groups) % 8 or int(np.prod(y_shape)) < min_outputs:
            continue
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        xb, xs, sx = split(x)
        wb, ws, sw = split(w)
        parts = [v.astype(np.float64) for v in (xb, xs, wb, ws)]
        y = np.zeros(y_shape)
        for a, b in ((parts[1], parts[2]), (parts[0], parts[3]), (parts[0], parts[2])):
            y += reference(a, b, problem)
        y /= sx * sw
        error = relative_error(y, reference(x.astype(np.float64), w.astype(np.float64), problem))
        over += error > 1e-5
        worst = max(worst, error)
        done += 1
    return done, over, worst


def main() -> None:
    """Print a markdown table: relative error of each method on each kind of input."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--k", type=int, nargs="+", default=[576, 4608])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sums", choices=("truncated", "nearest"), default="truncated",
                        help="how a wgmma rounds its sums: toward zero (the emulator's "
                             "model) or to nearest")
    parser.add_argument("--conv-draws", type=int, default=0, metavar="N",
                        help="instead: N small random convolutions per split (conv_draws)")
    parser.add_argument("--min-outputs", type=int, default=1)
    args = parser.parse_args()
    if args.conv_draws:
        rng = np.random.default_rng(args.seed)
        print(f"{args.conv_draws} random float32 problems, C/groups % 8 == 0, >= "
              f"{args.min_outputs} outputs, seed {args.seed}; products summed exactly\n")
        print("| split | draws | past 1e-5 | worst |\n|---|---|---|---|")
        for name, how in METHODS.items():
            if how is not None and "unscaled" not in name:
                done, over, worst = conv_draws(how[0], args.conv_draws, args.min_outputs, rng)
                print(f"| {name} | {done} | {over} | {worst:.2e} |")
        return
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print(f"m = {args.m}, n = {args.n}, seed {args.seed}, wgmma sums {args.sums}; relative "
          "error against float64\n")
    print("| K | inputs | " + " | ".join(METHODS) + " |")
    print("|---|---|" + "---|" * len(METHODS))
    for k in args.k:
        for kind in KINDS:
            a, b = inputs(kind, args.m, args.n, k, rng)
            ref = a.astype(np.float64) @ b.astype(np.float64)
            cells = []
            for how in METHODS.values():
                with np.errstate(over="ignore", invalid="ignore"):
                    y = (a @ b).astype(np.float64) if how is None else tensor_core_gemm(
                        a, b, *how, truncate=args.sums == "truncated")
                rows = measured_rows(kind, args.m)
                error = relative_error(y[rows], ref[rows])
                cells.append("inf/NaN" if not np.isfinite(error) else f"{error:.1e}")
            print(f"| {k} | {kind} | " + " | ".join(cells) + " |")
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
