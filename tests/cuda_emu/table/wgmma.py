"""Emulated cases of implicit_gemm_wgmma, the sm_90a wgmma tensor-core kernel."""

from __future__ import annotations

from typing import Any

from algorithms.problem import DTYPES
from tests.cuda_emu.table.backward import BWD_DIRECTIONS
from tests.cuda_emu.table.case import Case, case
from tests.cuda_emu.table.tc import TC_EXTRA_SHAPES

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
WG_SHAPES: dict[tuple[str, str], tuple[str, ...]] = {
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
    "tc_pw_vec": TC_EXTRA_SHAPES["tc_pw_vec"],
    "tc_pw_pq_odd": TC_EXTRA_SHAPES["tc_pw_pq_odd"],
    "wg_pw_long": dict(n=1, c=264, h=3, w=4, k=24, r=1, s=1),
    "tc_pw_multi_block": TC_EXTRA_SHAPES["tc_pw_multi_block"],
    "tc_pw_strided": TC_EXTRA_SHAPES["tc_pw_strided"],
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
    "tc_deep": TC_EXTRA_SHAPES["tc_deep"],
    **{shape: _WG_PARTS[shape] for shape in ("wg_parts_long", "wg_parts_pw_s2")},
}


def nhwc_cases() -> list[Case | None]:
    """WG_SHAPES per (dtype, math), misaligned, and on TF32 round-up inputs."""
    cases: list[Case | None] = []
    for (dtype, math), shapes in WG_SHAPES.items():
        cases += [case(f"implicit_gemm_wgmma-{shape}-{dtype}-{math}", "implicit_gemm_wgmma",
                       {**TC_EXTRA_SHAPES[shape], "dtype": dtype, "math": math})
                  for shape in shapes]
        item = DTYPES[dtype]
        cases.append(case(f"implicit_gemm_wgmma-tc_nhwc_geom-{dtype}-{math}-offset",
                          "implicit_gemm_wgmma", {**TC_EXTRA_SHAPES["tc_nhwc_geom"],
                                                  "dtype": dtype, "math": math},
                          [item, item, item]))
    # Operands that TF32 rounding and truncation tell apart (cases.py): the NHWC copies must
    # round (the mma.sync kernel rounds in registers; tests/test_cuda_emu_warp.py pins that).
    cases.append(case("implicit_gemm_wgmma-tc_deep-float32-tf32-round_up",
                      "implicit_gemm_wgmma", {**TC_EXTRA_SHAPES["tc_deep"], "dtype": "float32",
                                              "math": "tf32"}, inputs="tf32_round_up"))
    return cases


def backward_cases() -> list[Case | None]:
    """Both backward directions on _WG_BWD."""
    return [case(f"implicit_gemm_wgmma-{direction}-wg_bwd-{dtype}", "implicit_gemm_wgmma",
                 {**_WG_BWD, "dtype": dtype, "direction": direction})
            for direction in BWD_DIRECTIONS for dtype in _WG_BWD_DTYPES]


def nchw_cases() -> list[Case | None]:
    """The NCHW configurations, with taps, misaligned and backward."""
    cases: list[Case | None] = []
    for math in ("fp32", "tf32"):
        cases += [case(f"implicit_gemm_wgmma-{shape}-float32-{math}", "implicit_gemm_wgmma",
                       {**kw, "dtype": "float32", "math": math})
                  for shape, kw in (_WG_NCHW_SHAPES | _WG_NCHW_TAPS).items()]
        cases.append(case(f"implicit_gemm_wgmma-tc_pw_vec-float32-{math}-offset",
                          "implicit_gemm_wgmma", {**TC_EXTRA_SHAPES["tc_pw_vec"],
                                                  "dtype": "float32", "math": math}, [4, 4, 4]))
        cases += [case(f"implicit_gemm_wgmma-{direction}-wg_pw_bwd-float32-{math}",
                       "implicit_gemm_wgmma",
                       {**_WG_PW_BWD, "dtype": "float32", "math": math, "direction": direction})
                  for direction in BWD_DIRECTIONS]
    return cases


def first_layer_cases() -> list[Case | None]:
    """_WG_FIRST_LAYERS in every (dtype, math) of WG_SHAPES."""
    return [case(f"implicit_gemm_wgmma-{shape}-{dtype}-{math}", "implicit_gemm_wgmma",
                 {**kw, "dtype": dtype, "math": math})
            for shape, kw in _WG_FIRST_LAYERS.items() for dtype, math in WG_SHAPES]


def tf32_near_up_cases() -> list[Case | None]:
    """The NCHW tiles on operands that show W left unrounded."""
    # The NCHW tiles round W in shared memory on a 1x1 layer, and with taps in w's transpose.
    return [case(f"implicit_gemm_wgmma-{shape}-float32-tf32-near_up", "implicit_gemm_wgmma",
                 {**kw, "dtype": "float32", "math": "tf32"}, inputs="tf32_near_up")
            for shape, kw in (("tc_pw_vec", TC_EXTRA_SHAPES["tc_pw_vec"]),
                              ("wg_taps_3x3", _WG_NCHW_TAPS["wg_taps_3x3"]))]


def parts_cases() -> list[Case | None]:
    """3xFP16 parts: _WG_PARTS (one with NaN in x), _WG_SCALED past FP16's range."""
    cases: list[Case | None] = []
    cases += [case(f"implicit_gemm_wgmma-{shape}-float32-fp32{'-nan_x' if nan else ''}",
                   "implicit_gemm_wgmma", {**kw, "dtype": "float32", "math": "fp32"},
                   inputs="nan_x" if nan else None)
              for shape, kw in _WG_PARTS.items() for nan in (False, shape.endswith("s2"))]
    cases += [case(f"implicit_gemm_wgmma-{shape}-float32-fp32-{inputs}", "implicit_gemm_wgmma",
                   {**kw, "dtype": "float32", "math": "fp32"}, inputs=inputs)
              for shape, kw in _WG_SCALED.items() for inputs in ("huge", "tiny", "outlier")]
    return cases
