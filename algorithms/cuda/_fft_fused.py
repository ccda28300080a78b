"""fft's "fused" configuration: the FFT convolution with its transforms as our own kernels.

kernels/fft_helpers.cu's `fft_fused_forward` and `fft_fused_inverse`, in two launches
besides the frequency GEMMs (algorithms/cuda/fft.py, whose cuFFT path takes nine):
1. fft_fused_forward, x's and the filter's planes in one launch (x's blocks first): each
   block of 128 threads stages 128 / N planes in shared memory, places them as fft_pad would
   (padding, dilation), runs the row and column FFTs there (radix 2, in registers, FP32) and
   writes the spectra frequency-major: xt (F, n*c) and wt (F, k*cg), F = N * (N/2 + 1), what
   cuFFT's path gets from padded planes, R2C and a transpose each. One launch, not one each:
   on an H200 (2026-11-27) x's alone ran at 12% occupancy and the filter's at 26%.
2. The frequency GEMMs, as in the cuFFT path.
3. fft_fused_inverse: each block gathers its planes' spectra from yt (F, n*k), runs the
   inverse FFTs (rows only where an output row starts) and writes y cropped, strided and
   scaled.

N (4, 8, 16 or 32) is the smallest covering H + pad_h, the last output row's start and the
filter's reach, and likewise for the width (`size`): not H + 2 pad_h, since a tap past N reads
bottom padding, zeros, and wraps onto the top padding, zeros too. Offered for float16 and
float32 storage (the transforms run in float32) and filters of more than one tap (a 1x1
filter's spectrum is flat: the GEMM alone, with three transforms around it).

Why: on GoogLeNet's 5x5 layers cuDNN's FP32 pick is an FFT (74 TFLOP/s-equivalent on
inception3b.5x5 on an H100, 0.052 ms), while the cuFFT path spent 0.149 ms of device time and
0.2 ms of host time there, in nine launches and seven passes over padded planes or spectra
(BENCHMARKS.md, "fft fused"). Workspace: xt, wt and yt (complex64), each 256-byte aligned.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from algorithms.base import WorkspaceLayout
from algorithms.cuda._launch import POINTER, Address, KernelLaunch, enqueue
from algorithms.cuda._loader import CTYPES, ceil_div, require_aligned, tensors_fit_int32
from algorithms.problem import ConvProblem

KERNEL_FILE = "fft_helpers.cu"
#: The configuration's name.
FUSED = "fused"
#: Transform sizes (N x N planes, in a block's shared memory), and storage dtypes.
SIZES = (4, 8, 16, 32)
DTYPES = ("float16", "float32")
#: Threads of a block (FUSED_THREADS in the kernels): it takes THREADS / N planes.
THREADS = 128

#: frequency_gemms(problem, complex dtype, frequencies, xt, wt, yt addresses): fft's GEMMs.
Gemms = Callable[[ConvProblem, str, int, int, int, int], None]


def names(dtype: str, n: int) -> tuple[str, str]:
    """The forward and inverse kernel instances for (dtype, N)."""
    return (f"fft_fused_forward<{CTYPES[dtype]}, {n}>",
            f"fft_fused_inverse<{CTYPES[dtype]}, {n}>")


def shipped_kernels() -> tuple[str, ...]:
    """Every instance this configuration can ask for."""
    return tuple(name for dtype in DTYPES for n in SIZES for name in names(dtype, n))


def size(problem: ConvProblem) -> int:
    """N of the N x N transforms, or 0 where more than 32 is needed (see the docstring)."""
    out_h, out_w = problem.out_hw
    need = max(problem.h + problem.pad[0], (out_h - 1) * problem.stride[0] + 1,
               (problem.r - 1) * problem.dilation[0] + 1,
               problem.w + problem.pad[1], (out_w - 1) * problem.stride[1] + 1,
               (problem.s - 1) * problem.dilation[1] + 1)
    return next((n for n in SIZES if n >= need), 0)


def counts(problem: ConvProblem) -> dict[str, int]:
    """Complex element counts of the frequency-major spectra xt, wt and yt."""
    n = size(problem)
    f = n * (n // 2 + 1)
    cg = problem.c // problem.groups
    return {"xt": f * problem.n * problem.c, "wt": f * problem.k * cg,
            "yt": f * problem.n * problem.k}


def fits(problem: ConvProblem) -> bool:
    """Whether the kernels take the problem: a 16- or 32-bit dtype, more than one tap,
    planes within 32 x 32 and spectra of 32-bit-indexable size."""
    return (problem.dtype in DTYPES and problem.r * problem.s > 1 and size(problem) > 0
            and tensors_fit_int32(problem, *counts(problem).values()))


def blocks(problem: ConvProblem) -> int:
    """Blocks of the inverse kernel (one per THREADS / N output planes)."""
    return ceil_div(problem.n * problem.k, THREADS // size(problem))


def run(x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem,
        get_kernel: Callable[[str, str], Any], gemms: Gemms) -> None:
    """Enqueue both forward transforms, the GEMMs and the inverse transform."""
    plan = _launches(problem)
    require_aligned("fft: workspace", workspace, 8)
    xt, wt, yt = (Address(workspace.data.ptr + offset) for offset in plan.offsets)
    enqueue(plan.forward, get_kernel, x, xt, w, wt)
    gemms(problem, "complex64", plan.frequencies, xt.ptr, wt.ptr, yt.ptr)
    enqueue(plan.inverse, get_kernel, yt, y)


@dataclass(frozen=True)
class _Launches:
    """What a run enqueues for one problem, worked out once."""

    offsets: tuple[int, int, int]  # xt, wt, yt in the workspace
    frequencies: int
    forward: KernelLaunch  # x -> xt and w -> wt
    inverse: KernelLaunch  # yt -> y


def layout(problem: ConvProblem) -> WorkspaceLayout:
    """The workspace: xt, wt and yt (complex64), in that order."""
    found = WorkspaceLayout()
    for name, count in counts(problem).items():
        found.add(name, (count,), "complex64")
    return found


def _ints(*values: int) -> tuple[np.int32, ...]:
    return tuple(np.int32(v) for v in values)


@functools.lru_cache(maxsize=1024)
def _launches(problem: ConvProblem) -> _Launches:
    n = size(problem)
    per_block = THREADS // n
    forward, inverse = names(problem.dtype, n)
    c, k, cg = problem.c, problem.k, problem.c // problem.groups
    out_h, out_w = problem.out_hw

    regions = layout(problem).byte_ranges()
    planes_x, planes_w = problem.n * c, k * cg
    return _Launches(
        offsets=(regions["xt"].start, regions["wt"].start, regions["yt"].start),
        frequencies=n * (n // 2 + 1),
        forward=KernelLaunch(
            KERNEL_FILE, forward,
            (ceil_div(planes_x, per_block) + ceil_div(planes_w, per_block),), (THREADS,),
            (POINTER, POINTER, *_ints(planes_x, problem.h, problem.w, *problem.pad, 1, 1),
             POINTER, POINTER, *_ints(planes_w, problem.r, problem.s, 0, 0,
                                      *problem.dilation))),
        inverse=KernelLaunch(
            KERNEL_FILE, inverse, (ceil_div(problem.n * k, per_block),), (THREADS,),
            (POINTER, POINTER, *_ints(problem.n * k, out_h, out_w, *problem.stride),
             np.float32(1.0 / (n * n)))),
    )
