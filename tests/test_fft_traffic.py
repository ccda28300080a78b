"""benchmarks/fft_traffic.py: the byte counts of fft's two configurations."""

from __future__ import annotations

from algorithms.problem import ConvProblem
from benchmarks.fft_traffic import default_traffic, fused_traffic

# GoogLeNet's inception3b.5x5 at batch 32: fused N = 32, F = 32 * 17 = 544 frequencies.
INCEPTION3B_5X5 = ConvProblem(n=32, c=32, h=28, w=28, k=96, r=5, s=5, pad=(2, 2))


def test_fused_counts_each_pass_once() -> None:
    f = 32 * 17
    x_in = 32 * 32 * (28 * 28 * 4 + f * 8)  # x read, its spectrum written
    w_in = 96 * 32 * (5 * 5 * 4 + f * 8)
    gemm = (32 * 32 + 96 * 32 + 32 * 96) * f * 8
    y_out = 32 * 96 * (f * 8 + 28 * 28 * 4)
    found = fused_traffic(INCEPTION3B_5X5)
    assert found.bytes == x_in + w_in + gemm + y_out
    assert found.launches == 3  # both forward transforms in one launch, a GEMM, the inverse


def test_default_moves_the_padded_planes_and_transposes_too() -> None:
    # cuFFT's 32 x 32 planes (H + 2 pad = 32): the padded planes, three transposes and the
    # crop's read on top of what fused moves.
    f = 32 * 17
    planes = 32 * 32 + 96 * 32
    extra = (planes * 32 * 32 * 4 * 2  # pad writes them, R2C reads them
             + 2 * (planes + 32 * 96) * f * 8  # three transposes, each a read and a write
             + 32 * 96 * 32 * 32 * 4  # C2R writes the output planes
             + 32 * 96 * 28 * 28 * 4)  # crop reads the part it keeps
    found = default_traffic(INCEPTION3B_5X5)
    assert found.bytes == fused_traffic(INCEPTION3B_5X5).bytes + extra
    assert found.launches == 10
