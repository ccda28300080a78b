"""The CUDA algorithms, every configuration, against the float64 reference on the GPU.

Before each run y is filled with NaN (an unwritten element fails the check) and the
workspace with 0xFF bytes (NaN as float, so reading scratch before writing it shows).
Skipped, with the reason, where CuPy or a GPU is missing (see conftest.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms.base import Algorithm
from algorithms.problem import DTYPES, ConvProblem
from algorithms.reference import relative_error, tolerance
from algorithms.registry import ALGORITHM_NAMES, algorithms_for
from algorithms.runtime import TimingPolicy
from tests.cuda_shapes import ALIGN_SHAPES, OTHER_DTYPE_SHAPES, SHAPES
from tests.gpu.conftest import host_case, math_errors

pytestmark = pytest.mark.gpu

ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in algorithms_for("cuda")}




def _cases() -> list[Any]:
    params = []
    for shape in SHAPES:
        dtypes = ["float32"] + (["float16", "float64"] if shape in OTHER_DTYPE_SHAPES else [])
        for dtype in dtypes:
            for name in ALGORITHMS:
                params.append(pytest.param(name, shape, dtype, id=f"{name}-{shape}-{dtype}"))
    return params


def test_every_name_is_registered() -> None:
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
    x_host, w_host, ref = host_case(problem)
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


def _at_offset(host: np.ndarray, offset: int) -> Any:
    """A device copy of `host` starting `offset` bytes past a 256-byte boundary (a slice of a
    caller's tensor), as a CuPy array sharing that memory."""
    import cupy

    raw = cupy.empty(host.nbytes + 256, dtype=cupy.uint8)
    arr = cupy.ndarray(host.shape, dtype=host.dtype, memptr=raw.data + offset)
    arr.set(host)
    return arr


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", list(ALIGN_SHAPES))
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_element_aligned_buffers(runtime: Any, name: str, shape: str, dtype: str) -> None:
    """x, w and y one element past a 256-byte boundary: no misaligned access, right answers."""
    problem = ConvProblem(**ALIGN_SHAPES[shape], dtype=dtype)
    algorithm = ALGORITHMS[name]
    if not algorithm.supports(problem):
        pytest.skip(algorithm.supports(problem).reason)
    x_host, w_host, ref = host_case(problem)
    item = DTYPES[dtype]
    x, w = _at_offset(x_host, item), _at_offset(w_host, item)
    for config in algorithm.configs(problem):
        y = _at_offset(np.full(problem.output_shape, np.nan, dtype), item)
        workspace = runtime.workspace(algorithm.workspace_bytes(problem, config))
        algorithm.run(x, w, y, workspace, problem, config)
        out = runtime.to_numpy(y)
        assert not np.isnan(out).any(), f"{config}: unwritten outputs"
        assert relative_error(out, ref) <= tolerance(dtype, name), config


def test_run_only_enqueues_on_the_current_stream(runtime: Any) -> None:
    """Work issued inside a non-default stream completes only when that stream does."""
    import cupy

    problem = ConvProblem(**SHAPES["odd"])
    x_host, w_host, ref = host_case(problem)
    stream = cupy.cuda.Stream(non_blocking=True)
    for algorithm in ALGORITHMS.values():
        if not algorithm.supports(problem):  # depthwise: "odd" is a dense layer
            continue
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
    # The libraries whose upgrade must not keep old times as measured here.
    assert fp["cublas"] > 0 and fp["cufft"] > 0 and fp["nvrtc"].count(".") == 1
    assert fp["gemm"] in ("cublas", "cublaslt")
    assert runtime.memory_bytes() > 0
    b = runtime.random((256, 256), "float32", rng)
    timing = runtime.time(lambda: b @ b, TimingPolicy(warmup=1, budget_s=0.05, min_reps=3))
    assert len(timing.times_ms) >= 3 and all(t > 0 for t in timing.times_ms)


def test_im2col_gemm_stays_within_each_maths_tolerance() -> None:
    """At math "tf32" cuBLAS may compute in TF32 on operands our copies rounded (within
    TF32's error; tests/test_cuda_tf32_copies.py pins that it is asked to); at "fp32" it
    stays strict."""
    from algorithms.cuda.im2col_gemm import Im2colGemmCuda

    errors = math_errors(Im2colGemmCuda(), "chunk=all")
    assert errors["fp32"] <= tolerance("float32", "im2col_gemm"), errors
    assert errors["tf32"] <= 1e-3, errors
