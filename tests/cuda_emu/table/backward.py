"""Emulated cases of the backward directions (direct, im2col_gemm, implicit_gemm, fft)."""

from __future__ import annotations

from typing import Any

from tests.cuda_emu.table.case import Case, case
from tests.cuda_shapes import ALIGN_SHAPES, SHAPES

#: The backward directions' kernels (direct_bwd_data, direct_bwd_filter, col2im and the
#: im2col_gemm GEMM layouts) on these geometries, each against the float64 reference of its
#: direction: stride holes (taps fewer than the stride: some dx get no term), padding, dilation
#: 2, groups 2, odd sizes, n > 1, a deep batch for backward_filter's float16 sums, and a
#: depthwise layer (channel multiplier 2), whose backward_filter as a forward problem has one
#: image in 4 groups (fft's single GEMM call over frequencies and groups), and padding as
#: large as the filter at stride 2, where backward_data by phases starts at q0 = 1.
BWD_SHAPES: dict[str, dict[str, Any]] = {
    "odd": SHAPES["odd"],
    "holes_1x1_s2": dict(n=3, c=4, h=9, w=8, k=6, r=1, s=1, stride=2),
    "holes_s3_pad": dict(n=2, c=3, h=10, w=11, k=4, r=2, s=2, pad=1, stride=3),
    "dil2_groups2": dict(n=2, c=6, h=11, w=9, k=4, r=3, s=3, pad=2, dilation=2, groups=2),
    "stride_pair": SHAPES["stride_pair"],
    "dilation_stride": SHAPES["dilation_stride"],
    "groups_strided": SHAPES["groups_strided"],
    "pad_gt_filter": SHAPES["pad_gt_filter"],
    "deep_batch": dict(n=48, c=2, h=6, w=6, k=3, r=3, s=3, pad=1),
    "depthwise_m2": dict(n=3, c=4, h=7, w=6, k=8, r=3, s=3, pad=1, stride=2, groups=4),
    "pad2_s2": dict(n=2, c=3, h=7, w=8, k=4, r=3, s=2, pad=2, stride=2),
    # Pointwise with groups: im2col_gemm's backward_data GEMM writes dx itself (no col2im).
    "pointwise_groups2": dict(n=3, c=6, h=5, w=7, k=4, r=1, s=1, groups=2),
}
#: Mutations of the backward kernels these cases catch (each injected once, every backward
#: case run; `n` of 68 failed, before depthwise_m2):
#:   tap_output without the stride-hole test (o * str == num)   -> 14: every stride > 1 case
#:                                      of both backward_data kernels, relative error ~1.7
#:   tap_output's range test o <= O instead of o < O            -> 24: ASan heap-buffer-overflow
#:   col2im's pad_h - 1 (padding off by one)                    -> 18: relative error ~1.3
#:   col2im skipping the last column tap (s + 1 < S)            -> 18: relative error 0.4-0.7
#:   direct_bwd_filter's tree without its __syncthreads()       -> 18: results differ between
#:                                                                 schedules (a race)
#:   direct_bwd_filter dropping the batch's last term            -> 17: relative error 7e-3
#:   direct_bwd_data without the channel clamp (ch = cc)        -> 15: ASan heap-buffer-overflow
#:   im2col_gemm backward_filter, accumulate=img > 0 (chunks
#:   overwrite dW instead of adding)                            -> 13: every chunk=1/4/16 run
#:   im2col_gemm backward_data GEMM with W untransposed (OP_N)  -> 18: relative error >= 178
#: and of the one-GEMM-per-chunk backward_filter (image-inner column matrix and dyT), counted
#: over the 18 im2col_gemm backward_filter cases only (`n` of 18 failed):
#:   accumulate=False (chunks overwrite dW instead of adding)   -> 17: chunk=1, error 0.6-1.0
#:   images_inner reading dy[k][img] instead of dy[img][k]       -> 17: error 0.9-1.9 (all but
#:                                                                 groups_strided, n = 1)
#:   im2col image-outer (IMAGE_INNER false) for backward_filter -> 17: error 1.1-1.6
#:   GEMM column-matrix group stride crs*P*Q, not crs*nb*P*Q    -> 3: the dil2_groups2 cases,
#:                                                                 error 0.8-1.1
#: Shapes of BWD_SHAPES also run in float16 and float64.
_BWD_OTHER_DTYPES = ("odd", "holes_s3_pad", "dil2_groups2", "deep_batch", "pointwise_groups2")
#: The algorithms that compute the backward directions on the GPU, on every BWD_SHAPES
#: shape: direct and im2col_gemm with kernels of their own; implicit_gemm and fft through
#: their forward kernels on a rearranged problem (kernels/rearrange.cu's copies).
BWD_ALGORITHMS = ("direct", "im2col_gemm", "implicit_gemm", "fft")
#: Mutations of kernels/rearrange.cu these cases catch (each injected once; `n` of the 76
#: implicit_gemm, fft and implicit_gemm_tc backward cases failed, before depthwise_m2):
#:   the filter flip skipped                                 -> 36: every backward_data case
#:                                                              with r or s > 1, error >= 1.1
#:   dy spread with step 1 instead of the stride              -> 15: every stride > 1
#:                                                              backward_data case, error >= 1.2
#:   a source column bound of SW + 1 instead of SW            -> 50: relative error >= 0.18
#:   the source indexed (g, b, a) instead of (g, a, b)        -> 76: error >= 0.98
#:   the column offset's sign flipped (+off_w)                -> 63: error >= 1.0
BWD_DIRECTIONS = ("backward_data", "backward_filter")
TF32_DIRECTIONS = ("forward", *BWD_DIRECTIONS)


def backward_cases() -> list[Case | None]:
    """BWD_ALGORITHMS in both backward directions on BWD_SHAPES, and misaligned."""
    cases: list[Case | None] = []
    for name in BWD_ALGORITHMS:
        for direction in BWD_DIRECTIONS:
            for shape, kw in BWD_SHAPES.items():
                dtypes = ["float32", *(("float16", "float64") if shape in _BWD_OTHER_DTYPES
                                       else ())]
                cases += [case(f"{name}-{direction}-{shape}-{d}", name,
                               {**kw, "dtype": d, "direction": direction}) for d in dtypes]
            item = 4
            cases.append(case(f"{name}-{direction}-pq_odd_k_odd-float32-offset", name,
                              {**ALIGN_SHAPES["pq_odd_k_odd"], "dtype": "float32",
                               "direction": direction},
                              [item, item, item]))
    return cases
