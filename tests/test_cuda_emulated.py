"""The CUDA backend's own kernels, run on the CPU through its real host code, under sanitizers.

tests/cuda_emu compiles each shipped kernel instance from the text NVRTC gets on a GPU, runs
every CUDA thread as a fiber (forward, then reverse schedule: a barrier race changes the
result), with AddressSanitizer on every global and shared array and UBSan on indexing,
alignment and integer overflow; `run()` of each algorithm drives it exactly as on a GPU
(grids, argument types and order, shared-memory sizes, workspace layout), with cuBLAS and
cuFFT replaced by NumPy stand-ins that check their operands; warp-level PTX (mma.sync,
ldmatrix, cp.async) is emulated by tests/cuda_emu/warp.h. What this cannot see: warp-level
timing, the memory model beyond barriers, NVRTC itself, the real cuBLAS/cuFFT, and speed;
tests/gpu covers those on a GPU.
"""

from __future__ import annotations

from typing import Any

import pytest

from algorithms.base import AlgorithmBase
from algorithms.cuda import (
    _wgmma_nchw,
    depthwise,
    implicit_gemm_tc,
    implicit_gemm_wgmma,
    shipped_kernels,
    winograd,
)
from algorithms.cuda._launch import ENV
from algorithms.cuda._loader import CTYPES
from algorithms.problem import DTYPES
from tests.cuda_emu.build import build_all, missing_tools
from tests.cuda_emu.cases import ALGORITHMS, SCHEDULES, run_cases
from tests.cuda_shapes import (
    ALIGN_SHAPES,
    DEPTHWISE_SHAPES,
    NETWORK_SHAPES,
    OTHER_DTYPE_SHAPES,
    SHAPES,
)
from tests.precision import make_problem

_missing = missing_tools()
pytestmark = pytest.mark.skipif(_missing is not None, reason=f"cannot emulate: {_missing}")

#: Where the implicit-GEMM kernel's `vec_out` sits among its scalar arguments (after the
#: ConvShape structure).
_VEC_OUT_ARG = 1

#: Network layers small enough to emulate: ResNet-50 res4 3x3 and res5 1x1 at batch 1 (not
#: for fft, whose 65536 padded filter planes alone take seconds here).
_LAYERS: dict[str, dict[str, Any]] = {
    "r50_res4_3x3_b1": dict(n=1, c=256, h=14, w=14, k=256, r=3, s=3, pad=1),
    "r50_res5_1x1_b1": dict(n=1, c=2048, h=7, w=7, k=64, r=1, s=1),
}


#: 1x1 stride-1 unpadded layers, which the tensor-core kernel fills with 16-byte vectors
#: when P*Q and C/groups are whole vectors (4 float, 8 16-bit values) and x, w are 16-byte
#: aligned: several K-steps with a partial last one (c = 40: vectors at k 32..39 read, 40..47
#: zero), output channels and pixels off the tile, groups; and a P*Q = 15 layer, an
#: "-x_offset" case (x one element off: vector A only) and every "-offset" case (x and w
#: off), which must copy B (and A) element-wise.
#: Mutations of the vector path these cases catch (each injected once; `n` of the then 16
#: tc_pw_* cases failed, the 8 with the vector path unless said):
#:   column offset without its pixel (col_off + pq dropped)   -> 8: relative error 1.0-1.3
#:   A vector at k = e % (BK/VEC) (its * VEC dropped)          -> 8: misaligned cp.async source
#:   B rows past C/groups read (kk < CRS dropped)              -> 4 (tc_pw_vec, c = 40 ends
#:                                                                mid-tile): ASan overflow
#:   host: the vector path without P*Q % VEC                   -> 4 (tc_pw_pq_odd): misaligned
#:                                                                cp.async source
#: and of the vector A fill, which every tc layer with C/groups*R*S a whole number of
#: vectors takes (`n` of the 43 forward tc cases failed):
#:   A vector stored at the wrong k slot (k ^ VA), A-only path -> 17: relative error 1.1-1.5
#:   A rows past C/groups*R*S read (k0 + k < CRS dropped)      -> 12: ASan heap overflow
#:   host: w's alignment unchecked                             -> 4 (x and w off, tc_pw_vec):
#:                                                                misaligned cp.async source
#:   host: vector A decided by C % VEC, not C/groups*R*S % VEC -> 1: misaligned cp.async
#:                                                                source
_TC_POINTWISE = ("tc_pw_vec", "tc_pw_vec_groups", "tc_pw_pq_odd", "tc_pw_strided")
#: Layers whose C/groups is a whole number of vectors (8 16-bit values) also run the NHWC
#: configurations (operands transposed into the workspace, kernels/rearrange.cu
#: `transpose`): tc_deep and tc_long_k (C/groups 24, 256: K-steps across filter taps),
#: tc_pw_pq_odd, and these two: padding, stride and dilation differing per axis, and groups
#: of 8 channels with partial pixel tiles across images.
#: Mutations of the NHWC path these cases catch (each injected once; `n` of the 20 tc cases
#: with NHWC configurations failed, forward and the two backward_data ones):
#:   B pixel's column bound (iw < W) dropped                -> 14: ASan heap overflow, error
#:   B pixel offset without the group's channels (grp*cg)  -> 4 (tc_nhwc_groups): error 1.1-1.2
#:   dilations of the two axes swapped                     -> 4 (tc_nhwc_geom): error 1.3
#:   ldmatrix B k half from lane / 16, not (lane / 8) % 2  -> 8 (every 16-bit case): error 0.9
#:   ldmatrix B registers paired (0, 2), (1, 3)            -> 8 (every 16-bit case): error 0.9
#:   TF32 B fragment read at k = 2t + v                    -> 12 (every float32 case)
#:   transpose tile read back untransposed                 -> 20: unwritten outputs
#:   transpose row bound <= rows                           -> 17: ASan heap overflow
#:   transpose's grouped reads all stored from the first    -> 17 of all 63 tc cases: error
#:     register (v[0] for v[m])                                0.99-1.7
#:   host: K divisor R*S instead of C/groups               -> 18: error, ASan heap overflow
#:   host: filter transposed with rows and columns swapped -> 14: error 1.3-1.4
#:   host: NHWC offered without C/groups % VEC == 0        -> 17 of all 51 forward tc cases:
#:                                                            misaligned cp.async source
#: NCHW "-sS" tiles (vector B only; 2026-11-27), each injected once:
#:   host: run_config keeping the "-sS" tile for a        -> the tc_pw_vec offset cases
#:     misaligned operand (an unshipped element-wise        launch an unshipped instance
#:     instance, compiled at run time, spills unchecked)    (test_tensor_core_vector_fills)
#: Split K runs on every tc case whose grid is small and K long enough (tc_deep, tc_long_k,
#: tc_nhwc_geom and three backward cases: 13 cases). Mutations it catches (`n` of 13):
#:   the pipeline's prologue without the split's K base      -> 13: error 0.5-1.6
#:   every split writing partials[0] (no blockIdx.z offset)  -> 13: unwritten outputs (NaN)
#:   the sum dropping the last split                         -> 13: error 0.5-0.7
#:   host: K-steps per split rounded down (one split more)   -> 12: ASan heap overflow
_TC_NHWC = ("tc_nhwc_geom", "tc_nhwc_groups", "tc_pw_s2")

