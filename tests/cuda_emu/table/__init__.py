"""The cases tests/test_cuda_emulated.py runs in the emulator, one module per family.

`CASES` maps each case's id to the case, in the order `all_cases` takes the families'
parts in (the order of the test ids).
"""

from __future__ import annotations

from tests.cuda_emu.table import backward, generic, tc, wgmma
from tests.cuda_emu.table.backward import BWD_SHAPES, TF32_DIRECTIONS
from tests.cuda_emu.table.case import Case, case
from tests.cuda_emu.table.tc import TC_EXTRA_SHAPES
from tests.cuda_shapes import SHAPES


def _nan_x_cases() -> list[Case | None]:
    """Both tensor-core kernels with one NaN in x, at both maths; wgmma with one inf."""
    # NaN passes through the TF32 roundings (issue 10: 3xTF32's big part without cvt.rna's
    # test) to exactly the outputs the reference has NaN at.
    return [case(f"{algorithm}-{shape}-float32-{math}-nan_x", algorithm,
                 {**TC_EXTRA_SHAPES[shape], "dtype": "float32", "math": math},
                 inputs="nan_x")
            for algorithm, shape in (("implicit_gemm_tc", "tc_pw_vec"),
                                     ("implicit_gemm_tc", "tc_nhwc_geom"),
                                     ("implicit_gemm_tc", "tc_deep"),
                                     ("implicit_gemm_wgmma", "tc_deep"),
                                     ("implicit_gemm_wgmma", "tc_pw_vec"))
            for math in ("fp32", "tf32")] + [
        # One +inf among values past FP16's range: 3xFP16's scale comes from the finite
        # values, and the inf reaches the outputs the reference has non-finite alone.
        case(f"implicit_gemm_wgmma-{shape}-float32-fp32-inf_x", "implicit_gemm_wgmma",
             {**TC_EXTRA_SHAPES[shape], "dtype": "float32", "math": "fp32"}, inputs="inf_x")
        for shape in ("tc_deep", "tc_pw_vec")]


def _tf32_cublas_cases() -> list[Case | None]:
    """im2col_gemm and winograd handing cuBLAS TF32-rounded operands."""
    cases: list[Case | None] = []
    # cuBLAS at math "tf32" (fake_gemm truncates TF32 operands, as the tensor cores do with
    # unrounded ones): im2col_gemm in every direction must hand it operands its kernels
    # rounded (held to 2e-4 on inputs where one truncated operand costs 9.5e-4), and
    # winograd's F(2x2) (F(4x4) stays FP32) likewise (on inputs only rounding keeps within
    # the tolerance: its transforms leave U and V off the TF32 grid).
    cases += [case(f"im2col_gemm-{shape}-{direction}-tf32-near_up", "im2col_gemm",
                   {**kw, "dtype": "float32", "math": "tf32", "direction": direction},
                   inputs="tf32_near_up")
              for direction in TF32_DIRECTIONS
              for shape, kw in (("stride_pair", SHAPES["stride_pair"]),
                                ("pointwise_groups2", BWD_SHAPES["pointwise_groups2"]))]
    cases.append(case("winograd-odd-tf32-round_up", "winograd",
                      {**SHAPES["odd"], "dtype": "float32", "math": "tf32"},
                      inputs="tf32_round_up"))
    return cases


def all_cases() -> list[Case]:
    """Every supported case, in the order the test runs them."""
    cases = [*generic.generic_cases(), *generic.vec_out_cases(), *tc.forward_cases(),
             *generic.fft_cases(), *generic.winograd_cases(), *generic.depthwise_cases(),
             *backward.backward_cases(), *tc.backward_cases(), *wgmma.nhwc_cases(),
             *tc.tf32_near_up_cases(), *_nan_x_cases(), *wgmma.backward_cases(),
             *wgmma.nchw_cases(), *wgmma.first_layer_cases(), *wgmma.tf32_near_up_cases(),
             *wgmma.parts_cases(), *_tf32_cublas_cases()]
    return [c for c in cases if c is not None]


CASES: dict[str, Case] = {c["id"]: c for c in all_cases()}
