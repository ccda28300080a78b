"""GPU tests: everything under tests/gpu, or marked `gpu`, skips with the reason when CuPy
or a GPU is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from algorithms.base import Algorithm
from algorithms.cuda.runtime import cuda_available
from algorithms.problem import ConvProblem
from algorithms.reference import reference, reference_conv, relative_error
from tests.cuda_shapes import SHAPES
from tests.precision import make_problem, nan_storage, to_float, to_storage, tolerance_for

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests under tests/gpu as `gpu`; skip every `gpu` test when no GPU is usable."""
    ok, why = cuda_available()
    skip = pytest.mark.skip(reason=f"no usable GPU: {why}")
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.gpu)
        if not ok and item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def runtime() -> Any:
    """The first GPU."""
    from algorithms.cuda.runtime import CudaRuntime

    return CudaRuntime(0)


_inputs: dict[ConvProblem, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def host_case(problem: ConvProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fresh random operands of the problem's direction (in its dtype) and their float64
    reference, made once per problem."""
    if problem not in _inputs:
        rng = np.random.default_rng()
        a_shape, b_shape, _ = problem.operand_shapes
        a = rng.standard_normal(a_shape).astype(problem.dtype)
        b = rng.standard_normal(b_shape).astype(problem.dtype)
        _inputs[problem] = (a, b, reference(a, b, problem))
    return _inputs[problem]


def torch_conv(x: np.ndarray, w: np.ndarray, problem: ConvProblem) -> np.ndarray | None:
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


def config_failures(algorithm: Algorithm, problem: ConvProblem) -> list[str]:
    """Each config of `algorithm` run on fresh random operands of the problem's direction
    (a 0xFF-filled workspace of the config's size) against the float64 reference, which
    torch's must match first (forward): those past the tolerance or leaving NaN, one line
    each."""
    import cupy

    dtype = problem.dtype
    rng = np.random.default_rng()
    a_shape, b_shape, out_shape = problem.operand_shapes
    a_host = to_storage(rng.standard_normal(a_shape), dtype)
    b_host = to_storage(rng.standard_normal(b_shape), dtype)
    a64, b64 = to_float(a_host, dtype), to_float(b_host, dtype)
    ref = reference(a64, b64, problem)
    torch_ref = torch_conv(a64, b64, problem) if problem.direction == "forward" else None
    if torch_ref is not None:  # the two references must agree before either judges us
        assert relative_error(torch_ref, ref) <= 1e-12
    limit = tolerance_for(dtype, problem.math, algorithm.name)
    a, b = cupy.asarray(a_host), cupy.asarray(b_host)
    failures = []
    for config in algorithm.configs(problem):
        y = cupy.asarray(nan_storage(out_shape, dtype))
        nbytes = algorithm.workspace_bytes(problem, config)
        workspace = cupy.full(nbytes, 0xFF, cupy.uint8) if nbytes else None
        algorithm.run(a, b, y, workspace, problem, config)
        out = to_float(cupy.asnumpy(y), dtype)
        err = relative_error(out, ref) if not np.isnan(out).any() else float("inf")
        if not err <= limit:
            failures.append(f"{config}: rel err {err:.3g} (limit {limit:g})")
    return failures


def math_errors(algorithm: Algorithm, config: str) -> dict[str, float]:
    """The relative error of a float32 `config` at math "fp32" and at "tf32", on the same
    inputs (ResNet-50's res4 3x3 at batch 2: K = 2304)."""
    import cupy

    errors = {}
    for math in ("fp32", "tf32"):
        problem = ConvProblem(**SHAPES["r50_res4_3x3"], math=math)
        rng = np.random.default_rng(0)
        x_host = rng.standard_normal(problem.input_shape).astype(np.float32)
        w_host = rng.standard_normal(problem.filter_shape).astype(np.float32)
        y = cupy.full(problem.output_shape, np.nan, np.float32)
        nbytes = algorithm.workspace_bytes(problem, config)
        workspace = cupy.empty(nbytes, cupy.uint8) if nbytes else None
        algorithm.run(cupy.asarray(x_host), cupy.asarray(w_host), y, workspace, problem, config)
        errors[math] = relative_error(cupy.asnumpy(y), reference_conv(x_host, w_host, problem))
    return errors


def assert_every_config_passes(algorithm: Algorithm, shape: str, dtype: str, math: str) -> None:
    """`algorithm` supports tests/cuda_shapes.py's `shape` in this dtype and math, and each
    of its configurations passes config_failures."""
    problem = make_problem(**SHAPES[shape], dtype=dtype, math=math)
    support = algorithm.supports(problem)
    assert support, support.reason
    failures = config_failures(algorithm, problem)
    assert not failures, f"{shape} {dtype} {math}:\n" + "\n".join(failures)


def assert_split_k_repeats(algorithm: Algorithm, dtype: str, math: str) -> None:
    """Split K's last block per tile sums the splits and resets the tile's counter: runs
    of every split configuration of `algorithm`, one after another in one workspace
    refilled with garbage between them (as the tuner interleaves a layer's candidates), and
    on a second stream with a workspace of its own, and replays of a CUDA graph of one,
    must each give the first run's bits, within tolerance of the float64 reference."""
    import cupy

    # K = 1024 on a 7x7 image: a grid far below a wave, so every tile offers splits.
    problem = make_problem(n=2, c=1024, h=7, w=7, k=96, r=1, s=1, dtype=dtype, math=math)
    splits = [c for c in algorithm.configs(problem) if "-k" in c]
    assert len(splits) >= 2
    rng = np.random.default_rng()
    x_host = to_storage(rng.standard_normal(problem.input_shape), dtype)
    w_host = to_storage(rng.standard_normal(problem.filter_shape), dtype)
    ref = reference(to_float(x_host, dtype), to_float(w_host, dtype), problem)
    limit = tolerance_for(dtype, math, algorithm.name)
    x, w = cupy.asarray(x_host), cupy.asarray(w_host)
    shared = cupy.empty(max(algorithm.workspace_bytes(problem, c) for c in splits), cupy.uint8)
    first: dict[str, bytes] = {}
    for _round in range(3):
        for config in splits:  # A B A B ...: each run after another's in the same buffer
            shared.fill(0xFF)
            y = cupy.asarray(nan_storage(problem.output_shape, dtype))
            algorithm.run(x, w, y, shared, problem, config)
            out = cupy.asnumpy(y)
            assert relative_error(to_float(out, dtype), ref) <= limit, config
            assert out.tobytes() == first.setdefault(config, out.tobytes()), config
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        for config in splits:
            own = cupy.full(algorithm.workspace_bytes(problem, config), 0xFF, cupy.uint8)
            y = cupy.asarray(nan_storage(problem.output_shape, dtype))
            algorithm.run(x, w, y, own, problem, config)
            assert cupy.asnumpy(y).tobytes() == first[config], config
        # A CUDA graph of one run (its counters made by the warm-up above) replays with
        # the same counters each time: each replay must leave them at zero for the next.
        config = splits[0]
        own = cupy.full(algorithm.workspace_bytes(problem, config), 0xFF, cupy.uint8)
        nans = cupy.asarray(nan_storage(problem.output_shape, dtype))
        y = nans.copy()
        algorithm.run(x, w, y, own, problem, config)
        stream.synchronize()
        stream.begin_capture()
        try:
            algorithm.run(x, w, y, own, problem, config)
        finally:  # an open capture would fail every later CUDA call of this process
            graph = stream.end_capture()
        for _ in range(3):
            y[...] = nans
            graph.launch(stream)
            stream.synchronize()
            assert cupy.asnumpy(y).tobytes() == first[config], config
    stream.synchronize()
