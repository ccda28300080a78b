"""The CUDA backward directions, every configuration, against the float64 reference and torch.

Mirrors test_cuda_algorithms.py for backward_data (dx from dy, w) and backward_filter (dw from
x, dy): the output is NaN-filled and the workspace 0xFF-filled before each run. Where torch is
installed, the float64 reference itself is checked against torch.nn.grad.conv2d_input /
conv2d_weight on the same operands, and each result against torch's gradient. Skipped, with
the reason, where CuPy or a GPU is missing (see conftest.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms.base import AlgorithmBase
from algorithms.problem import DTYPES, ConvProblem
from algorithms.reference import relative_error, tolerance
from algorithms.registry import algorithms_for
from tests.cuda_shapes import ALIGN_SHAPES, NETWORK_SHAPES, OTHER_DTYPE_SHAPES, SHAPES
from tests.gpu.conftest import host_case

pytestmark = pytest.mark.gpu

#: The CUDA algorithms that compute the backward directions.
BACKWARD: dict[str, AlgorithmBase] = {
    a.name: a for a in algorithms_for("cuda")
    if isinstance(a, AlgorithmBase) and "backward_data" in a.directions
}
DIRECTIONS = ("backward_data", "backward_filter")

#: Shapes the issue names for the backward passes, beyond SHAPES: stride holes (taps fewer
#: than the stride), and a deep batch where backward_filter's sum over n shows its error.
EXTRA_SHAPES: dict[str, dict[str, Any]] = {
    "holes_1x1_s2": dict(n=3, c=4, h=9, w=8, k=6, r=1, s=1, stride=2),
    "holes_s3_pad": dict(n=2, c=3, h=10, w=11, k=4, r=2, s=2, pad=1, stride=3),
    "dil2_groups2": dict(n=2, c=6, h=11, w=9, k=4, r=3, s=3, pad=2, dilation=2, groups=2),
    "deep_batch_256": dict(n=256, c=8, h=14, w=14, k=16, r=3, s=3, pad=1),
}
ALL_SHAPES = {k: v for k, v in SHAPES.items() if k != "many_frequencies"} | EXTRA_SHAPES




def _torch_gradient(a: np.ndarray, b: np.ndarray, problem: ConvProblem) -> np.ndarray | None:
    """torch.nn.grad's float64 result of the direction on the CPU, or None without torch."""
    try:
        import torch
        from torch.nn import grad as torch_grad
    except ImportError:
        return None
    a64, b64 = (torch.from_numpy(np.asarray(v, np.float64)) for v in (a, b))
    geometry = dict(stride=problem.stride, padding=problem.pad, dilation=problem.dilation,
                    groups=problem.groups)
    if problem.direction == "backward_data":
        out = torch_grad.conv2d_input(problem.input_shape, b64, a64, **geometry)
    else:
        out = torch_grad.conv2d_weight(a64, problem.filter_shape, b64, **geometry)
    return np.asarray(out.numpy())


def _cases() -> list[Any]:
    params = []
    for shape in ALL_SHAPES:
        dtypes = ["float32"] + (["float16", "float64"]
                                if shape in (*OTHER_DTYPE_SHAPES, *EXTRA_SHAPES) else [])
        for dtype in dtypes:
            for direction in DIRECTIONS:
                for name in BACKWARD:
                    params.append(pytest.param(name, direction, shape, dtype,
                                               id=f"{name}-{direction}-{shape}-{dtype}"))
    return params


def test_every_gemm_and_fft_algorithm_computes_both_backward_directions() -> None:
    assert set(BACKWARD) == {"direct", "im2col_gemm", "implicit_gemm", "implicit_gemm_tc",
                             "implicit_gemm_wgmma", "fft"}
    for algorithm in BACKWARD.values():
        assert set(DIRECTIONS) <= set(algorithm.directions)