#: The tensor-core kernel is slow to emulate (a 32-fiber rendezvous per mma), so it runs a
#: chosen few shapes per (dtype, math) instead of every shape: odd sizes, strides, padding
#: wider than the filter, dilation, groups, several channel tiles, one-element-misaligned
#: tensors, and tc_deep below.
#: Mutations of kernels/implicit_gemm_tc.cu these cases catch (each tried by hand once):
#:   cp_async_wait<STAGES - 1> (one group too few waited)   -> ASan: read of in-flight copy
#:   the loop's __syncthreads() removed                      -> ASan: read of in-flight copy
#:   TF32 B fragment k = 2t + v instead of t + 4v            -> relative error 1.3
#:   3xTF32 without the big.small product                    -> relative error 2e-4 > 1e-5
#:   ldmatrix A rows from lane % 8 instead of lane % 16      -> relative error 0.94 (tc_deep)
#:   3xTF32 summed straight into acc (no per-step partial)   -> relative error > 1e-5 (tc_long_k)
#: Copy sources worked out once, and 1xTF32's rounding in shared memory (2026-11-26, both
#: injected at once; implicit_gemm_tc cases on near_up inputs and tc_pw_strided):
#:   round_stage left out (fragments read unrounded)  -> the 3 tc near_up cases: error 1.9e-3
#:                                                     (> 2e-4); tc_pw_vec-float32-tf32 on
#:                                                     random inputs passes, as it may
#:   a 1x1 column's b_off without its corner h0*W + w0 -> tc_pw_strided-float32-fp32: 1.47
#: 1xTF32 rounding in place for NCHW vector A with element-wise B only (2026-11-27):
#:   B fragments read unrounded                        -> the 3 tc near_up cases
#:   round_stage left out                              -> near_up tc_pw_strided and
#:                                                     tc_nhwc_geom (their NCHW element-wise
#:                                                     B configs); tc_pw_vec passes
#: NaN through the TF32 roundings (nan_x cases: one x element 0x7fffffff, CUDA's own NaN):
#:   tf32_rna_for_mma without its NaN test, and 3xTF32's small part rounded by it
#:                                                   -> the 6 tc nan_x cases: NaN not where
#:                                                     the reference's is (wgmma's 2 pass:
#:                                                     its copies round with cvt.rna)
#: Filter rows' offsets in w itself, with the group's rows (both kernels; unsigned offsets):
#:   a_row without grp * kg, in tc and wgmma at once   -> every groups case of both (17 of
#:                                                     17): error 0.99-1.31
#: K-steps of 32 (16-bit "BMxBNx32-nhwc", on tc_deep, tc_long_k (float16, with split K),
#: tc_pw_pq_odd and the NHWC shapes):
#:   B (NHWC) ldmatrix without the k16 half's offset kk      -> 4 of 5 cases: error 0.82-1.04
#:   A ldmatrix without kk                                   -> 2 of 2 tried: error 0.93-1.02
#:   (K-steps counted in 16s, or split K's steps per slice in 16s, change no result: the extra
#:   steps are masked, the short slices cover K. Not caught, and not bugs.)
#: Stages in dynamic shared memory, and the "-sS" tiles' opt-in beyond 48 KiB (tc_deep,
#: tc_long_k, tc_nhwc_geom, tc_nhwc_groups in 16 bits; tc_multi_block gives the 256-row and
#: 256-column tiles several blocks each way):
#:   the host's opt-in (allow_shared_memory) left out        -> 4 of 4: emulator abort
#:   launched with 32 bytes less than smem_bytes              -> 4 of 4: ASan overflow (16
#:     less is not caught, and no bug: the last B row's padding is never touched)
#:   B tiles placed 64 bytes into the A tiles                 -> 4 of 4: ASan use-after-poison
#: The loader's kernels are plain CuPy Functions (EmulatedFunction; the sm_90a ones always
#: were, every other since e438c92), whose opt-in is the driver call; the first H100 run of
#: wgmma (2026-11-25) failed every launch on this:
#:   allow_shared_memory setting the RawKernel attribute only -> 3 of 3 wgmma cases tried:
#:     AttributeError
#: wgmma's tiles are 128-byte swizzled (warp.h reads such descriptors):
#:   tiles written unswizzled under the swizzled descriptors -> the first wgmma case run
#:     (tc_deep, float16) fails against the reference
#: cuBLAS at math "tf32" reads operands our kernels rounded (fake_gemm truncates them, as
#: the tensor cores do unrounded ones); each copy left unrounded:
#:   im2col's column matrix                     -> forward, backward_filter near_up cases fail
#:   backward_filter's dyT (images_inner)       -> backward_filter fails
#:   w (no round_tf32 copy)                     -> forward, backward_data fail
#:   backward_data's dy chunk                   -> backward_data fails
#:   winograd F(2x2)'s U and V                  -> winograd-odd-tf32-round_up fails
#:     V alone left unrounded passed every case (error 5.9e-4 within 1e-3) until that
#:     case got a limit of its own (cases.CASE_LIMITS); U alone (3.9e-4, as rounded)
#:     still passes: a gap
#: im2col_gemm's "chunk=all-merged" (2026-11-26):
#:   forward, w read unrounded                  -> forward tf32 near_up fails
#:   backward_data, dyT copied unrounded        -> backward_data tf32 near_up fails
#:   the copy of yT into y, n and K swapped     -> forward cases fail
#:   col2im image-inner with the outer tap step -> backward_data cases fail (error 1.2-1.4)
#: A pointwise layer's merged column matrix copied by images_inner, not im2col / col2im
#: (2026-11-28; 107 im2col_gemm cases):
#:   host: the forward's x copied with the batch and channels swapped -> 12: error 1.1-1.4
#:   host: the same for backward_data's dx                            -> 3 (pointwise_groups2)
#: im2col_gemm on pointwise layers, x (dx) as the column matrix (2026-11-26, seventeenth
#: session; pointwise_groups2 in every direction, float16/32/64 and TF32):
#:   forward under "tf32" reading x unrounded     -> pointwise_groups2 forward tf32 near_up:
#:                                                   error 9.3e-4 (> 2e-4)
#:   backward_data writing every chunk at image 0  -> its tf32 near_up case (the only one
#:                                                   chunked: fp32 pointwise needs no
#:                                                   workspace, so only chunk=all is offered)
#: The epilogues' paired stores (store_acc2; implicit_gemm_tc and implicit_gemm_wgmma):
#:   the pair's second value from register 2v, not 2v + 1 -> every tc case with P*Q even
#:                                                          (error 0.99-1.08); after the
#:     two-loop form (3xTF32 and element-wise tc instances do not pair), injected in both
#:     kernels: tc_nhwc_geom fails in float16, bfloat16 and 1xTF32 (tc) and in float16 and
#:     3xTF32 (wgmma); tc's 3xTF32 case passes, as it should
#:   host: pairs without y's alignment checked            -> the -offset cases with P*Q even
#:                                                          (tc_pw_vec, tc_nhwc_geom): abort,
#:                                                          misaligned st.global.b32 / .v2.f32
#:   host: pairs without P*Q even                         -> tc_deep, odd, dil2_groups2 ...:
#:                                                          abort, misaligned stores
_TC_SHAPES: dict[tuple[str, str], tuple[str, ...]] = {
    ("float32", "fp32"): ("odd", "stride_pair", "dilation_stride", "groups_strided",
                          "k_over_tile", "pad_gt_filter", "single_pixel", "tc_deep",
                          "tc_long_k", *_TC_POINTWISE, *_TC_NHWC),
    ("float32", "tf32"): ("odd", "groups_strided", "tc_deep", "tc_pw_multi_block",
                          *_TC_POINTWISE, *_TC_NHWC),
    ("float16", "fp32"): ("odd", "dilation_stride", "k_over_tile", "tc_deep", "tc_long_k",
                          "tc_multi_block", "tc_pw_multi_block", *_TC_POINTWISE, *_TC_NHWC),
    ("bfloat16", "fp32"): ("odd", "groups_strided", "tc_deep", *_TC_POINTWISE, *_TC_NHWC),
}
#: 14 K-steps (the cp.async ring wraps at every stage count) and 40 output channels (every
#: row of a 16-row mma tile matters: with k <= 8 the rows g + 8 would all be padding).
_TC_EXTRA_SHAPES: dict[str, dict[str, Any]] = {
    "tc_deep": dict(n=1, c=24, h=5, w=5, k=40, r=3, s=3, pad=1),
    # K = 2304, as ResNet-50's res4 3x3: long enough that 3xTF32 summed straight into the
    # accumulator drifts past 1e-5 (the mma rounds toward zero; 1.6e-5 on an H100).
    "tc_long_k": dict(n=1, c=256, h=3, w=3, k=16, r=3, s=3, pad=1),
    "tc_pw_vec": dict(n=3, c=40, h=4, w=6, k=40, r=1, s=1),
    "tc_pw_vec_groups": dict(n=2, c=32, h=4, w=4, k=48, r=1, s=1, groups=2),
    "tc_pw_pq_odd": dict(n=2, c=16, h=3, w=5, k=8, r=1, s=1),
    # A 1x1 filter at stride 2 with padding: element-wise B from one tap per column, whose
    # bounds are the column's (the border columns read only padding).
    "tc_pw_strided": dict(n=2, c=20, h=7, w=9, k=24, r=1, s=1, pad=1, stride=2),
    "tc_nhwc_geom": dict(n=2, c=16, h=9, w=10, k=24, r=3, s=3, pad=(1, 2), stride=(2, 1),
                         dilation=(1, 2)),
    # Several blocks along both GEMM dimensions for every tile, the 256-row and 256-column
    # "-sS" ones included (600 pixels, 264 output channels; NHWC).
    "tc_multi_block": dict(n=2, c=16, h=15, w=20, k=264, r=3, s=3, pad=1),
    "tc_nhwc_groups": dict(n=3, c=24, h=5, w=6, k=18, r=3, s=2, pad=2, dilation=2, groups=3),
    # A 1x1 filter at strides (2, 3) without padding (dilation 2, which a 1x1 filter ignores):
    # NHWC copies gather its 5 x 4 pixels of each 9 x 11 image (_rearrange.gathered), and
    # the GEMM runs a stride-1 layer over them (2026-11-28). Mutations (of its 7 cases, tc in
    # four dtype/math pairs, wgmma in three; each injected once):
    #   the gathered column's q not times stride_w              -> 7: error 1.1-1.3
    #   the source row length P*Q, not H*W                      -> 7: error 1.4
    #   host: the GEMM launched on the strided problem (tc, wgmma) -> 7: ASan heap overflow
    "tc_pw_s2": dict(n=2, c=32, h=9, w=11, k=24, r=1, s=1, stride=(2, 3), dilation=2,
                     groups=2),
    # A pointwise layer with vector B in every dtype (P*Q = 320) over several blocks both
    # ways for the NCHW "-sS" tiles too (320 pixels, 264 output channels; kept this small
    # because the emulator takes a minute a config at twice the size).
    "tc_pw_multi_block": dict(n=1, c=40, h=16, w=20, k=264, r=1, s=1),
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

#: The backward directions' kernels (direct_bwd_data, direct_bwd_filter, col2im and the
#: im2col_gemm GEMM layouts) on these geometries, each against the float64 reference of its
#: direction: stride holes (taps fewer than the stride: some dx get no term), padding, dilation
#: 2, groups 2, odd sizes, n > 1, a deep batch for backward_filter's float16 sums, and a
#: depthwise layer (channel multiplier 2), whose backward_filter as a forward problem has one
#: image in 4 groups (fft's single GEMM call over frequencies and groups), and padding as
#: large as the filter at stride 2, where backward_data by phases starts at q0 = 1.
_BWD_SHAPES: dict[str, dict[str, Any]] = {
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
#: Shapes of _BWD_SHAPES also run in float16 and float64.
_BWD_OTHER_DTYPES = ("odd", "holes_s3_pad", "dil2_groups2", "deep_batch", "pointwise_groups2")
#: The algorithms that compute the backward directions on the GPU, on every _BWD_SHAPES
#: shape: direct and im2col_gemm with kernels of their own; implicit_gemm and fft through
#: their forward kernels on a rearranged problem (kernels/rearrange.cu's copies).
_BWD_ALGORITHMS = ("direct", "im2col_gemm", "implicit_gemm", "fft")
#: Mutations of kernels/rearrange.cu these cases catch (each injected once; `n` of the 76
#: implicit_gemm, fft and implicit_gemm_tc backward cases failed, before depthwise_m2):
#:   the filter flip skipped                                 -> 36: every backward_data case
#:                                                              with r or s > 1, error >= 1.1
#:   dy spread with step 1 instead of the stride              -> 15: every stride > 1
#:                                                              backward_data case, error >= 1.2
#:   a source column bound of SW + 1 instead of SW            -> 50: relative error >= 0.18
#:   the source indexed (g, b, a) instead of (g, a, b)        -> 76: error >= 0.98
#:   the column offset's sign flipped (+off_w)                -> 63: error >= 1.0
_BWD_DIRECTIONS = ("backward_data", "backward_filter")
_TF32_DIRECTIONS = ("forward", *_BWD_DIRECTIONS)
#: implicit_gemm_tc's backward directions (the rearranged problem on its forward kernel),
#: slow to emulate, on a few shapes per (dtype, math): stride holes, padding, dilation with
#: groups, odd sizes.
_TC_BWD_SHAPES: dict[tuple[str, str], tuple[str, ...]] = {
    ("float32", "fp32"): ("odd", "holes_s3_pad", "dil2_groups2"),
    ("float32", "tf32"): ("holes_s3_pad",),
    ("float16", "fp32"): ("dil2_groups2",),
    ("bfloat16", "fp32"): ("odd",),
}


#: implicit_gemm_wgmma (C/groups a whole number of 16-byte vectors) on the NHWC shapes of the
#: tc kernel: K-steps across filter taps with a partial last one (tc_deep, C/groups*R*S = 216),
#: 36 K-steps (tc_long_k: the stage ring wraps many times), padding, stride and dilation
#: differing per axis, groups with partial pixel tiles across images, several blocks each
#: way for every tile (tc_multi_block), operands one element off alignment (the kernel reads
#: only the workspace's NHWC copies), and both backward directions (wg_bwd: n = 8, so that
#: backward_filter's rearranged problem has C/groups = 8 too).
#: The checks of tests/cuda_emu/warp.h's wgmma model, and mutations of the kernel, each
#: injected once and caught on tc_deep (float16) and tc_nhwc_geom (bfloat16):
#:   fence.proxy.async after the cp.async wait removed  -> emulator abort: "wgmma reads shared
#:                                                         memory a cp.async wrote without
#:                                                         fence.proxy.async"
#:   wgmma.fence before the K-step's wgmma removed       -> abort: "without a wgmma.fence"
#:   wgmma.wait_group 1 in the loop (one group left in
#:     flight, never retired)                            -> abort: "block ended with wgmma
#:                                                         operations never waited for"
#:   the loop's __syncthreads() removed                  -> abort: "shared memory read by a
#:                                                         wgmma was overwritten before its
#:                                                         wgmma.wait_group"
#:   A descriptor with LBO and SBO swapped               -> relative error 1.2-1.3
#:   B descriptor without the k16 step's offset          -> relative error 1.2
#:   epilogue register 4j + 2h + v (v and h swapped)     -> relative error 0.9
#: and, on the float32 and -f1 paths (2026-11-25, eleventh session), each caught on the case
#: named:
#:   TF32 transpose storing v unrounded (the tensor core
#:     truncates)                        tc_deep round_up -> relative error 1.46e-3 (> 1e-3)
#:   3xTF32 without small.big            tc_deep          -> relative error 2.0e-4
#:   3xTF32 summed straight into acc     tc_long_k f32    -> relative error 1.52e-5 (> 1e-5;
#:                                                           1.6e-5 for mma.sync on an H100)
#:   x's small copy at offset 0 (big read twice)  tc_deep -> relative error 1.0
#:   -f1 copies as far ahead as at wait 0
#:     (AHEAD = STAGES - 1)              tc_long_k f16    -> abort: ASan use-after-poison as
#:                                                           the wait re-reads the operand a
#:                                                           cp.async is refilling
#:   copies issued for step kt + STAGES - 1 after a
#:     prologue of AHEAD steps           tc_deep f16      -> unwritten outputs (s5-f1)
#:   the wgmma_wait<0> after the loop removed  tc_deep f16 -> abort: "block ended with wgmma
#:                                                           operations never waited for"
#:   split K's slices all from K-step 0 (kbase 0)  tc_long_k f16 -> relative error 2.5 (-k8)
#: and on 3xTF32 with a group in flight (partial sums added every FLUSH_STEPS = 4 K-steps;
#: tc_long_k's error 1.2e-6 there against 3.1e-7 at a flush per step, 2026-11-28), each
#: caught on tc_deep, tc_long_k and tc_multi_block at "fp32":
#:   partial sums added only after the last K-step         tc_long_k -> error 1.43e-5 (> 1e-5)
#:   partial sums not reset after each addition            -> 3 of 3: error 2.6-40
#:   the addition after wait_group 1, not 0                 -> 3 of 3: abort, "a wgmma
#:                                                            accumulator register was written
#:                                                            while the wgmma was in flight"
#: and on the tap walk (common.cuh NhwcTapWalk, nineteenth session):
#:   a filter column's step without the dilation
#:     (offset += C - cg)                tc_nhwc_geom f16, bf16 -> all three such cases fail
#:   a filter row's step not rewinding the columns
#:     (offset += dil_h * W * C)         tc_deep f16, bf16 -> fails
#: and on the NHWC transpose's tile numbering (kernels/rearrange.cu, nineteenth session):
#:   the host's two divisors swapped     tc_long_k f16    -> fails
#: and on the warp-specialized "-ws" tiles (producer warps and mbarriers, 2026-11-28; the
#: forward schedule defers each arrival until no other thread can run, the reverse one does
#: not: warp.h), each caught on the case named, the -ws configurations alone run:
#:   consumers wait on `full` at K-step 0 only  tc_deep f16 -> abort: ASan use-after-poison
#:                                                             (a stage read before it landed)
#:   producers wait on `empty` with the parity of the
#:     current use, not the previous (written so
#:     first; the emulator caught it)     tc_deep tf32     -> abort: "shared memory read by a
#:                                                            wgmma was overwritten before its
#:                                                            wgmma.wait_group"
#:   producers without fence.proxy.async  tc_long_k f16    -> abort: "wgmma reads shared
#:                                                            memory a cp.async wrote without
#:                                                            fence.proxy.async"
#:   consumers release the stage they just issued
#:     wgmma on, not the previous one     tc_long_k f16    -> abort: ASan use-after-poison
#:   LAG = STAGES - 1 (a producer waiting for a stage
#:     before signalling the step after it) tc_long_k f16  -> abort: "an mbarrier wait that no
#:                                                            arrival completes"
#:   3xTF32's partial sums added only after the last
#:     K-step                              tc_long_k f32    -> relative error 1.38e-5 (> 1e-5)
_WG_SHAPES: dict[tuple[str, str], tuple[str, ...]] = {
    ("float16", "fp32"): ("tc_deep", "tc_long_k", "tc_nhwc_geom", "tc_multi_block", "tc_pw_s2"),
    ("bfloat16", "fp32"): ("tc_deep", "tc_nhwc_groups"),
    ("float32", "fp32"): ("tc_deep", "tc_long_k", "tc_nhwc_geom", "tc_multi_block", "tc_pw_s2"),
    ("float32", "tf32"): ("tc_deep", "tc_nhwc_groups", "tc_pw_s2"),
}
_WG_BWD = dict(n=8, c=16, h=5, w=6, k=8, r=3, s=3, pad=1, stride=2)
#: implicit_gemm_wgmma's NCHW configurations (_wgmma_nchw: pointwise float32, x^T as wgmma's A
#: from registers, W rounded or split in shared memory), at math "fp32" and "tf32": 16-byte
#: copies of x with partial K-step, channel and pixel tiles (tc_pw_vec), element copies (P*Q
#: odd), nine K-steps with a split K (wg_pw_long), several blocks each way
#: (tc_pw_multi_block), misaligned operands (x element-wise, w copied to the workspace first),
#: padding and strides (tc_pw_strided, wg_pw_s23: element copies of the pixels read, zeros
#: for padding), and both backward directions on a pointwise layer (wg_pw_bwd).
#: Mutations of the kernel, each injected once and run on seven of these cases (tc_pw_vec,
#: tc_pw_pq_odd and wg_pw_long at both maths, and tc_pw_vec's near_up), 2026-11-28:
#:   A fragment words 1 and 2 swapped (channel and pixel halves) -> 7 of 7: error 0.17-1.16
#:   epilogue register 4j + 2h + v (v and h swapped)           -> 7 of 7: error 0.24-0.99
#:   one set of A registers with a group in flight (1xTF32)     -> the 3 tf32 cases with two
#:                                                                 or more K-steps: abort, "a
#:                                                                 wgmma's A register was
#:                                                                 written while the wgmma
#:                                                                 was in flight"
#:   one set of 3xTF32's small A registers in flight (-f1,
#:     added later the same day)                              -> the 2 fp32 cases with two
#:                                                                 or more K-steps: the same
#:                                                                 abort
#:   W left unrounded in shared memory at 1xTF32              -> near_up: error 9.3e-4 (> 2e-4)
#:   x left unrounded in registers at 1xTF32                  -> near_up: error 9.3e-4
#:   x's small part dropped at 3xTF32 (no small.big)          -> the 3 fp32 cases: error
#:                                                                 1.8-2.1e-4 (> 1e-5)
#:   W's split before its copies' wait (round_w first)        -> 7 of 7: ASan use-after-poison
#: and of the strided path (on tc_pw_strided and wg_pw_s23 at both maths; tc_pw_vec passes):
#:   padding's pixels read (no bounds test)                   -> 4 of 4: ASan SEGV
#:   the input column without its stride                      -> 4 of 4: error 1.43-1.61
#:   a K-step's channels P*Q apart, not H*W                    -> 4 of 4: error 1.32-1.42
_WG_NCHW_SHAPES: dict[str, dict[str, Any]] = {
    "tc_pw_vec": _TC_EXTRA_SHAPES["tc_pw_vec"],
    "tc_pw_pq_odd": _TC_EXTRA_SHAPES["tc_pw_pq_odd"],
    "wg_pw_long": dict(n=1, c=264, h=3, w=4, k=24, r=1, s=1),
    "tc_pw_multi_block": _TC_EXTRA_SHAPES["tc_pw_multi_block"],
    "tc_pw_strided": _TC_EXTRA_SHAPES["tc_pw_strided"],
    "wg_pw_s23": dict(n=2, c=36, h=9, w=11, k=20, r=1, s=1, stride=(2, 3), pad=(0, 1)),
    # K = 96: the 96-row tiles (_wgmma_nchw.fits_96) with x in vectors, and strided and
    # padded (element by element).
    "wg_pw_k96": dict(n=2, c=40, h=4, w=6, k=96, r=1, s=1),
    "wg_pw_k96_s2": dict(n=2, c=24, h=9, w=7, k=96, r=1, s=1, stride=2, pad=1),
}
_WG_PW_BWD = dict(n=4, c=8, h=3, w=4, k=12, r=1, s=1)
#: The NCHW configurations on filters with taps (TAPS: K tap by tap over the host's (K, R*S, C)
#: copy of W, x element by element at each tap's shifted pixels): a 3x3 layer with two
#: K-steps a tap and two pixel tiles (each tile's pixels in two images) and split K, whose
#: slices start inside a tap; a 5x5 with C not a whole K-step (each tap's second K-step
#: partial); stride, asymmetric padding and dilation, whose taps read padding on every side.
_WG_NCHW_TAPS: dict[str, dict[str, Any]] = {
    "wg_taps_3x3": dict(n=2, c=64, h=9, w=10, k=20, r=3, s=3, pad=1),
    "wg_taps_5x5": dict(n=1, c=36, h=7, w=6, k=72, r=5, s=5, pad=2),
    "wg_taps_s2_dil": dict(n=2, c=8, h=11, w=9, k=24, r=3, s=2, pad=(2, 1), stride=(2, 1),
                           dilation=(2, 3)),
}
#: implicit_gemm_wgmma on first layers (C = 3, one group): the NHWC copies pad the channels
#: to a whole 16-byte vector with zeros (kernels/rearrange.cu pad_channels; 4 in float32, 8
#: in 16-bit), in every dtype and math, on a 3x3 layer and a 7x7 one at stride 2 (ResNet-50's
#: conv1 geometry). Mutations, each injected once (cases failed of these 8, 2026-11-28):
#:   the padding channels copies of the last channel, not zeros  -> 8: error 0.53-3.2
#:   3xTF32's small parts written over the big ones (offset 0)    -> the 2 fp32 cases:
#:                                                                  unwritten outputs
#:   K-steps and splits counted over the unpadded channels        -> 8: error 0.32-0.70
_WG_FIRST_LAYERS: dict[str, dict[str, Any]] = {
    "wg_c3": dict(n=2, c=3, h=9, w=10, k=20, r=3, s=3, pad=1),
    "wg_c3_7x7_s2": dict(n=1, c=3, h=15, w=13, k=24, r=7, s=7, pad=3, stride=2),
}
#: The backward directions on wgmma: 16-bit, and 3xTF32 (the FP32 tolerance).
_WG_BWD_DTYPES = ("float16", "float32")
#: implicit_gemm_wgmma's tiles of float32 as two 16-bit parts (3xFP16: float16 parts of v * s,
#: s a power of two per tensor and call) run on every float32 "fp32" wgmma case with C/groups
#: % 8 == 0, and on these: 18 K-steps with split K, the strided 1x1 layer's gathered copy
#: (transpose<float, 3, true>), groups, and NaN in x; then on data past FP16's range (x and w
#: 1e5 or 1e-6 times the usual) and with outliers 10^4 times the rest (cases.py).
#: Mutations of the copy and GEMM code the parts share, injected once each on the first four
#: cases and the two multi_block ones while the parts were bfloat16 ("-3xbf16", 2914fa9,
#: withdrawn: 1.21e-5 on wg_parts_long-outlier), every case failing each time:
#:   the small part the value again, not its remainder (rearrange.cu) -> error 2.0
#:   the small copy of x read at twice its offset (as if the parts
#:     were floats)                          -> error 0.99-1.16; the strided ones: ASan abort
#:   the host writing 3xTF32's float parts for a tile of 16-bit parts -> NaN or inf in y
#: and of 3xFP16's scales, on the nine range and outlier cases (2026-11-28):
#:   the scale left at 1 (transpose PARTS 3)     -> the six huge and tiny cases: NaN (overflow)
#:                                                  or error 2.4-2.6e-2 (small parts lost)
#:   the epilogue's unscaling dropped           -> all nine: error 1.0 to 4e19
#:   maxima over half of each tensor (absmax_parts' stride doubled)
#:                                               -> wg_parts_long-outlier: NaN (its last
#:                                                  element, an outlier, missed); tc_deep's
#:                                                  tensors fit the first pass, and
#:                                                  wg_parts_pw_s2's last pixel is one its
#:                                                  stride skips
_WG_PARTS: dict[str, dict[str, Any]] = {
    "wg_parts_long": dict(n=1, c=128, h=12, w=12, k=128, r=3, s=3, pad=1),
    "wg_parts_pw_s2": dict(n=4, c=64, h=16, w=16, k=64, r=1, s=1, stride=2),
    "wg_parts_groups": dict(n=2, c=16, h=12, w=12, k=64, r=3, s=3, pad=1, groups=2),
}
_WG_SCALED: dict[str, dict[str, Any]] = {
    "tc_deep": _TC_EXTRA_SHAPES["tc_deep"],
    **{shape: _WG_PARTS[shape] for shape in ("wg_parts_long", "wg_parts_pw_s2")},
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


def _case(case_id: str, name: str, problem: dict[str, Any],
          offsets: list[int] | None = None, inputs: str | None = None) -> dict[str, Any] | None:
    if not ALGORITHMS[name].supports(make_problem(**problem)):
        return None
    return {"id": case_id, "algorithm": name, "problem": problem, "offsets": offsets,
            "inputs": inputs}


def _cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any] | None] = []
    geometry = {k: v for k, v in SHAPES.items() if k not in NETWORK_SHAPES}
    for name in (n for n in ALGORITHMS if n not in ("implicit_gemm_tc", "implicit_gemm_wgmma")):
        for shape, kw in (geometry | ({} if name == "fft" else _LAYERS)).items():
            dtypes = ["float32"]
            if shape in OTHER_DTYPE_SHAPES:
                dtypes += ["float16", "float64"]
            cases += [_case(f"{name}-{shape}-{d}", name, {**kw, "dtype": d}) for d in dtypes]
        for shape, kw in ALIGN_SHAPES.items():
            for dtype, item in DTYPES.items():
                cases.append(_case(f"{name}-{shape}-{dtype}-offset", name,
                                   {**kw, "dtype": dtype}, [item, item, item]))
    # P*Q = 64: the implicit GEMM's float4 epilogue must run exactly when y is 16-aligned.
    for y_off in (0, 4, 8, 12):
        cases.append(_case(f"vec-y{y_off}", "implicit_gemm", SHAPES["pq_multiple_of_4"],
                           [4, 4, y_off]))
    for (dtype, math), shapes in _TC_SHAPES.items():
        cases += [_case(f"implicit_gemm_tc-{shape}-{dtype}-{math}", "implicit_gemm_tc",
                        {**(SHAPES | _TC_EXTRA_SHAPES)[shape], "dtype": dtype, "math": math})
                  for shape in shapes]
        item = 4 if dtype == "float32" else 2
        for shape in ("pq_odd_k_odd", "tc_pw_vec"):
            cases.append(_case(f"implicit_gemm_tc-{shape}-{dtype}-{math}-offset",
                               "implicit_gemm_tc",
                               {**(ALIGN_SHAPES | _TC_EXTRA_SHAPES)[shape], "dtype": dtype,
                                "math": math}, [item, item, item]))
        # x alone off: A still in vectors, B element-wise.
        cases.append(_case(f"implicit_gemm_tc-tc_pw_vec-{dtype}-{math}-x_offset",
                           "implicit_gemm_tc", {**_TC_EXTRA_SHAPES["tc_pw_vec"], "dtype": dtype,
                                                "math": math}, [item, 0, 0]))
    cases += [_case(f"fft-{shape}-{dtype}", "fft", {**kw, "dtype": dtype})
              for shape, kw in _FFT_SHAPES.items()
              for dtype in ("float32", *(("float16",) if shape in _FFT_FLOAT16 else ()))]
    cases += [_case(f"winograd-{shape}-{dtype}", "winograd", {**kw, "dtype": dtype})
              for shape, kw in _WINOGRAD_SHAPES.items() for dtype in CTYPES]
    for shape, dw_dtypes in _DW_DTYPES.items():
        cases += [_case(f"depthwise-{shape}-{d}", "depthwise", {**DEPTHWISE_SHAPES[shape],
                                                                "dtype": d}) for d in dw_dtypes]
    for dtype, item in DTYPES.items():
        cases.append(_case(f"depthwise-dw_asymmetric-{dtype}-offset", "depthwise",
                           {**DEPTHWISE_SHAPES["dw_asymmetric"], "dtype": dtype},
                           [item, item, item]))
    for name in _BWD_ALGORITHMS:
        for direction in _BWD_DIRECTIONS:
            for shape, kw in _BWD_SHAPES.items():
                dtypes = ["float32", *(("float16", "float64") if shape in _BWD_OTHER_DTYPES
                                       else ())]
                cases += [_case(f"{name}-{direction}-{shape}-{d}", name,
                                {**kw, "dtype": d, "direction": direction}) for d in dtypes]
            item = 4
            cases.append(_case(f"{name}-{direction}-pq_odd_k_odd-float32-offset", name,
                               {**ALIGN_SHAPES["pq_odd_k_odd"], "dtype": "float32",
                                "direction": direction},
                               [item, item, item]))
    for (dtype, math), shapes in _TC_BWD_SHAPES.items():
        for direction in _BWD_DIRECTIONS:
            cases += [_case(f"implicit_gemm_tc-{direction}-{shape}-{dtype}-{math}",
                            "implicit_gemm_tc", {**_BWD_SHAPES[shape], "dtype": dtype,
                                                 "math": math, "direction": direction})
                      for shape in shapes]
    for (dtype, math), shapes in _WG_SHAPES.items():
        cases += [_case(f"implicit_gemm_wgmma-{shape}-{dtype}-{math}", "implicit_gemm_wgmma",
                        {**_TC_EXTRA_SHAPES[shape], "dtype": dtype, "math": math})
                  for shape in shapes]
        item = DTYPES[dtype]
        cases.append(_case(f"implicit_gemm_wgmma-tc_nhwc_geom-{dtype}-{math}-offset",
                           "implicit_gemm_wgmma", {**_TC_EXTRA_SHAPES["tc_nhwc_geom"],
                                                   "dtype": dtype, "math": math},
                           [item, item, item]))
    # Operands that TF32 rounding and truncation tell apart (cases.py): the NHWC copies must
    # round (the mma.sync kernel rounds in registers; tests/test_cuda_emu_warp.py pins that).
    cases.append(_case("implicit_gemm_wgmma-tc_deep-float32-tf32-round_up",
                       "implicit_gemm_wgmma", {**_TC_EXTRA_SHAPES["tc_deep"], "dtype": "float32",
                                               "math": "tf32"}, inputs="tf32_round_up"))
    # implicit_gemm_tc at 1xTF32 rounds its fragments as it reads them, or (NCHW vector A with
    # element-wise B) its landed copies in shared memory (ROUND_IN_PLACE): every tile path
    # (NCHW vector B, element-wise B from one tap, NHWC B) on operands where one left
    # unrounded shows.
    cases += [_case(f"implicit_gemm_tc-{shape}-float32-tf32-near_up", "implicit_gemm_tc",
                    {**_TC_EXTRA_SHAPES[shape], "dtype": "float32", "math": "tf32"},
                    inputs="tf32_near_up")
              for shape in ("tc_pw_vec", "tc_pw_strided", "tc_nhwc_geom")]
    # NaN passes through the TF32 roundings (issue 10: 3xTF32's big part without cvt.rna's
    # test) to exactly the outputs the reference has NaN at.
    cases += [_case(f"{algorithm}-{shape}-float32-{math}-nan_x", algorithm,
                    {**_TC_EXTRA_SHAPES[shape], "dtype": "float32", "math": math},
                    inputs="nan_x")
              for algorithm, shape in (("implicit_gemm_tc", "tc_pw_vec"),
                                       ("implicit_gemm_tc", "tc_nhwc_geom"),
                                       ("implicit_gemm_tc", "tc_deep"),
                                       ("implicit_gemm_wgmma", "tc_deep"),
                                       ("implicit_gemm_wgmma", "tc_pw_vec"))
              for math in ("fp32", "tf32")]
    cases += [_case(f"implicit_gemm_wgmma-{direction}-wg_bwd-{dtype}", "implicit_gemm_wgmma",
                    {**_WG_BWD, "dtype": dtype, "direction": direction})
              for direction in _BWD_DIRECTIONS for dtype in _WG_BWD_DTYPES]
    for math in ("fp32", "tf32"):
        cases += [_case(f"implicit_gemm_wgmma-{shape}-float32-{math}", "implicit_gemm_wgmma",
                        {**kw, "dtype": "float32", "math": math})
                  for shape, kw in (_WG_NCHW_SHAPES | _WG_NCHW_TAPS).items()]
        cases.append(_case(f"implicit_gemm_wgmma-tc_pw_vec-float32-{math}-offset",
                           "implicit_gemm_wgmma", {**_TC_EXTRA_SHAPES["tc_pw_vec"],
                                                   "dtype": "float32", "math": math}, [4, 4, 4]))
        cases += [_case(f"implicit_gemm_wgmma-{direction}-wg_pw_bwd-float32-{math}",
                        "implicit_gemm_wgmma",
                        {**_WG_PW_BWD, "dtype": "float32", "math": math, "direction": direction})
                  for direction in _BWD_DIRECTIONS]
    cases += [_case(f"implicit_gemm_wgmma-{shape}-{dtype}-{math}", "implicit_gemm_wgmma",
                    {**kw, "dtype": dtype, "math": math})
              for shape, kw in _WG_FIRST_LAYERS.items() for dtype, math in _WG_SHAPES]
    # The NCHW tiles round W in shared memory on a 1x1 layer, and with taps in w's transpose.
    cases += [_case(f"implicit_gemm_wgmma-{shape}-float32-tf32-near_up", "implicit_gemm_wgmma",
                    {**kw, "dtype": "float32", "math": "tf32"}, inputs="tf32_near_up")
              for shape, kw in (("tc_pw_vec", _TC_EXTRA_SHAPES["tc_pw_vec"]),
                                ("wg_taps_3x3", _WG_NCHW_TAPS["wg_taps_3x3"]))]
    cases += [_case(f"implicit_gemm_wgmma-{shape}-float32-fp32{'-nan_x' if nan else ''}",
                    "implicit_gemm_wgmma", {**kw, "dtype": "float32", "math": "fp32"},
                    inputs="nan_x" if nan else None)
              for shape, kw in _WG_PARTS.items() for nan in (False, shape.endswith("s2"))]
    cases += [_case(f"implicit_gemm_wgmma-{shape}-float32-fp32-{inputs}", "implicit_gemm_wgmma",
                    {**kw, "dtype": "float32", "math": "fp32"}, inputs=inputs)
              for shape, kw in _WG_SCALED.items() for inputs in ("huge", "tiny", "outlier")]
    # cuBLAS at math "tf32" (fake_gemm truncates TF32 operands, as the tensor cores do with
    # unrounded ones): im2col_gemm in every direction must hand it operands its kernels
    # rounded (held to 2e-4 on inputs where one truncated operand costs 9.5e-4), and
    # winograd's F(2x2) (F(4x4) stays FP32) likewise (on inputs only rounding keeps within
    # the tolerance: its transforms leave U and V off the TF32 grid).
    cases += [_case(f"im2col_gemm-{shape}-{direction}-tf32-near_up", "im2col_gemm",
                    {**kw, "dtype": "float32", "math": "tf32", "direction": direction},
                    inputs="tf32_near_up")
              for direction in _TF32_DIRECTIONS
              for shape, kw in (("stride_pair", SHAPES["stride_pair"]),
                                ("pointwise_groups2", _BWD_SHAPES["pointwise_groups2"]))]
    cases.append(_case("winograd-odd-tf32-round_up", "winograd",
                       {**SHAPES["odd"], "dtype": "float32", "math": "tf32"},
                       inputs="tf32_round_up"))
    return [c for c in cases if c is not None]


CASES = {c["id"]: c for c in _cases()}


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict[str, Any]]:
    """Every case's verdict (kernels built in parallel first, then two process chains)."""
    build_all(shipped_kernels())
    return run_cases(list(CASES.values()))


