"""depthwise on the GPU: every configuration in every dtype against the float64 reference and,
where PyTorch with CUDA is installed, against torch's own convolution.

Skipped, with the reason, where CuPy or a GPU is missing (see conftest.py). First run on an
H100 on 2026-11-23 (benchmarks/NOTES-gpu.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from algorithms.cuda.depthwise import CONFIGS, FLAT_CONFIGS, DepthwiseCuda
from algorithms.problem import DTYPES
from tests.cuda_shapes import DEPTHWISE_SHAPES, SHAPES
from tests.gpu.conftest import config_failures
from tests.precision import make_problem

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
    problem = make_problem(**GPU_SHAPES[shape], dtype=dtype)
    support = ALGORITHM.supports(problem)
    assert support, support.reason
    # Every tile fits these shapes: all the instances for the filter size (and, for the
    # flat ones, the width stride) run.
    assert set(ALGORITHM.configs(problem)) == (
        {name for name, t in CONFIGS.items() if t.fits(problem)}
        | {name for name, f in FLAT_CONFIGS.items() if f.fits(problem)})
    failures = config_failures(ALGORITHM, problem)
    assert not failures, f"{shape} {dtype}:\n" + "\n".join(failures)
