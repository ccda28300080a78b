"""The four CUDA algorithms, every configuration, against the float64 reference on the GPU.

Before each run y is filled with NaN (an unwritten element fails the check) and the
workspace with 0xFF bytes (NaN as float, so reading scratch before writing it shows).
Skipped, with the reason, where CuPy or a GPU is missing (see conftest.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms.base import Algorithm
from algorithms.problem import ConvProblem
from algorithms.reference import reference_conv, relative_error, tolerance
from algorithms.registry import ALGORITHM_NAMES, algorithms_for
from tuner.runtime import TimingPolicy

pytestmark = pytest.mark.gpu

#: id -> ConvProblem keyword arguments (dtype added per test).
SHAPES: dict[str, dict[str, Any]] = {
    # ResNet-50 layers at batch 2 (one per distinct geometry).
    "r50_conv1": dict(n=2, c=3, h=224, w=224, k=64, r=7, s=7, pad=3, stride=2),
    "r50_res2_3x3": dict(n=2, c=64, h=56, w=56, k=64, r=3, s=3, pad=1),
    "r50_res2_1x1": dict(n=2, c=64, h=56, w=56, k=256, r=1, s=1),
    "r50_res3_1x1_s2": dict(n=2, c=256, h=56, w=56, k=128, r=1, s=1, stride=2),
    "r50_res4_3x3": dict(n=2, c=256, h=14, w=14, k=256, r=3, s=3, pad=1),
    "r50_res5_3x3": dict(n=2, c=512, h=7, w=7, k=512, r=3, s=3, pad=1),
    "r50_res5_1x1a": dict(n=2, c=2048, h=7, w=7, k=512, r=1, s=1),
    # VGG-16 layers at batch 1.
    "vgg_conv1_1": dict(n=1, c=3, h=224, w=224, k=64, r=3, s=3, pad=1),
    "vgg_conv3_1": dict(n=1, c=128, h=56, w=56, k=256, r=3, s=3, pad=1),
    "vgg_conv5_1": dict(n=1, c=512, h=14, w=14, k=512, r=3, s=3, pad=1),
    # Odd sizes: nothing divides a tile.
    "odd": dict(n=3, c=5, h=17, w=13, k=7, r=3, s=3, pad=1),
    "odd_k130": dict(n=1, c=33, h=9, w=11, k=130, r=3, s=3, pad=1),
    "batch_odd_pixels": dict(n=5, c=7, h=7, w=7, k=9, r=1, s=1),
    "non_square_filter": dict(n=2, c=16, h=17, w=17, k=24, r=1, s=7, pad=(0, 3)),
    "five_by_five": dict(n=2, c=12, h=27, w=27, k=20, r=5, s=5, pad=2),
    "single_pixel": dict(n=2, c=3, h=1, w=1, k=4, r=3, s=3, pad=1),
    "filter_equals_padded": dict(n=1, c=4, h=4, w=3, k=3, r=6, s=7, pad=(1, 2)),
    # Stride, padding and dilation, symmetric and not.
    "stride2": dict(n=2, c=8, h=33, w=31, k=16, r=3, s=3, pad=1, stride=2),
    "stride_pair": dict(n=2, c=6, h=20, w=21, k=10, r=3, s=3, pad=(1, 2), stride=(2, 1)),
    "pad_gt_filter": dict(n=2, c=3, h=4, w=5, k=2, r=3, s=3, pad=4),
    "dilation2": dict(n=2, c=16, h=23, w=19, k=24, r=3, s=3, pad=2, dilation=2),
    "dilation_pair": dict(n=1, c=8, h=30, w=30, k=8, r=3, s=3, pad=(2, 3), dilation=(2, 3)),
    "dilation_stride": dict(n=2, c=4, h=24, w=22, k=6, r=2, s=3, pad=1, stride=2, dilation=3),
    # Groups and depthwise.
    "groups4": dict(n=2, c=32, h=14, w=14, k=64, r=3, s=3, pad=1, groups=4),
    "groups_strided": dict(n=1, c=8, h=9, w=9, k=12, r=3, s=2, pad=(1, 2), stride=2, groups=4),
    "depthwise": dict(n=2, c=32, h=28, w=28, k=32, r=3, s=3, pad=1, groups=32),
    "depthwise_s2": dict(n=2, c=48, h=15, w=15, k=48, r=3, s=3, pad=1, stride=2, groups=48),
    "depthwise_multiplier": dict(n=1, c=8, h=12, w=12, k=16, r=5, s=5, pad=2, groups=8),
}

#: Shapes also checked in float16 and float64 (small enough for every algorithm).
OTHER_DTYPE_SHAPES = ("odd", "stride_pair", "dilation_stride", "groups4", "depthwise",
                      "r50_res5_3x3", "batch_odd_pixels")

ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in algorithms_for("cuda")}

_inputs: dict[ConvProblem, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


@pytest.fixture(scope="module")
def runtime() -> Any:
    """The first GPU."""
    from tuner.runtimes.cuda import CudaRuntime

    return CudaRuntime(0)


def _host_case(problem: ConvProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fresh random x, w (in the problem dtype) and their float64 reference, once per problem."""
    if problem not in _inputs:
        rng = np.random.default_rng()
        x = rng.standard_normal(problem.input_shape).astype(problem.dtype)
        w = rng.standard_normal(problem.filter_shape).astype(problem.dtype)
        _inputs[problem] = (x, w, reference_conv(x, w, problem))
    return _inputs[problem]


