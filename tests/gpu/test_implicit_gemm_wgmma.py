"""implicit_gemm_wgmma on a compute-capability-9.0 GPU: every configuration in every dtype
and math mode against the float64 reference and, where PyTorch with CUDA is installed,
against torch's own convolution.

Skipped, with the reason, where CuPy or a GPU is missing (see conftest.py) or where the GPU
is not Hopper (the kernel is built for sm_90a only). Not yet run on a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.cuda.implicit_gemm_wgmma import ImplicitGemmWgmmaCuda
from algorithms.reference import reference_conv, relative_error
from tests.cuda_shapes import SHAPES
from tests.gpu.conftest import config_failures
from tests.precision import make_problem

pytestmark = pytest.mark.gpu

#: (dtype, math) pairs the kernel ships: 16-bit, TF32 and 3xTF32.
MODES = (("float16", "fp32"), ("bfloat16", "fp32"), ("float32", "tf32"), ("float32", "fp32"))
#: C/groups whole 16-byte vectors in every dtype: stride, dilation, groups, a non-square
#: filter, channel and pixel tiles with remainders, and network layers.
GPU_SHAPES = ("stride2", "dilation_pair", "groups4", "non_square_filter", "many_channels",
              "r50_res4_3x3", "r50_res3_1x1_s2", "vgg_conv3_1")
ALGORITHM = ImplicitGemmWgmmaCuda()


@pytest.fixture(autouse=True)
def _hopper() -> None:
    import cupy

    capability = str(cupy.cuda.Device().compute_capability)
    if capability != "90":
        pytest.skip(f"implicit_gemm_wgmma needs compute capability 9.0, not {capability}")


@pytest.mark.parametrize(("dtype", "math"), MODES)
@pytest.mark.parametrize("shape", GPU_SHAPES)
def test_every_config_matches_reference_and_torch(shape: str, dtype: str, math: str) -> None:
    problem = make_problem(**SHAPES[shape], dtype=dtype, math=math)
    support = ALGORITHM.supports(problem)
    assert support, support.reason
    failures = config_failures(ALGORITHM, problem)
    assert not failures, f"{shape} {dtype} {math}:\n" + "\n".join(failures)


def test_tf32_is_less_accurate_than_3xtf32() -> None:
    """1xTF32 must not silently run the 3xTF32 path (or the reverse)."""
    import cupy

    errors = {}
    for math in ("fp32", "tf32"):
        problem = make_problem(**SHAPES["r50_res4_3x3"], math=math)
        rng = np.random.default_rng(0)
        x_host = rng.standard_normal(problem.input_shape).astype(np.float32)
        w_host = rng.standard_normal(problem.filter_shape).astype(np.float32)
        y = cupy.full(problem.output_shape, np.nan, np.float32)
        workspace = cupy.empty(ALGORITHM.workspace_bytes(problem, "64x128x32-s4"), cupy.uint8)
        ALGORITHM.run(cupy.asarray(x_host), cupy.asarray(w_host), y, workspace, problem,
                      "64x128x32-s4")
        errors[math] = relative_error(cupy.asnumpy(y), reference_conv(x_host, w_host, problem))
    assert errors["fp32"] <= 1e-5 < errors["tf32"] <= 1e-3