@pytest.mark.parametrize(("name", "direction", "shape", "dtype"), _cases())
def test_every_config_matches_reference_and_torch(
    runtime: Any, name: str, direction: str, shape: str, dtype: str
) -> None:
    import cupy

    problem = ConvProblem(**ALL_SHAPES[shape], dtype=dtype, direction=direction)
    algorithm = BACKWARD[name]
    support = algorithm.supports(problem)
    if not support:
        pytest.skip(f"{name} does not support {problem.describe()}: {support.reason}")
    a_host, b_host, ref = host_case(problem)
    if shape not in NETWORK_SHAPES:  # torch's CPU float64 gradients are slow on those
        torch_ref = _torch_gradient(a_host, b_host, problem)
        if torch_ref is not None:
            assert relative_error(ref, torch_ref) <= 1e-12, "reference disagrees with torch"
            ref = torch_ref
    a, b = cupy.asarray(a_host), cupy.asarray(b_host)
    out = runtime.empty(problem.operand_shapes[2], dtype)
    failures = []
    for config in algorithm.configs(problem):
        workspace = runtime.workspace(algorithm.workspace_bytes(problem, config))
        if workspace is not None:
            workspace.fill(0xFF)
        out.fill(np.nan)
        algorithm.run(a, b, out, workspace, problem, config)
        runtime.synchronize()
        host = runtime.to_numpy(out)
        unwritten = int(np.isnan(host).sum())
        err = relative_error(host, ref) if not unwritten else float("inf")
        if unwritten or not err <= tolerance(dtype, name):
            failures.append(f"{config}: rel err {err:.3g}, {unwritten} NaN of {host.size}")
    assert not failures, f"{name} on {problem.describe()}:\n" + "\n".join(failures)


def _at_offset(host: np.ndarray, offset: int) -> Any:
    """A device copy of `host` starting `offset` bytes past a 256-byte boundary."""
    import cupy

    raw = cupy.empty(host.nbytes + 256, dtype=cupy.uint8)
    arr = cupy.ndarray(host.shape, dtype=host.dtype, memptr=raw.data + offset)
    arr.set(host)
    return arr


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != "bfloat16"])
@pytest.mark.parametrize("shape", list(ALIGN_SHAPES))
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("name", list(BACKWARD))
def test_element_aligned_buffers(runtime: Any, name: str, direction: str, shape: str,
                                 dtype: str) -> None:
    """Operands and output one element past a 256-byte boundary: right answers."""
    problem = ConvProblem(**ALIGN_SHAPES[shape], dtype=dtype, direction=direction)
    algorithm = BACKWARD[name]
    if not algorithm.supports(problem):
        pytest.skip(algorithm.supports(problem).reason)
    a_host, b_host, ref = host_case(problem)
    item = DTYPES[dtype]
    a, b = _at_offset(a_host, item), _at_offset(b_host, item)
    for config in algorithm.configs(problem):
        out = _at_offset(np.full(problem.operand_shapes[2], np.nan, dtype), item)
        workspace = runtime.workspace(algorithm.workspace_bytes(problem, config))
        algorithm.run(a, b, out, workspace, problem, config)
        host = runtime.to_numpy(out)
        assert not np.isnan(host).any(), f"{config}: unwritten outputs"
        assert relative_error(host, ref) <= tolerance(dtype, name), config


@pytest.mark.parametrize("name", list(BACKWARD))
def test_backward_filter_within_tolerance_at_a_large_batch(runtime: Any, name: str) -> None:
    """dw sums n * P * Q products (131072 at n = 512): float32 stays within its tolerance."""
    import cupy

    errors = []
    for n in (2, 512):
        problem = ConvProblem(n=n, c=4, h=16, w=16, k=8, r=3, s=3, pad=1,
                              direction="backward_filter")
        algorithm = BACKWARD[name]
        # Regression (H200, 2026-11-25): the test ran implicit_gemm_wgmma at n = 2, which it
        # refuses (its rearranged problem has C/groups = n, not whole 16-byte vectors), and
        # its 16-byte reads then faulted on a misaligned address.
        if not algorithm.supports(problem):
            continue
        a_host, b_host, ref = host_case(problem)
        a, b = cupy.asarray(a_host), cupy.asarray(b_host)
        worst = 0.0
        for config in algorithm.configs(problem):
            out = runtime.empty(problem.filter_shape, "float32")
            workspace = runtime.workspace(algorithm.workspace_bytes(problem, config))
            algorithm.run(a, b, out, workspace, problem, config)
            runtime.synchronize()
            worst = max(worst, relative_error(runtime.to_numpy(out), ref))
        errors.append(worst)
    assert max(errors) <= tolerance("float32", name), errors
