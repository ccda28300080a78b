"""GPU FFT convolution: cuFFT transforms, per-frequency channel reduction by cuBLAS.

Steps, all enqueued on the current stream (kernels in kernels/fft_helpers.cu):
1. fft_pad writes x zero-padded into (FH, FW) planes at offset (pad_h, pad_w); R2C cuFFT.
2. fft_pad writes the filter dilated (taps at (r*dil_h, s*dil_w)) into (FH, FW) planes; R2C.
3. fft_transpose turns both spectra from [plane][f] into [f][plane].
4. Per group, one strided-batched complex GEMM over the F = FH*(FW/2+1) frequencies:
   Y[f] (n x kg) = X[f] (n x cg) @ conj(W[f])^T, conj(W) by CUBLAS_OP_C (cross-correlation).
5. fft_transpose back to [n*k][f]; C2R cuFFT; fft_crop takes every stride-th pixel of the
   valid part and divides by FH*FW (cuFFT's inverse is unnormalised).
FH >= H + 2*pad_h (rounded up to a 2,3,5,7-smooth size, and at least 2: no transform side
of 1, which 1-D convolutions written as H x 1 would otherwise ask cuFFT for), so the circular
correlation equals the linear one on every output pixel.

Supports float16 (computed in float32: padded planes and spectra are float32/complex64),
float32 and float64 (complex128); any stride, padding, dilation and groups (one GEMM call
per group, so many groups are slow, not wrong; with one image, one call batched over
frequencies and groups). Every buffer must have < 2**31 elements.

Workspace (each region aligned to 256 bytes), rs = 8 for float64 else 4, cs = 2 * rs,
F = FH * (FW // 2 + 1); the workspace itself must be aligned to cs bytes, as every CuPy
allocation is (the transposes move float2 / double2 vectors, cuFFT needs aligned complex data;
run() checks and raises otherwise):
    planes:    max(n*c, k*cg, n*k) * FH * FW * rs   padded input, then filter, then inverse
    spectra1:  max(n*c, n*k) * F * cs               input spectrum, then output spectrum
    spectra2:  max(k*cg, n*k) * F * cs              filter spectrum, then GEMM output
    xt:        F * n * c * cs                       input spectrum, frequency-major
    wt:        F * k * cg * cs                      filter spectrum, frequency-major
Allocated elsewhere: each cuFFT plan (three per problem) owns a work area that CuPy
allocates from its memory pool when the plan is created (on the first run of a problem in a
thread on a stream: inside the tuner's warm-up, or a plan's first call there) and keeps
while the plan stays in this module's small plan cache; cuBLAS uses its per-stream
workspace. Neither is allocated per call.

Configurations: "default" is the above. "fused" (algorithms/cuda/_fft_fused.py: float16 and
float32 planes that fit 32 x 32) runs the transforms as our own kernels, straight from x and
w into the frequency-major spectra and from the GEMMs' product into y: two launches besides
the GEMMs instead of nine, and no padded planes, cuFFT passes or transposes in memory.

backward_data and backward_filter run these steps on a rearranged forward problem
(algorithms/by_forward.py), the rearranged operands in the workspace before the regions
above; for backward_filter the forward problem's filter is dy (P x Q taps), which the
transforms handle like any other.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, ClassVar

import numpy as np

from algorithms.base import (
    DEFAULT_CONFIG,
    SUPPORTED,
    Support,
    Work,
    align,
    unsupported,
    workspace_view,
)
from algorithms.cuda import _fft_fused
from algorithms.cuda._base import CudaAlgorithm
from algorithms.cuda._by_forward import CudaByForward
from algorithms.cuda._cublas import OP_C, OP_N, gemm_strided_batched
from algorithms.cuda._fft_fused import FUSED, KERNEL_FILE
from algorithms.cuda._lanes import CaptureRefused, stream_captures
from algorithms.cuda._loader import (
    CTYPES,
    ceil_div,
    get_kernel,
    grid_stride_blocks,
    require_aligned,
    require_cupy,
    tensors_fit_int32,
)
from algorithms.problem import ConvProblem

# cuFFT's transform types and directions (cufft.h), fixed by its API.
CUFFT_R2C, CUFFT_C2R, CUFFT_D2Z, CUFFT_Z2D = 0x2A, 0x2C, 0x6A, 0x6C
CUFFT_FORWARD, CUFFT_INVERSE = -1, 1
_THREADS = 256
_GRID_Y_LIMIT = 65535
_PLAN_CACHE_SIZE = 24
#: Most cuBLAS calls of a run FUSED is offered for (see FftCuda.configs).
FUSED_MAX_GEMMS = 8


def next_fast_len(n: int) -> int:
    """The smallest 2,3,5,7-smooth integer >= n (sizes cuFFT handles fastest)."""
    m = n
    while True:
        r = m
        for p in (2, 3, 5, 7):
            while r % p == 0:
                r //= p
        if r == 1:
            return m
        m += 1


def fft_size(problem: ConvProblem) -> tuple[int, int]:
    """(FH, FW): transform size covering the padded input, no wrap-around on valid pixels."""
    return (next_fast_len(max(2, problem.h + 2 * problem.pad[0])),
            next_fast_len(max(2, problem.w + 2 * problem.pad[1])))


def _real_dtype(problem: ConvProblem) -> str:
    return "float64" if problem.dtype == "float64" else "float32"


def _complex_dtype(problem: ConvProblem) -> str:
    return "complex128" if problem.dtype == "float64" else "complex64"


def name_expressions(dtype: str) -> dict[str, str]:
    """The kernel template instances (pad, transpose, crop) for a problem dtype."""
    real = "double" if dtype == "float64" else "float"
    return {
        "pad": f"fft_pad<{CTYPES[dtype]}, {real}>",
        "transpose": f"fft_transpose<{real}2>",
        "crop": f"fft_crop<{real}, {CTYPES[dtype]}>",
    }


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for."""
    names: list[str] = []
    for dtype in CTYPES:
        for name in name_expressions(dtype).values():
            if name not in names:
                names.append(name)
    return (*names, *_fft_fused.shipped_kernels())


