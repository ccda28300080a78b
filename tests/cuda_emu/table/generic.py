"""Emulated cases of direct, im2col_gemm, implicit_gemm, fft, winograd and depthwise."""

from __future__ import annotations

from typing import Any

from algorithms.cuda._loader import CTYPES
from algorithms.problem import DTYPES
from tests.cuda_emu.cases import ALGORITHMS
from tests.cuda_emu.table.case import Case, case
from tests.cuda_shapes import (
    ALIGN_SHAPES,
    DEPTHWISE_SHAPES,
    NETWORK_SHAPES,
    OTHER_DTYPE_SHAPES,
    SHAPES,
)

#: Network layers small enough to emulate: ResNet-50 res4 3x3 and res5 1x1 at batch 1 (not
#: for fft, whose 65536 padded filter planes alone take seconds here).
_LAYERS: dict[str, dict[str, Any]] = {
    "r50_res4_3x3_b1": dict(n=1, c=256, h=14, w=14, k=256, r=3, s=3, pad=1),
    "r50_res5_1x1_b1": dict(n=1, c=2048, h=7, w=7, k=64, r=1, s=1),
}


#: Winograd's own edges besides the shared SHAPES it supports (odd, pad_gt_filter, ...):
#: padding 0 and 2, asymmetric padding, one output pixel, tiles cut by the output edge in
#: both directions for both tile sides, more tile columns than rows, every CUDA dtype.
#: Mutations these cases catch (each tried once; "n/23" = winograd cases that fail):
#:   f2x2 G[1][2] 0.5 -> 0.25 (filter transform)       -> 23/23, relative error 0.19-0.49
#:   f4x4 B^T[0][2] -5 -> -4 (input transform)         -> 22/23 (not single_pixel: the
#:                                                         coefficient meets only padding)
#:   f4x4 A^T[3][3] 8 -> 7 (output transform)          -> 19/23 (not the <4-pixel outputs)
#:   output crop oh < P -> oh <= P                      -> 22/23, ASan heap-buffer-overflow
#:                                                         WRITE in winograd_output
#:   input bound ih < H -> ih <= H                      -> 23/23, ASan heap-buffer-overflow
#:                                                         READ in winograd_input
#:   host: GEMM filter stride k*c -> 0                  -> 23/23, wrong results
#:   host: tiles_h and tiles_w divisors swapped         -> 14/23 (every tiling that is not
#:                                                         square), unwritten outputs
_WINOGRAD_SHAPES: dict[str, dict[str, Any]] = {
    "wino_pad0": dict(n=2, c=3, h=9, w=8, k=5, r=3, s=3),
    "wino_pad2_asym": dict(n=2, c=5, h=7, w=14, k=3, r=3, s=3, pad=(2, 1)),
    "wino_one_output": dict(n=3, c=4, h=3, w=3, k=2, r=3, s=3),
}

#: The depthwise kernel runs SHAPES' depthwise layers through the loop below, and these in
#: the dtypes named (dw_dilated_m2, a 3x3, in every dtype: every shipped instance, the _3x3
#: ones included, runs), plus dw_asymmetric one element off alignment in every dtype.
#: Mutations of kernels/depthwise.cu these cases catch (each tried by hand once, float32
#: cases; "n of 8": how many of the 8 float32 depthwise cases fail):
#:   halo one column short (in_w without its + 1)         -> relative error 0.02-0.34, 7 of 8
#:   halo bound ih <= H instead of ih < H                   -> ASan heap overflow past x, or
#:                                                             relative error 0.14, 8 of 8
#:   the __syncthreads() after staging removed              -> results differ between
#:                                                             schedules (a race), 8 of 8
#:   taps of channel c from w + c * RS (multiplier lost)    -> relative error 1.0-1.3, the 3
#:                                                             multiplier > 1 cases
#:   compiled-in 3x3 loops one filter row short (KR - 1)    -> relative error 1.2-1.3 in the
#:                                                             _3x3 configs, the 4 3x3 cases
#: and of kernels/common.cuh's stage_shared, which fills the shared tiles of depthwise and
#: direct (counted over the 110 depthwise and direct cases, every dtype):
#:   the last element of each fill not stored (count - 1)   -> 63 of 110 (all 19 depthwise)
#:   a thread's loads at consecutive indices (base + u, not
#:   base + u * THREADS)                                      -> 74 of 110
#: and of depthwise_flat, the configurations "flat_q*" (each injected once; n of the 19
#: depthwise cases that fail):
#:   its interior test iw_last < W made <= W                -> 9, AddressSanitizer overflow
#:   output channel k reads input channel k, not k / M      -> 7, the multiplier > 1 cases
#:   "_s1" reads its shared row at v[s], not v[q + s]       -> 5, relative error 1.2
#:   a row's phantom last columns stored (q0 + q <= Q)      -> 2, dw_7x7_m3 (Q = 7 in groups
#:                                                             of 4), AddressSanitizer
#:   the border path's row test without ih >= H             -> 19, AddressSanitizer
#:   column groups 1 apart instead of QV (q0 without * QV)  -> 5, unwritten outputs
#: and (2026-11-26, n of the 25 depthwise cases, dw_s2_m2 and dw_stride_1x2 added):
#:   "_s2" reads its shared row at v[q + s], not v[q * SW + s] -> 7, every case it runs
#:   a shared row one input short ((QV - 1) * SW + KS - 1)   -> 12, "_s1" and "_s2" cases
_DW_DTYPES: dict[str, tuple[str, ...]] = {
    "dw_dilated_m2": tuple(DTYPES), "dw_5x5_tall": ("float32", "bfloat16"),
    "dw_asymmetric": ("float32", "float16"), "dw_7x7_m3": ("float32", "bfloat16"),
    "dw_s2_m2": tuple(DTYPES), "dw_stride_1x2": ("float32", "float16"),
}


