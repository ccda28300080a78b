"""depthwise on the GPU: every configuration in every dtype against the float64 reference and,
where PyTorch with CUDA is installed, against torch's own convolution.

Skipped, with the reason, where CuPy or a GPU is missing (see conftest.py). Not yet run on a
GPU by the session that wrote it (none was lent): treat its first run as the kernel's first.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms.cuda.depthwise import CONFIGS, DepthwiseCuda
from algorithms.problem import DTYPES
from algorithms.reference import reference_conv, relative_error
from tests.cuda_shapes import DEPTHWISE_SHAPES, SHAPES
from tests.gpu.test_implicit_gemm_tc import _torch_conv
from tests.precision import make_problem, nan_storage, to_float, to_storage, tolerance_for

pytestmark = pytest.mark.gpu

#: The depthwise shapes of both tables, and two MobileNet-v2 depthwise layers at batch 2.
GPU_SHAPES: dict[str, dict[str, Any]] = {
    **{name: SHAPES[name] for name in ("depthwise", "depthwise_s2", "depthwise_multiplier")},
    **DEPTHWISE_SHAPES,
    "mbv2_block2_s2": dict(n=2, c=96, h=112, w=112, k=96, r=3, s=3, pad=1, stride=2,
                           groups=96),
    "mbv2_block7": dict(n=2, c=960, h=7, w=7, k=960, r=3, s=3, pad=1, groups=960),
}
ALGORITHM = DepthwiseCuda()


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", list(GPU_SHAPES))
def test_every_config_matches_reference_and_torch(shape: str, dtype: str) -> None:
    import cupy

    problem = make_problem(**GPU_SHAPES[shape], dtype=dtype)
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
    limit = tolerance_for(dtype, "fp32", ALGORITHM.name)
    x, w = cupy.asarray(x_host), cupy.asarray(w_host)
    failures = []
    configs = ALGORITHM.configs(problem)
    # Every tile fits these shapes: all the instances for the filter size run.
    assert set(configs) == {name for name, t in CONFIGS.items() if t.fits(problem)}
    for config in configs:
        y = cupy.asarray(nan_storage(problem.output_shape, dtype))
        ALGORITHM.run(x, w, y, None, problem, config)
        out = to_float(cupy.asnumpy(y), dtype)
        err = relative_error(out, ref) if not np.isnan(out).any() else float("inf")
        if not err <= limit:
            failures.append(f"{config}: rel err {err:.3g} (limit {limit:g})")
    assert not failures, f"{shape} {dtype}:\n" + "\n".join(failures)