@pytest.mark.parametrize("case_id", list(CASES))
def test_matches_reference_race_free_in_bounds(verdicts: dict[str, dict[str, Any]],
                                               case_id: str) -> None:
    verdict = verdicts[case_id]
    assert verdict["status"] == "ok", verdict["message"]


def test_every_algorithm_and_dtype_is_covered() -> None:
    covered = {(c["algorithm"], c["problem"].get("dtype", "float32")) for c in CASES.values()}
    for name in ALGORITHMS:
        assert (name, "float32") in covered
    wgmma = {(c["problem"]["dtype"], c["problem"].get("math", "fp32")) for c in CASES.values()
             if c["algorithm"] == "implicit_gemm_wgmma"}
    assert wgmma == set(_WG_SHAPES)
    tc = {(c["problem"]["dtype"], c["problem"]["math"]) for c in CASES.values()
          if c["algorithm"] == "implicit_gemm_tc"}
    assert tc == set(_TC_SHAPES)
    assert {d for n, d in covered if n == "implicit_gemm"} == {"float32", "float16"}
    assert {d for n, d in covered if n == "fft"} == set(CTYPES)  # fft has no bfloat16
    assert {d for n, d in covered if n == "winograd"} == set(CTYPES)
    assert {d for n, d in covered if n == "depthwise"} == set(DTYPES)