#: fft's "fused" configuration (its own N x N transforms, kernels/fft_helpers.cu) runs on every
#: fft case whose planes fit 32 x 32, and on these: N = 32 over several blocks with a partial
#: last one (28x28 at 5x5: GoogLeNet's inception 5x5 geometry), N = 4 (32 planes a block),
#: and the two terms of `_fft_fused.size` that no other case needs: padding on one axis that
#: takes N past a power of two (16 + 1 rows), and output rows reaching past the data and its
#: leading padding (4 + 3 rows, 9 outputs).
#: Mutations these cases catch (each injected once; `n` of the 63 fft cases with a fused
#: configuration failed):
#:   inverse twiddles not conjugated                       -> 58: relative error >= 1.0
#:   frequency-major stores without the block's first plane -> 50: unwritten outputs (NaN)
#:   rows placed without their padding offset              -> 29: relative error >= 1.4
#:   the inverse's upper half not conjugated               -> 56: relative error 0.5-0.7
#:   the barrier before the frequency-major stores removed -> 63: a race between schedules
#:   dilated filter columns read undilated                 -> 13
#:   strided outputs taken at q, not q * str_w             -> 8
#: and of the one forward launch for x's and the filter's planes (twenty-fourth session;
#: checked on the named cases only):
#:   the filter's blocks numbered from 0, not from x's last -> fft_inception_5x5, fft_n4:
#:                                                            all four fail
#:   the filter's height and width swapped                 -> non_square_filter,
#:                                                            dilation_stride, groups_strided:
#:                                                            all three fail
#: and of the host's transform size, each caught by the case named (and no other):
#:   N from H, not H + pad                                 -> fft_pad_rows
#:   N without the last output row's reach                 -> fft_output_reach
_FFT_SHAPES: dict[str, dict[str, Any]] = {
    "fft_inception_5x5": dict(n=2, c=5, h=28, w=28, k=7, r=5, s=5, pad=2),
    "fft_n4": dict(n=3, c=2, h=2, w=3, k=2, r=2, s=2, pad=1),
    "fft_pad_rows": dict(n=1, c=2, h=16, w=6, k=3, r=3, s=3, pad=1),
    "fft_output_reach": dict(n=1, c=2, h=4, w=4, k=3, r=2, s=2, pad=(3, 0)),
}
#: Of those, also run in float16.
_FFT_FLOAT16 = ("fft_inception_5x5", "fft_n4")


def generic_cases() -> list[Case | None]:
    """Each non-tensor-core algorithm on SHAPES' geometry, _LAYERS (not fft), ALIGN_SHAPES."""
    cases: list[Case | None] = []
    geometry = {k: v for k, v in SHAPES.items() if k not in NETWORK_SHAPES}
    for name in (n for n in ALGORITHMS if n not in ("implicit_gemm_tc", "implicit_gemm_wgmma")):
        for shape, kw in (geometry | ({} if name == "fft" else _LAYERS)).items():
            dtypes = ["float32"]
            if shape in OTHER_DTYPE_SHAPES:
                dtypes += ["float16", "float64"]
            cases += [case(f"{name}-{shape}-{d}", name, {**kw, "dtype": d}) for d in dtypes]
        for shape, kw in ALIGN_SHAPES.items():
            for dtype, item in DTYPES.items():
                cases.append(case(f"{name}-{shape}-{dtype}-offset", name,
                                  {**kw, "dtype": dtype}, [item, item, item]))
    return cases


def vec_out_cases() -> list[Case | None]:
    """implicit_gemm's vector stores, y at every offset of a 16-byte vector."""
    cases: list[Case | None] = []
    # P*Q = 64: the implicit GEMM's float4 epilogue must run exactly when y is 16-aligned.
    for y_off in (0, 4, 8, 12):
        cases.append(case(f"vec-y{y_off}", "implicit_gemm", SHAPES["pq_multiple_of_4"],
                          [4, 4, y_off]))
    return cases


def fft_cases() -> list[Case | None]:
    """fft on _FFT_SHAPES."""
    return [case(f"fft-{shape}-{dtype}", "fft", {**kw, "dtype": dtype})
            for shape, kw in _FFT_SHAPES.items()
            for dtype in ("float32", *(("float16",) if shape in _FFT_FLOAT16 else ()))]


def winograd_cases() -> list[Case | None]:
    """winograd on _WINOGRAD_SHAPES in every CUDA dtype."""
    return [case(f"winograd-{shape}-{dtype}", "winograd", {**kw, "dtype": dtype})
            for shape, kw in _WINOGRAD_SHAPES.items() for dtype in CTYPES]


def depthwise_cases() -> list[Case | None]:
    """depthwise on _DW_DTYPES, and dw_asymmetric misaligned in every dtype."""
    cases: list[Case | None] = []
    for shape, dw_dtypes in _DW_DTYPES.items():
        cases += [case(f"depthwise-{shape}-{d}", "depthwise", {**DEPTHWISE_SHAPES[shape],
                                                               "dtype": d}) for d in dw_dtypes]
    for dtype, item in DTYPES.items():
        cases.append(case(f"depthwise-dw_asymmetric-{dtype}-offset", "depthwise",
                          {**DEPTHWISE_SHAPES["dw_asymmetric"], "dtype": dtype},
                          [item, item, item]))
    return cases
