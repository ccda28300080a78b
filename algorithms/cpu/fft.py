"""FFT convolution on the CPU: products of 2-D real FFTs, reduced over channels by GEMMs.

Supports float32 (complex64), float64 (complex128), float16 and bfloat16 (stored 16-bit, computed in
float32/complex64 and cast back), with any stride, padding, dilation and groups. Stride is
computed as a stride-1 correlation and then subsampled: the spectra are those of the
stride-1 problem, and only the kept output rows are inverse-transformed along the last axis.

The zero-padded input (cropped to the rows and columns any output reads) is rounded up to
FH x FW = next_fast_len sizes (5-smooth, as scipy.fft.next_fast_len(real=True)) and
transformed with rfft2; no wrap-around reaches the kept outputs because the correlation is
linear over that footprint. The filter spectrum
is the rfft2 of the dilated filter (tap (r, s) at (r*dilation_h, s*dilation_w) of an FH x FW
zero plane), evaluated as a pruned DFT over its r*s non-zero taps: one complex GEMM
[F, r*s] @ [r*s, k*cg] with the conjugated twiddles (cross-correlation, not convolution).
That skips transforming k*cg mostly-zero planes and lands directly in the per-frequency
layout. Per frequency and group the channel reduction is a batched complex GEMM,
[F, n, cg] @ [F, cg, kg] -> [F, n, kg]. A 1x1 filter's only tap sits at the origin, so its
spectrum is flat: every frequency shares the one [cg, kg] matrix and the k*cg*F spectrum
is never materialised.

Workspace (R: real compute element size, 4 or 8; C = 2R; F = FH*(FW//2+1);
cg = c/groups):
    align(max(n*c*FH, n*k*out_h) * FW * R)        padded input, then the kept output rows
  + 2 * align(max(n*c, n*k) * F * C)              input/output spectra, per plane and per freq
  + align(r*s * k*cg * C)                         the filter taps as complex
  + when r*s > 1: align(k*cg * F * C)             conjugated filter spectrum, per frequency
                + align(F * r*s * C)              twiddles
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar, Final

import numpy as np

from algorithms.base import WorkspaceLayout
from algorithms.cpu._by_forward import CpuByForward
from algorithms.cpu._common import CpuAlgorithm, compute_dtype
from algorithms.cpu.gemm import matmul
from algorithms.problem import ConvProblem

#: Frequencies per block when moving spectra between per-plane and per-frequency layouts:
#: a whole-array transposed copy strides through memory and runs several times slower.
_FREQ_BLOCK = 64


@dataclass(frozen=True)
class _Plan:
    """FFT sizes and the workspace layout for one problem."""

    used_h: int  # padded-input rows any output reads
    used_w: int
    fft_h: int
    fft_w: int
    layout: WorkspaceLayout

    @property
    def freqs(self) -> int:
        """Number of rfft2 coefficients per plane."""
        return self.fft_h * (self.fft_w // 2 + 1)


@functools.cache
def next_fast_len(n: int) -> int:
    """The least 5-smooth number >= n (n >= 1): scipy.fft.next_fast_len(n, real=True), the
    sizes pocketfft (NumPy's FFT too) transforms fastest.

    Ours rather than SciPy's: importing scipy.fft took 0.33 s of a new process's first
    cached answer on the CPU backend, whose candidates' workspaces this sizes."""
    best = 1 << (n - 1).bit_length()  # the power of two
    odd5 = 1
    while odd5 < best:
        odd = odd5
        while odd < best:
            best = min(best, odd << (-(-n // odd) - 1).bit_length())  # odd * 2^k >= n
            odd *= 3
        odd5 *= 5
    return best


def _plan(problem: ConvProblem) -> _Plan:
    n, c, k = problem.n, problem.c, problem.k
    taps = problem.r * problem.s
    filters = k * (c // problem.groups)
    out_h, out_w = problem.out_hw
    used_h = (out_h - 1) * problem.stride[0] + problem.dilated_r
    used_w = (out_w - 1) * problem.stride[1] + problem.dilated_s
    fft_h, fft_w = next_fast_len(used_h), next_fast_len(used_w)
    real = compute_dtype(problem)
    cplx = np.result_type(real, np.complex64)
    freqs = fft_h * (fft_w // 2 + 1)
    planes = max(n * c, n * k)
    layout = (
        WorkspaceLayout()
        # Rows of FW reals: the padded input, later only the kept output rows.
        .add("real", (max(n * c * fft_h, n * k * out_h) * fft_w,), real)
        .add("spec_a", (planes * freqs,), cplx)
        .add("spec_b", (planes * freqs,), cplx)
        .add("taps", (taps, filters), cplx)
    )
    if taps > 1:
        layout.add("w_freq", (freqs, filters), cplx).add("twiddle", (freqs, taps), cplx)
    return _Plan(used_h, used_w, fft_h, fft_w, layout)


#: Every transform is "ortho"-scaled (the forward and inverse scales multiply to the usual
#: 1/(FH*FW)): with the default norm NumPy passes the forward scale as the Python int 1,
#: which picks the float64 kernel for float32 data and casts whole arrays through fresh
#: temporaries, about 3x slower than the float32 kernel an "ortho" float32 scale selects.
_NORM: Final = "ortho"


def _rfft2(planes: np.ndarray, out: np.ndarray) -> None:
    """2-D real FFT of (m, FH, FW) `planes` into (m, FH, FW//2+1) `out`, with no temporaries."""
    np.fft.rfft(planes, axis=-1, out=out, norm=_NORM)
    np.fft.fft(out, axis=-2, out=out, norm=_NORM)


def _twiddles(size: int, count: int, taps: int, dilation: int) -> np.ndarray:
    """conj(exp(-2πi·f·t·dilation/size)) for the first `count` frequencies f and taps t."""
    phase = np.outer(np.arange(count), np.arange(taps) * dilation) % size
    return np.exp(2j * np.pi * phase / size)


def _filter_spectrum(
    w: np.ndarray, problem: ConvProblem, plan: _Plan, buf: dict[str, np.ndarray]
) -> np.ndarray:
    """Conjugated rfft2 of the dilated, zero-padded filters, (F, g, cg, kg) or flat (g, cg, kg)."""
    g = problem.groups
    cg, kg = problem.c // g, problem.k // g
    half = plan.fft_w // 2 + 1
    taps = buf["taps"]
    np.copyto(
        taps.reshape(problem.r, problem.s, g, cg, kg),
        w.reshape(g, kg, cg, problem.r, problem.s).transpose(3, 4, 0, 2, 1),
    )
    if "w_freq" not in buf:
        return taps.reshape(g, cg, kg)  # a lone tap at the origin: the same at every frequency
    # The 2-D twiddle of tap (r, s) at frequency (u, v) is a row factor times a column one.
    rows = _twiddles(plan.fft_h, plan.fft_h, problem.r, problem.dilation[0])
    cols = _twiddles(plan.fft_w, half, problem.s, problem.dilation[1])
    twiddle = buf["twiddle"]
    np.multiply(
        rows[:, None, :, None],
        cols[None, :, None, :],
        out=twiddle.reshape(plan.fft_h, half, problem.r, problem.s),
    )
    matmul(twiddle, taps, out=buf["w_freq"])
    return buf["w_freq"].reshape(plan.freqs, g, cg, kg)


class _FftConvForward(CpuAlgorithm):
    """Convolution theorem with per-frequency channel GEMMs."""

    name: ClassVar[str] = "fft"

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """All spectra and padded buffers (see the module docstring)."""
        return _plan(problem).layout.nbytes

    def _run(
        self, x: np.ndarray, w: np.ndarray, y: np.ndarray, workspace: np.ndarray | None,
        problem: ConvProblem, config: str,
    ) -> None:
        """y = x ⋆ w through the frequency domain."""
        plan = _plan(problem)
        buf = plan.layout.views(workspace)
        n, c, k, g = problem.n, problem.c, problem.k, problem.groups
        cg, kg = c // g, k // g
        (ph, pw), (sh, sw) = problem.pad, problem.stride
        out_h, out_w = problem.out_hw
        fh, fw, freqs = plan.fft_h, plan.fft_w, plan.freqs
        half = fw // 2 + 1

        # Input: zero-padded (and cropped to the rows/columns any output reads), then rfft2.
        rows = max(0, min(problem.h, plan.used_h - ph))
        cols = max(0, min(problem.w, plan.used_w - pw))
        x_pad = buf["real"][: n * c * fh * fw].reshape(n, c, fh, fw)
        x_pad.fill(0)
        np.copyto(x_pad[:, :, ph : ph + rows, pw : pw + cols], x[:, :, :rows, :cols])
        x_spec = buf["spec_a"][: n * c * freqs].reshape(n * c, fh, half)
        _rfft2(x_pad.reshape(n * c, fh, fw), x_spec)
        x_freq = buf["spec_b"][: n * c * freqs].reshape(freqs, g, n, cg)
        x_planes = x_spec.reshape(n, g, cg, freqs)
        for f0 in range(0, freqs, _FREQ_BLOCK):
            f1 = f0 + _FREQ_BLOCK
            np.copyto(x_freq[f0:f1], x_planes[..., f0:f1].transpose(3, 1, 0, 2))

        w_freq = _filter_spectrum(w, problem, plan, buf)

        # Channel reduction: one small complex GEMM per frequency and group. The input
        # spectrum per plane is dead by now, so its buffer takes the product.
        y_freq = buf["spec_a"][: freqs * g * n * kg].reshape(freqs, g, n, kg)
        matmul(x_freq, w_freq, out=y_freq)
        y_spec = buf["spec_b"][: n * k * freqs].reshape(n, g, kg, freqs)
        for f0 in range(0, freqs, _FREQ_BLOCK):
            f1 = f0 + _FREQ_BLOCK
            np.copyto(y_spec[..., f0:f1], y_freq[f0:f1].transpose(2, 1, 3, 0))

        # Inverse: along rows for every column, then along columns only for kept rows.
        y_spec3 = y_spec.reshape(n * k, fh, half)
        np.fft.ifft(y_spec3, axis=-2, out=y_spec3, norm=_NORM)
        y_rows = buf["real"][: n * k * out_h * fw].reshape(n * k, out_h, fw)
        kept_rows = y_spec3[:, : (out_h - 1) * sh + 1 : sh]
        np.fft.irfft(kept_rows, n=fw, axis=-1, out=y_rows, norm=_NORM)
        kept = y_rows[:, :, : (out_w - 1) * sw + 1 : sw]
        np.copyto(y.reshape(n * k, out_h, out_w), kept)


class FftConv(CpuByForward, _FftConvForward):
    """The forward algorithm above, and both backward directions through it."""
