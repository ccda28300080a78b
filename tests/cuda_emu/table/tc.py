"""Emulated cases of implicit_gemm_tc, the mma.sync tensor-core kernel."""

from __future__ import annotations

from typing import Any

from tests.cuda_emu.table.backward import BWD_DIRECTIONS, BWD_SHAPES
from tests.cuda_emu.table.case import Case, case
from tests.cuda_shapes import ALIGN_SHAPES, SHAPES

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
TC_SHAPES: dict[tuple[str, str], tuple[str, ...]] = {
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
TC_EXTRA_SHAPES: dict[str, dict[str, Any]] = {
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

#: implicit_gemm_tc's backward directions (the rearranged problem on its forward kernel),
#: slow to emulate, on a few shapes per (dtype, math): stride holes, padding, dilation with
#: groups, odd sizes.
_TC_BWD_SHAPES: dict[tuple[str, str], tuple[str, ...]] = {
    ("float32", "fp32"): ("odd", "holes_s3_pad", "dil2_groups2"),
    ("float32", "tf32"): ("holes_s3_pad",),
    ("float16", "fp32"): ("dil2_groups2",),
    ("bfloat16", "fp32"): ("odd",),
}


def forward_cases() -> list[Case | None]:
    """TC_SHAPES per (dtype, math), and misaligned (all operands, or x alone)."""
    cases: list[Case | None] = []
    for (dtype, math), shapes in TC_SHAPES.items():
        cases += [case(f"implicit_gemm_tc-{shape}-{dtype}-{math}", "implicit_gemm_tc",
                       {**(SHAPES | TC_EXTRA_SHAPES)[shape], "dtype": dtype, "math": math})
                  for shape in shapes]
        item = 4 if dtype == "float32" else 2
        for shape in ("pq_odd_k_odd", "tc_pw_vec"):
            cases.append(case(f"implicit_gemm_tc-{shape}-{dtype}-{math}-offset",
                              "implicit_gemm_tc",
                              {**(ALIGN_SHAPES | TC_EXTRA_SHAPES)[shape], "dtype": dtype,
                               "math": math}, [item, item, item]))
        # x alone off: A still in vectors, B element-wise.
        cases.append(case(f"implicit_gemm_tc-tc_pw_vec-{dtype}-{math}-x_offset",
                          "implicit_gemm_tc", {**TC_EXTRA_SHAPES["tc_pw_vec"], "dtype": dtype,
                                               "math": math}, [item, 0, 0]))
    return cases


def backward_cases() -> list[Case | None]:
    """_TC_BWD_SHAPES in both backward directions."""
    cases: list[Case | None] = []
    for (dtype, math), shapes in _TC_BWD_SHAPES.items():
        for direction in BWD_DIRECTIONS:
            cases += [case(f"implicit_gemm_tc-{direction}-{shape}-{dtype}-{math}",
                           "implicit_gemm_tc", {**BWD_SHAPES[shape], "dtype": dtype,
                                                "math": math, "direction": direction})
                      for shape in shapes]
    return cases


def tf32_near_up_cases() -> list[Case | None]:
    """1xTF32 on operands that show any one left unrounded."""
    # implicit_gemm_tc at 1xTF32 rounds its fragments as it reads them, or (NCHW vector A with
    # element-wise B) its landed copies in shared memory (ROUND_IN_PLACE): every tile path
    # (NCHW vector B, element-wise B from one tap, NHWC B) on operands where one left
    # unrounded shows.
    return [case(f"implicit_gemm_tc-{shape}-float32-tf32-near_up", "implicit_gemm_tc",
                 {**TC_EXTRA_SHAPES[shape], "dtype": "float32", "math": "tf32"},
                 inputs="tf32_near_up")
            for shape in ("tc_pw_vec", "tc_pw_strided", "tc_nhwc_geom")]
