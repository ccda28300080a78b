"""implicit_gemm_tc on the GPU: every configuration in every dtype and math mode against the
float64 reference and, where PyTorch with CUDA is installed, against torch's own convolution.

Skipped, with the reason, where CuPy or a GPU is missing (see conftest.py). Not yet run on a
GPU by the session that wrote it (none was lent): treat its first run as the kernel's first.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms.cuda.implicit_gemm_tc import ImplicitGemmTcCuda
from algorithms.reference import reference_conv, relative_error
from tests.cuda_shapes import SHAPES
from tests.precision import make_problem, nan_storage, to_float, to_storage, tolerance_for

pytestmark = pytest.mark.gpu

#: (dtype, math) pairs the kernel ships; tests/precision.py stands in for ConvProblem fields.
MODES = (("float32", "fp32"), ("float32", "tf32"), ("float16", "fp32"), ("bfloat16", "fp32"))
#: Odd sizes, strides, dilation, groups, several tiles, and two network layers.
GPU_SHAPES = ("odd", "odd_k130", "stride2", "dilation_stride", "groups4", "k_over_tile",
              "r50_res4_3x3", "r50_res2_1x1", "vgg_conv3_1")
ALGORITHM = ImplicitGemmTcCuda()


def _torch_conv(x: np.ndarray, w: np.ndarray, problem: Any) -> np.ndarray | None:
    """torch's float64 convolution of the same values, or None without torch + CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    out = torch.nn.functional.conv2d(
        torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda(), stride=problem.stride,
        padding=problem.pad, dilation=problem.dilation, groups=problem.groups)
    return np.asarray(out.cpu().numpy())


@pytest.mark.parametrize(("dtype", "math"), MODES)
@pytest.mark.parametrize("shape", GPU_SHAPES)
def test_every_config_matches_reference_and_torch(shape: str, dtype: str, math: str) -> None:
    import cupy

    problem = make_problem(**SHAPES[shape], dtype=dtype, math=math)
    support = ALGORITHM.supports(problem)
    assert support, support.reason
    rng = np.random.default_rng()
    x_host = to_storage(rng.standard_normal(problem.input_shape), dtype)
    w_host = to_storage(rng.standard_normal(problem.filter_shape), dtype)
    x64, w64 = to_float(x_host, dtype), to_float(w_host, dtype)
    ref = reference_conv(x64, w64, problem)
    torch_ref = _torch_conv(x64, w64, problem)
    if torch_ref is not None:  # the two references must agree before either judges us
        assert relative_error(torch_ref, ref) <= 1e-12
    limit = tolerance_for(dtype, math, ALGORITHM.name)
    x, w = cupy.asarray(x_host), cupy.asarray(w_host)
    failures = []
    for config in ALGORITHM.configs(problem):
        y = cupy.asarray(nan_storage(problem.output_shape, dtype))
        ALGORITHM.run(x, w, y, None, problem, config)
        out = to_float(cupy.asnumpy(y), dtype)
        err = relative_error(out, ref) if not np.isnan(out).any() else float("inf")
        if not err <= limit:
            failures.append(f"{config}: rel err {err:.3g} (limit {limit:g})")
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
        ALGORITHM.run(cupy.asarray(x_host), cupy.asarray(w_host), y, None, problem, "64x64")
        errors[math] = relative_error(cupy.asnumpy(y), reference_conv(x_host, w_host, problem))
    assert errors["fp32"] <= 1e-5 < errors["tf32"] <= 1e-3