def _cases() -> list[Any]:
    params = []
    for shape in SHAPES:
        dtypes = ["float32"] + (["float16", "float64"] if shape in OTHER_DTYPE_SHAPES else [])
        for dtype in dtypes:
            for name in ALGORITHM_NAMES:
                params.append(pytest.param(name, shape, dtype, id=f"{name}-{shape}-{dtype}"))
    return params


def test_all_four_are_registered() -> None:
    assert set(ALGORITHMS) == set(ALGORITHM_NAMES)


@pytest.mark.parametrize(("name", "shape", "dtype"), _cases())
def test_every_config_matches_reference(runtime: Any, name: str, shape: str, dtype: str) -> None:
    import cupy

    problem = ConvProblem(**SHAPES[shape], dtype=dtype)
    algorithm = ALGORITHMS[name]
    support = algorithm.supports(problem)
    if not support:
        pytest.skip(f"{name} does not support {problem.describe()}: {support.reason}")
    configs = algorithm.configs(problem)
    assert configs, "a supported problem must have at least one config"
    x_host, w_host, ref = _host_case(problem)
    x, w = cupy.asarray(x_host), cupy.asarray(w_host)
    y = runtime.empty(problem.output_shape, dtype)
    failures = []
    for config in configs:
        nbytes = algorithm.workspace_bytes(problem, config)
        workspace = runtime.workspace(nbytes)
        if workspace is not None:
            workspace.fill(0xFF)
        y.fill(np.nan)
        algorithm.run(x, w, y, workspace, problem, config)
        runtime.synchronize()
        out = runtime.to_numpy(y)
        unwritten = int(np.isnan(out).sum())
        err = relative_error(out, ref) if not unwritten else float("inf")
        if unwritten or not err <= tolerance(dtype, name):
            failures.append(f"{config}: rel err {err:.3g}, {unwritten} NaN of {out.size}")
    assert not failures, f"{name} on {problem.describe()}:\n" + "\n".join(failures)


def test_run_only_enqueues_on_the_current_stream(runtime: Any) -> None:
    """Work issued inside a non-default stream completes only when that stream does."""
    import cupy

    problem = ConvProblem(**SHAPES["odd"])
    x_host, w_host, ref = _host_case(problem)
    stream = cupy.cuda.Stream(non_blocking=True)
    for algorithm in ALGORITHMS.values():
        config = algorithm.configs(problem)[0]
        with stream:
            x, w = cupy.asarray(x_host), cupy.asarray(w_host)
            y = cupy.full(problem.output_shape, np.nan, dtype=problem.dtype)
            workspace = runtime.workspace(algorithm.workspace_bytes(problem, config))
            algorithm.run(x, w, y, workspace, problem, config)
        stream.synchronize()
        assert relative_error(cupy.asnumpy(y), ref) <= tolerance("float32", algorithm.name)


def test_adopt_torch_tensor_without_copy(runtime: Any) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    t = torch.randn(2, 3, 5, 7, device="cuda:0")
    adopted = runtime.adopt(t)
    assert adopted is not None
    assert adopted.data.ptr == t.data_ptr()
    assert tuple(adopted.shape) == tuple(t.shape)
    t.add_(1.0)  # a view: the change shows through
    torch.cuda.synchronize()
    np.testing.assert_allclose(runtime.to_numpy(adopted), t.cpu().numpy())


def test_adopt_cupy_numpy(runtime: Any) -> None:
    import cupy

    a = cupy.arange(6, dtype=cupy.float32)
    assert runtime.adopt(a) is a
    assert runtime.adopt(np.zeros(3)) is None


def test_runtime_basics(runtime: Any) -> None:
    rng = np.random.default_rng()
    a = runtime.random((64, 64), "float16", rng)
    assert str(a.dtype) == "float16" and float(abs(a).sum()) > 0
    assert runtime.workspace(0) is None
    assert runtime.workspace(100).nbytes == 100
    fp = runtime.fingerprint()
    assert fp["kind"] == "cuda" and fp["units"] > 0 and fp["l2_bytes"] > 0
    assert fp["arch"].count(".") == 1
    assert runtime.memory_bytes() > 0
    b = runtime.random((256, 256), "float32", rng)
    timing = runtime.time(lambda: b @ b, TimingPolicy(warmup=1, budget_s=0.05, min_reps=3))
    assert len(timing.times_ms) >= 3 and all(t > 0 for t in timing.times_ms)
