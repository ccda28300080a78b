"""implicit_gemm_tc on the GPU: every configuration in every dtype and math mode against the
float64 reference and, where PyTorch with CUDA is installed, against torch's own convolution.

Skipped, with the reason, where CuPy or a GPU is missing (see conftest.py). First run on an
H100 on 2026-11-23 (benchmarks/NOTES-gpu.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms.cuda.implicit_gemm_tc import ImplicitGemmTcCuda, vector_elements, vector_widths
from tests.gpu.conftest import assert_every_config_passes, assert_split_k_repeats, math_errors
from tests.precision import make_problem, nan_storage, to_float, to_storage

pytestmark = pytest.mark.gpu

#: (dtype, math) pairs the kernel ships; tests/precision.py stands in for ConvProblem fields.
MODES = (("float32", "fp32"), ("float32", "tf32"), ("float16", "fp32"), ("bfloat16", "fp32"))
#: Odd sizes, strides, dilation, groups, several tiles, and network layers (res3's strided
#: 1x1: its "-nhwc" copies gather the pixels it reads).
GPU_SHAPES = ("odd", "odd_k130", "stride2", "dilation_stride", "groups4", "k_over_tile",
              "r50_res4_3x3", "r50_res2_1x1", "r50_res3_1x1_s2", "vgg_conv3_1")
ALGORITHM = ImplicitGemmTcCuda()


@pytest.mark.parametrize(("dtype", "math"), MODES)
@pytest.mark.parametrize("shape", GPU_SHAPES)
def test_every_config_matches_reference_and_torch(shape: str, dtype: str, math: str) -> None:
    assert_every_config_passes(ALGORITHM, shape, dtype, math)


def test_tf32_is_less_accurate_than_3xtf32() -> None:
    """1xTF32 must not silently run the 3xTF32 path (or the reverse)."""
    errors = math_errors(ALGORITHM, "64x64")
    assert errors["fp32"] <= 1e-5 < errors["tf32"] <= 1e-3


@pytest.mark.parametrize(("dtype", "math"), MODES)
def test_vector_fills_give_the_element_wise_bits(dtype: str, math: str) -> None:
    """Only the tile fills differ between vector A and B (x, w 16-byte aligned), vector A
    only (x one element off a 16-byte boundary) and element-wise copies (w off as well):
    the outputs must be identical, bit for bit."""
    import cupy

    problem = make_problem(n=2, c=48, h=8, w=8, k=72, r=1, s=1, dtype=dtype, math=math)
    vec = vector_elements(dtype)
    assert vector_widths(problem) == (vec, vec)
    rng = np.random.default_rng()
    hosts = [to_storage(rng.standard_normal(shape), dtype)
             for shape in (problem.input_shape, problem.filter_shape)]

    def placed(host: np.ndarray, offset: int) -> Any:
        raw = cupy.empty(host.nbytes + 256, cupy.uint8)
        arr = cupy.ndarray(host.shape, host.dtype, raw.data + offset)
        arr.set(host)
        return arr

    item = hosts[0].itemsize
    placements = [(0, 0), (item, 0), (item, item)]  # byte offsets of (x, w)
    for config in ALGORITHM.configs(problem):
        outs = []
        for offsets in placements:
            x, w = (placed(h, off) for h, off in zip(hosts, offsets, strict=True))
            y = cupy.asarray(nan_storage(problem.output_shape, dtype))
            ALGORITHM.run(x, w, y, None, problem, config)
            outs.append(cupy.asnumpy(y))
        assert not np.isnan(to_float(outs[0], dtype)).any(), config
        assert all(o.tobytes() == outs[0].tobytes() for o in outs[1:]), config



@pytest.mark.parametrize(("dtype", "math"), MODES)
def test_split_k_sums_in_the_kernel_run_after_run(dtype: str, math: str) -> None:
    assert_split_k_repeats(ALGORITHM, dtype, math)
