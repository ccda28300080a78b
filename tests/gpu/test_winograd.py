"""winograd on the GPU: every configuration in every CUDA dtype against the float64 reference,
the cuBLAS batch over the transform points, and a GPU tune that measures both configurations.

Skipped, with the reason, where CuPy or a GPU is missing (see conftest.py). First run on an
H100 on 2026-11-23 (benchmarks/NOTES-gpu.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms import winograd
from algorithms.cuda.winograd import WinogradCuda
from algorithms.problem import ConvProblem
from algorithms.reference import reference_conv, relative_error, tolerance
from tests.cuda_shapes import SHAPES
from tests.gpu.conftest import math_errors

pytestmark = pytest.mark.gpu

ALGORITHM = WinogradCuda()
#: The 3x3 stride-1 shapes: odd sizes, padding wider than the filter, one pixel, several
#: hundred channels, 370 x 370 (many tiles), and network layers.
GPU_SHAPES = ("odd", "odd_k130", "pad_gt_filter", "single_pixel", "many_channels",
              "many_frequencies", "r50_res2_3x3", "r50_res4_3x3", "r50_res5_3x3",
              "vgg_conv1_1", "vgg_conv3_1", "vgg_conv5_1")



@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("shape", GPU_SHAPES)
def test_every_config_matches_reference(runtime: Any, shape: str, dtype: str) -> None:
    import cupy

    problem = ConvProblem(**SHAPES[shape], dtype=dtype)
    assert ALGORITHM.supports(problem), ALGORITHM.supports(problem).reason
    rng = np.random.default_rng()
    x_host = rng.standard_normal(problem.input_shape).astype(dtype)
    w_host = rng.standard_normal(problem.filter_shape).astype(dtype)
    ref = reference_conv(x_host, w_host, problem)
    x, w = cupy.asarray(x_host), cupy.asarray(w_host)
    errors = {}
    for config in ALGORITHM.configs(problem):
        workspace = runtime.workspace(ALGORITHM.workspace_bytes(problem, config))
        workspace.fill(0xFF)  # NaN as float: scratch read before written shows
        y = cupy.full(problem.output_shape, np.nan, dtype=dtype)
        ALGORITHM.run(x, w, y, workspace, problem, config)
        out = runtime.to_numpy(y)
        assert not np.isnan(out).any(), f"{config}: unwritten outputs"
        errors[config] = relative_error(out, ref)
    # Both tile sides are expected to pass fp32's tolerance (they do on the CPU up to
    # c = 2048); a failure here is a finding to record, not a tolerance to widen.
    assert all(e <= tolerance(dtype, "winograd") for e in errors.values()), errors


def test_tf32_reaches_f2x2_only() -> None:
    """At math "tf32" F(2x2)'s GEMM may read TF32 operands (within TF32's error; whether
    cuBLAS takes its tensor cores for the shape is its choice, so not asserted), while
    F(4x4) keeps FP32 accuracy: TF32 would put it at about 3e-3."""
    f2x2, f4x4 = math_errors(ALGORITHM, "f2x2"), math_errors(ALGORITHM, "f4x4")
    assert f2x2["fp32"] <= tolerance("float32", "winograd") and f2x2["tf32"] <= 1e-3, f2x2
    assert max(f4x4.values()) <= tolerance("float32", "winograd"), f4x4


def test_a_gpu_tune_measures_both_configs(db_url: str) -> None:
    from sqlalchemy import select

    from db.engine import open_store
    from db.models import Measurement
    from tuner import find_algorithms

    problem = ConvProblem(**SHAPES["r50_res4_3x3"])
    found = {r.algorithm: r for r in find_algorithms(problem, device="cuda:0", db=db_url)}
    assert found["winograd"].usable, found["winograd"].error
    with open_store(db_url).session() as session:
        configs = set(session.execute(select(Measurement.config)
                                      .where(Measurement.algorithm == "winograd")).scalars())
    assert configs == set(winograd.CONFIGS)