def test_tensor_core_vector_fills_exactly_where_allowed(
        verdicts: dict[str, dict[str, Any]]) -> None:
    """Forward tc cases run the NCHW instance whose (A, B) copy widths the problem and the
    operands' alignment allow: A vectors when C/groups*R*S is a whole number of 16-byte
    vectors, B vectors also on 1x1 stride-1 unpadded layers with P*Q a whole number; and
    NHWC instances (both in vectors) exactly when C/groups is whole vectors and B is not.
    Every instance launched is a shipped one (compiled spill-free by test_kernels_compile):
    an NCHW "-sS" tile with a misaligned operand runs 128x128 instead."""
    shipped = set(shipped_kernels()[implicit_gemm_tc.KERNEL_FILE])
    for case_id, case in CASES.items():
        if case["algorithm"] != "implicit_gemm_tc" or "direction" in case["problem"]:
            continue
        verdict = verdicts[case_id]
        assert verdict["status"] == "ok", verdict["message"]
        p = make_problem(**case["problem"])
        vec = 4 if p.dtype == "float32" else 8
        out_h, out_w = p.out_hw
        x_off, w_off, _y_off = case["offsets"] or (0, 0, 0)
        a_vec = w_off % 16 == 0 and (p.c // p.groups * p.r * p.s) % vec == 0
        b_vec = a_vec and x_off % 16 == 0 and (p.r, p.s, p.stride, p.pad) == (
            1, 1, (1, 1), (0, 0)) and (out_h * out_w) % vec == 0
        nhwc_expected = (p.c // p.groups) % vec == 0 and not (
            (p.r, p.s, p.stride, p.pad) == (1, 1, (1, 1), (0, 0)) and (out_h * out_w) % vec == 0)
        layouts = set()
        for name, _args in verdict["launches"]:
            if not name.startswith("implicit_gemm_tc_conv<"):
                continue  # the NHWC configurations' transposes
            assert name in shipped, (case_id, name)
            *_, va, vb, nhwc, _bk = (f.strip()
                                     for f in name.rstrip(">").split("<")[1].split(","))
            layouts.add(nhwc)
            expected = (vec, vec) if nhwc == "true" else (vec if a_vec else 1, vec if b_vec else 1)
            assert (int(va), int(vb)) == expected, (case_id, name)
        assert layouts == ({"false", "true"} if nhwc_expected else {"false"}), case_id


#: Mutations of kernels/common.cuh's sum_split_tile these cases catch (each tried once, over
#: the 103 implicit_gemm_tc and implicit_gemm_wgmma cases, 2026-11-27):
#:   the last block leaves its tile's count as it is         -> 22 of 103 (the second run, on
#:                                                              the same counters, sums none)
#:   the last block starts from its own split's partial sums
#:   (the sum's order then depends on which block ran last)  -> 8 of 103; with the emulator's
#:                                                              blocks always in launch order,
#:                                                              0 (of tc's 80, tried earlier)
def test_split_k_is_summed_in_the_gemm_kernel(verdicts: dict[str, dict[str, Any]]) -> None:
    """A tensor-core case launches exactly the kernels `work` counts (split K: no summing
    kernel; the last block of each tile sums the splits, whichever block ran last, as the
    two schedules, whose blocks run in opposite orders, agree bit for bit; and it leaves
    its counters at zero, as the second run reuses them), and many cases offer splits."""
    split_cases = 0
    for case_id, case in CASES.items():
        name = case["algorithm"]
        if name not in ("implicit_gemm_tc", "implicit_gemm_wgmma"):
            continue
        verdict = verdicts[case_id]
        assert verdict["status"] == "ok", verdict["message"]
        algorithm, problem = ALGORITHMS[name], make_problem(**case["problem"])
        assert isinstance(algorithm, AlgorithmBase)  # `work` is AlgorithmBase's
        configs = algorithm.configs(problem)
        # An NCHW wgmma configuration copies a misaligned w to the workspace first (with taps
        # it always does, and `work` counts that transpose).
        w_copies = sum(c.split("-k")[0].endswith(_wgmma_nchw.SUFFIX) for c in configs
                       ) if (case["offsets"] or (0, 0))[1] % 16 and not _wgmma_nchw.taps(
                           problem) else 0
        assert len(verdict["launches"]) == len(SCHEDULES) * (w_copies + sum(
            algorithm.work(problem, c).launches for c in configs)), case_id
        split_cases += any("-k" in c for c in configs)
    assert split_cases >= 10


def test_every_winograd_instance_runs(verdicts: dict[str, dict[str, Any]]) -> None:
    launched = {name for case_id, verdict in verdicts.items() if case_id.startswith("winograd")
                for name, _args in verdict.get("launches", [])}
    assert launched == set(winograd.shipped_kernels())


@pytest.mark.parametrize("name, module", [("depthwise", depthwise),
                                          ("implicit_gemm_wgmma", implicit_gemm_wgmma),
                                          ("implicit_gemm_wgmma", _wgmma_nchw)])
def test_every_shipped_instance_runs(verdicts: dict[str, dict[str, Any]], name: str,
                                     module: Any) -> None:
    launched = {kernel for case_id, case in CASES.items() if case["algorithm"] == name
                for kernel, _args in verdicts[case_id].get("launches", [])}
    assert set(module.shipped_kernels()) <= launched


def test_every_backward_kernel_and_dtype_is_covered() -> None:
    covered = {(c["algorithm"], c["problem"].get("direction"), c["problem"].get("dtype", "float32"))
               for c in CASES.values()}
    for name in _BWD_ALGORITHMS:
        for direction in _BWD_DIRECTIONS:
            for dtype in CTYPES:
                supported = ALGORITHMS[name].supports(
                    make_problem(**_BWD_SHAPES["odd"], dtype=dtype, direction=direction))
                assert ((name, direction, dtype) in covered) == bool(supported)
    tc = {(c["problem"]["direction"], c["problem"]["dtype"], c["problem"]["math"])
          for c in CASES.values()
          if c["algorithm"] == "implicit_gemm_tc" and "direction" in c["problem"]}
    assert tc == {(d, *key) for d in _BWD_DIRECTIONS for key in _TC_SHAPES}


def test_float16_backward_filter_sums_in_float32(verdicts: dict[str, dict[str, Any]]) -> None:
    """im2col_gemm's float16 dW is summed over the batch in float32, rounded once at the end."""
    verdict = verdicts["im2col_gemm-backward_filter-deep_batch-float16"]
    assert verdict["status"] == "ok", verdict["message"]
    names = [name for name, _args in verdict["launches"]]
    configs = len(verdict["errors"])
    assert names.count("round_to_storage<half_t>") == configs * len(SCHEDULES)


@pytest.mark.parametrize("y_off", [0, 4, 8, 12])
def test_vector_stores_only_when_aligned(verdicts: dict[str, dict[str, Any]],
                                         y_off: int) -> None:
    verdict = verdicts[f"vec-y{y_off}"]
    assert verdict["status"] == "ok", verdict["message"]
    flags = {args[_VEC_OUT_ARG] for _name, args in verdict["launches"]}
    assert flags == {int(y_off == 0)}


def test_no_vector_stores_when_pq_is_not_a_multiple_of_4(
        verdicts: dict[str, dict[str, Any]]) -> None:
    for shape in ("pq_odd_k_odd", "pq_2", "pq_6_groups"):
        verdict = verdicts[f"implicit_gemm-{shape}-float32-offset"]
        assert verdict["launches"]
        assert all(args[_VEC_OUT_ARG] == 0 for _name, args in verdict["launches"])


#: Cases whose runs launch through prepared parameter buffers (algorithms.cuda._launch):
#: tensor-core tiles (NCHW, NHWC with its copies, split K), wgmma, im2col_gemm,
#: direct, implicit_gemm, depthwise, winograd, and backward_data's rearranging copies.
_PREPARED_CASES = ("implicit_gemm_tc-odd-float32-fp32",
                   "implicit_gemm_wgmma-tc_nhwc_geom-float16-fp32-offset",
                   "im2col_gemm-odd-float32", "direct-odd-float32", "implicit_gemm-odd-float32",
                   "depthwise-depthwise-float32", "winograd-odd-float32",
                   "implicit_gemm_tc-backward_data-holes_s3_pad-float32-fp32")


def test_prepared_launches_are_what_runs(verdicts: dict[str, dict[str, Any]]) -> None:
    """The emulated cases of tc, wgmma and im2col_gemm launch from prepared buffers, which
    the emulated kernels read by their own signatures (as cuLaunchKernel's driver does)."""
    for case_id in _PREPARED_CASES:
        verdict = verdicts[case_id]
        assert verdict["status"] == "ok", verdict["message"]
        assert verdict["prepared"] == len(verdict["launches"]) > 0, case_id


#: Mutations of algorithms/cuda/_replay.py and _cublas.py these cases catch (each tried
#: once over six cases: direct, implicit_gemm, implicit_gemm_tc, depthwise, winograd,
#: im2col_gemm, 2026-11-28):
#:   x's and w's addresses swapped in a replay          -> 6 of 6 (AddressSanitizer)
#:   a replay's last call dropped                       -> 6 of 6 (y left as NaN)
#:   every argument taken as fixed (none moved)         -> 6 of 6 (y left as NaN)
#:   cuBLAS called in a dry run instead of recorded     -> 2 of 6: the two with GEMMs
#:                                                         (AddressSanitizer SEGV)
#:   fft marked replayable (cuFFT calls not recorded)   -> its case (AddressSanitizer)
def test_replays_are_what_plans_run(verdicts: dict[str, dict[str, Any]]) -> None:
    """Every configuration of a replayable algorithm's case ran its second schedule as a
    plan replays it (algorithms.cuda._replay), worked out on the first schedule's operands
    and replayed at the second's, and matched the first bit for bit; others ran."""
    moved = 0
    for case_id, case in CASES.items():
        verdict = verdicts[case_id]
        if verdict["status"] != "ok":
            continue  # failed elsewhere
        configs = len(verdict["errors"])
        replayable = getattr(ALGORITHMS[case["algorithm"]], "replayable", False)
        assert sum(verdict["replayed"]) == (configs if replayable else 0), case_id
        moved += verdict["replayed"][0]
    # The two schedules' operands agree modulo 16 (exact-size heap blocks, or offsets
    # from 256-byte boundaries), so the replay is checked at other addresses.
    replayed = sum(sum(v["replayed"]) for v in verdicts.values() if v["status"] == "ok")
    assert moved == replayed >= 3000


def test_launches_without_prepared_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression: with CONVTUNE_PREPARED_LAUNCH=0, GemmLaunch took its cached "no prepared
    # launch" entry for a pair of launches and called None on its second run.
    monkeypatch.setenv(ENV, "0")
    found = run_cases([CASES[case_id] for case_id in _PREPARED_CASES])
    for case_id, verdict in found.items():
        assert verdict["status"] == "ok", (case_id, verdict.get("message"))
        assert verdict["prepared"] == 0 and verdict["launches"], case_id