def _counts(problem: ConvProblem) -> dict[str, int]:
    """Element counts of each workspace region (real elements for planes, complex else)."""
    fh, fw = fft_size(problem)
    f = fh * (fw // 2 + 1)
    n, c, k, cg = problem.n, problem.c, problem.k, problem.c // problem.groups
    return {
        "planes": max(n * c, k * cg, n * k) * fh * fw,
        "spectra1": max(n * c, n * k) * f,
        "spectra2": max(k * cg, n * k) * f,
        "xt": f * n * c,
        "wt": f * k * cg,
    }


def workspace_layout(problem: ConvProblem) -> dict[str, tuple[int, int]]:
    """Region name -> (byte offset, bytes) inside the workspace of "default"."""
    rs = np.dtype(_real_dtype(problem)).itemsize
    offset = 0
    layout: dict[str, tuple[int, int]] = {}
    for name, count in _counts(problem).items():
        nbytes = count * (rs if name == "planes" else 2 * rs)
        layout[name] = (offset, nbytes)
        offset += align(nbytes)
    return layout


_plan_lock = threading.Lock()
_plans: OrderedDict[tuple[int, ...], Any] = OrderedDict()
#: Plans a CUDA graph captured: never dropped (see _plan).
_captured: dict[tuple[int, ...], Any] = {}


def _plan(fft_type: int, batch: int, fh: int, fw: int) -> Any:
    """A cached cuFFT plan for `batch` 2-D (fh, fw) real<->complex transforms, this thread's
    on the current stream.

    Per thread: cuFFT is thread-safe only for threads executing different plans (its
    documentation). Per stream: a plan's execution sets the plan's stream and uses its work
    area, which two streams' transforms at once must not share.

    A plan executed inside a CUDA graph capture leaves the LRU for good: the graph's nodes
    read its twiddles and write its work area on every replay, which dropping the plan would
    free to other arrays. A plan missing during a capture is refused (CaptureRefused):
    making one allocates and may load cuFFT's own kernels (cupy/cupy#7559: a crash).
    """
    cupy = require_cupy()
    from cupy.cuda import cufft

    stream = cupy.cuda.get_current_stream().ptr
    key = (cupy.cuda.runtime.getDevice(), threading.get_ident(), stream, fft_type, batch, fh,
           fw)
    capturing = stream_captures(cupy, stream)
    with _plan_lock:
        plan = _captured.get(key)
        if plan is not None:
            return plan
        plan = _plans.get(key)
        if plan is not None:
            if capturing:
                _captured[key] = _plans.pop(key)
            else:
                _plans.move_to_end(key)
            return plan
    if capturing:
        raise CaptureRefused("a cuFFT plan")
    half = fh * (fw // 2 + 1)
    forward = fft_type in (CUFFT_R2C, CUFFT_D2Z)
    plan = cufft.PlanNd(
        [fh, fw], None, 1, fh * fw if forward else half, None, 1, half if forward else fh * fw,
        fft_type, batch, "C", -1, fw // 2 + 1 if forward else fw,
    )
    with _plan_lock:
        _plans[key] = plan
        while len(_plans) > _PLAN_CACHE_SIZE:
            _plans.popitem(last=False)
    return plan


class _FftCudaForward(CudaAlgorithm):
    """cuFFT + batched complex GEMM convolution."""

    name: ClassVar[str] = "fft"

    def _limits(self, problem: ConvProblem) -> Support:
        """Every geometry whose buffers fit 32-bit indexing."""
        counts = _counts(problem)
        if not tensors_fit_int32(problem, *counts.values()):
            return unsupported("an FFT buffer would have 2**31 elements or more")
        fh, fw = fft_size(problem)
        f = fh * (fw // 2 + 1)
        rows = max(problem.n * problem.c, problem.k * (problem.c // problem.groups), f)
        if ceil_div(rows, 32) > _GRID_Y_LIMIT:
            return unsupported("too many planes or frequencies for the transpose grid")
        return SUPPORTED

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """cuFFT's transforms; and FUSED, our own, where `_fft_fused.fits` and the GEMMs take
        at most FUSED_MAX_GEMMS calls (a depthwise layer's 960 groups are 960 cuBLAS calls:
        10 ms for "default" on MobileNet-v2's block6.2 on an H100, a candidate that only
        costs tuning time)."""
        if gemm_calls(problem) <= FUSED_MAX_GEMMS and _fft_fused.fits(problem):
            return (DEFAULT_CONFIG, FUSED)
        return (DEFAULT_CONFIG,)

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """Padded planes and spectra (see the module docstring for the layout); FUSED's
        frequency-major spectra."""
        if config == FUSED:
            return _fft_fused.layout(problem).nbytes
        offset, nbytes = list(workspace_layout(problem).values())[-1]
        return align(offset + nbytes)

    def work(self, problem: ConvProblem, config: str) -> Work:
        """FUSED: its inverse kernel's blocks, and 2 launches with the GEMM calls; cuFFT's
        path: 9 launches with them (pad, transform and transpose per operand, then
        transpose, transform and crop), blocks unknown."""
        if config == FUSED:
            return Work(_fft_fused.blocks(problem), 1.0, 2 + gemm_calls(problem))
        return Work(0, 1.0, 9 + gemm_calls(problem))

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue the transforms, GEMMs and data movement."""
        if config == FUSED:
            _fft_fused.run(x, w, y, workspace, problem, get_kernel, frequency_gemms)
            return
        n, c, k = problem.n, problem.c, problem.k
        cg = c // problem.groups
        fh, fw = fft_size(problem)
        f = fh * (fw // 2 + 1)
        out_h, out_w = problem.out_hw
        real, cplx = _real_dtype(problem), _complex_dtype(problem)
        cs = np.dtype(cplx).itemsize
        rnp = np.dtype(real).type
        layout = workspace_layout(problem)
        require_aligned("fft: workspace", workspace, cs)
        # The kernels below take the operands by the kernel call's own conversion, which
        # knows CuPy arrays, not the Addresses a plan call may pass (runtime.ready): their
        # addresses as the pointer-sized integers CuPy passes.
        x, w, y = (np.uint64(a.data.ptr) for a in (x, w, y))

        def region(name: str, shape: tuple[int, ...], dtype: str) -> Any:
            count = int(np.prod(shape))
            return workspace_view(workspace, layout[name][0], (count,), dtype).reshape(shape)

        names = name_expressions(problem.dtype)
        pad = get_kernel(KERNEL_FILE, names["pad"])
        transpose = get_kernel(KERNEL_FILE, names["transpose"])
        crop = get_kernel(KERNEL_FILE, names["crop"])
        r2c = CUFFT_D2Z if real == "float64" else CUFFT_R2C
        c2r = CUFFT_Z2D if real == "float64" else CUFFT_C2R

        def pad_into(src: Any, planes: int, h: int, wd: int, off: tuple[int, int],
                     dil: tuple[int, int]) -> Any:
            dst = region("planes", (planes, fh, fw), real)
            pad((grid_stride_blocks(planes * fh * fw, _THREADS),), (_THREADS,),
                (src, dst, np.int32(planes), np.int32(h), np.int32(wd), np.int32(fh),
                 np.int32(fw), np.int32(off[0]), np.int32(off[1]), np.int32(dil[0]),
                 np.int32(dil[1])))
            return dst

        def transpose_into(src: Any, dst: Any, rows: int, cols: int) -> None:
            transpose((ceil_div(cols, 32), ceil_div(rows, 32)), (32, 8),
                      (src, dst, np.int32(rows), np.int32(cols)))

        # 1-3: input and filter spectra, frequency-major.
        planes = pad_into(x, n * c, problem.h, problem.w, problem.pad, (1, 1))
        spec1 = region("spectra1", (n * c, fh, fw // 2 + 1), cplx)
        _plan(r2c, n * c, fh, fw).fft(planes, spec1, CUFFT_FORWARD)
        xt = region("xt", (f, n * c), cplx)
        transpose_into(spec1, xt, n * c, f)

        planes = pad_into(w, k * cg, problem.r, problem.s, (0, 0), problem.dilation)
        spec2 = region("spectra2", (k * cg, fh, fw // 2 + 1), cplx)
        _plan(r2c, k * cg, fh, fw).fft(planes, spec2, CUFFT_FORWARD)
        wt = region("wt", (f, k * cg), cplx)
        transpose_into(spec2, wt, k * cg, f)

        # 4: per frequency, the channel reduction.
        yt = region("spectra2", (f, n * k), cplx)
        frequency_gemms(problem, cplx, f, xt.data.ptr, wt.data.ptr, yt.data.ptr)

        # 5: back to planes, inverse transform, crop + stride + scale into y.
        spec_y = region("spectra1", (n * k, fh, fw // 2 + 1), cplx)
        transpose_into(yt, spec_y, f, n * k)
        z = region("planes", (n * k, fh, fw), real)
        _plan(c2r, n * k, fh, fw).fft(spec_y, z, CUFFT_INVERSE)
        total = n * k * out_h * out_w
        crop((grid_stride_blocks(total, _THREADS),), (_THREADS,),
             (z, y, np.int32(n * k), np.int32(out_h), np.int32(out_w), np.int32(fh),
              np.int32(fw), np.int32(problem.stride[0]), np.int32(problem.stride[1]),
              rnp(1.0 / (fh * fw))))


def gemm_calls(problem: ConvProblem) -> int:
    """cuBLAS calls of the frequency GEMMs: one per group, one in all for one image."""
    return 1 if problem.n == 1 else problem.groups


def frequency_gemms(problem: ConvProblem, cplx: str, f: int, xt: int, wt: int,
                     yt: int) -> None:
    """Per frequency and group, column-major (kg x n) = (cg x kg)^H @ (cg x n), from the
    frequency-major spectra at addresses xt (f, n*c) and wt (f, k*cg) into yt (f, n*k)."""
    n, c, k = problem.n, problem.c, problem.k
    g, cg, kg = problem.groups, c // problem.groups, k // problem.groups
    if n == 1:
        # One image: each frequency's groups follow each other in xt, wt and yt (x at
        # f*c + gi*cg = (f*g + gi)*cg, likewise w and y), so one call batches over
        # (frequency, group): 1 launch instead of g (depthwise backward_filter's
        # rearranged problem has n = c/g = 1).
        gemm_strided_batched(cplx, OP_C, OP_N, kg, 1, cg, wt, cg, kg * cg, xt, cg, cg, yt,
                             kg, kg, f * g)
        return
    cs = np.dtype(cplx).itemsize
    for gi in range(g):
        gemm_strided_batched(cplx, OP_C, OP_N, kg, n, cg, wt + gi * kg * cg * cs, cg, k * cg,
                             xt + gi * cg * cs, c, n * c, yt + gi * kg * cs, k, n * k, f)


class FftCuda(CudaByForward, _FftCudaForward):
    """The forward algorithm above, and both backward directions through it."""
