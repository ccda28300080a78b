"""The CPU algorithms against the float64 reference, on small awkward shapes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms.base import DEFAULT_CONFIG, Algorithm
from algorithms.cpu._common import tap_range
from algorithms.problem import ConvProblem
from algorithms.reference import reference, reference_conv, relative_error, tolerance
from algorithms.registry import ALGORITHM_NAMES, algorithms_for, get_algorithm

ALGORITHMS: list[Algorithm] = algorithms_for("cpu")
#: The names this checkout implements, in registry order (parametrises every test below).
NAMES: tuple[str, ...] = tuple(a.name for a in ALGORITHMS)
DTYPES = ("float32", "float64", "float16", "bfloat16")

#: (algorithm, dtype) pairs that are expected to refuse every problem, with why.
UNSUPPORTED_DTYPES = {("direct", "float16"), ("direct", "bfloat16")}

#: Algorithms with no CPU implementation: supports() refuses every problem, with why.
GPU_ONLY = {"implicit_gemm_tc", "implicit_gemm_wgmma"}


def winograd_refuses(problem: ConvProblem) -> bool:
    """Whether winograd must refuse: it computes forward 3x3, stride-1, undilated, ungrouped."""
    return ((problem.r, problem.s) != (3, 3) or problem.stride != (1, 1)
            or problem.dilation != (1, 1) or problem.groups != 1
            or problem.direction != "forward")


def refuses(name: str, problem: ConvProblem) -> bool:
    """Whether `name` is expected to refuse `problem` (dtype, GPU-only, or its geometry)."""
    return ((name, problem.dtype) in UNSUPPORTED_DTYPES or name in GPU_ONLY
            or (name == "depthwise" and problem.groups != problem.c)
            or (name == "winograd" and winograd_refuses(problem)))

#: id -> ConvProblem keyword arguments (dtype added per test). Small: c, k <= 16, h, w <= 12.
SHAPES: dict[str, dict[str, Any]] = {
    "basic_3x3_pad1": dict(n=1, c=3, h=6, w=6, k=4, r=3, s=3, pad=1),
    "batch3_k_ne_c": dict(n=3, c=5, h=7, w=7, k=2, r=3, s=3, pad=1),
    "stride2": dict(n=2, c=4, h=9, w=9, k=6, r=3, s=3, pad=1, stride=2),
    "stride3_no_pad": dict(n=1, c=3, h=11, w=10, k=4, r=3, s=2, stride=3),
    "stride_pair": dict(n=2, c=2, h=9, w=8, k=3, r=3, s=3, pad=1, stride=(1, 2)),
    "asym_pad": dict(n=2, c=3, h=7, w=5, k=4, r=3, s=3, pad=(2, 0)),
    "asym_pad_other": dict(n=1, c=4, h=5, w=8, k=3, r=2, s=3, pad=(0, 1), stride=2),
    "pad_gt_filter": dict(n=2, c=3, h=4, w=5, k=2, r=3, s=3, pad=4),
    "pad_gt_filter_strided": dict(n=1, c=2, h=3, w=3, k=3, r=1, s=2, pad=(3, 4), stride=3),
    "dilation2": dict(n=2, c=3, h=9, w=9, k=4, r=3, s=3, pad=2, dilation=2),
    "dilation_1x2": dict(n=1, c=4, h=8, w=10, k=5, r=3, s=3, pad=1, dilation=(1, 2)),
    "dilation_stride": dict(n=2, c=2, h=12, w=11, k=3, r=2, s=3, pad=1, stride=2, dilation=3),
    "groups2": dict(n=2, c=8, h=6, w=7, k=6, r=3, s=3, pad=1, groups=2),
    "groups4_strided": dict(n=1, c=8, h=9, w=9, k=12, r=3, s=2, pad=(1, 2), stride=2, groups=4),
    "depthwise": dict(n=2, c=6, h=7, w=7, k=6, r=3, s=3, pad=1, groups=6),
    "depthwise_multiplier": dict(n=1, c=4, h=6, w=8, k=8, r=3, s=3, pad=1, groups=4),
    "depthwise_dilated_strided": dict(
        n=3, c=5, h=10, w=9, k=5, r=3, s=3, pad=2, stride=2, dilation=2, groups=5
    ),
    "non_square": dict(n=2, c=3, h=5, w=11, k=4, r=2, s=5, pad=(1, 2)),
    "one_by_one": dict(n=3, c=16, h=4, w=4, k=8, r=1, s=1),
    "one_by_one_strided": dict(n=2, c=6, h=7, w=6, k=5, r=1, s=1, stride=2),
    # Pointwise with groups: im2col_gemm reads (writes) the image as its column matrix.
    "one_by_one_groups3": dict(n=2, c=9, h=3, w=5, k=6, r=1, s=1, groups=3),
    "filter_equals_input": dict(n=2, c=3, h=5, w=4, k=4, r=5, s=4),
    "filter_equals_padded_input": dict(n=1, c=4, h=4, w=3, k=3, r=6, s=7, pad=(1, 2)),
    "dilated_filter_equals_padded": dict(n=2, c=2, h=5, w=5, k=2, r=3, s=2, pad=1, dilation=(3, 6)),
    "wide_channels": dict(n=1, c=16, h=6, w=6, k=16, r=3, s=3, pad=1),
    "single_pixel_input": dict(n=2, c=3, h=1, w=1, k=4, r=3, s=3, pad=1),
}


def _problem(shape: str, dtype: str) -> ConvProblem:
    return ConvProblem(**SHAPES[shape], dtype=dtype)


def _inputs(problem: ConvProblem) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng()
    x = rng.standard_normal(problem.input_shape).astype(problem.dtype)
    w = rng.standard_normal(problem.filter_shape).astype(problem.dtype)
    return x, w


def _run(
    algorithm: Algorithm, problem: ConvProblem, config: str, x: np.ndarray, w: np.ndarray
) -> np.ndarray:
    """Run with a NaN-poisoned output and a workspace of exactly workspace_bytes of 0xFF."""
    nbytes = algorithm.workspace_bytes(problem, config)
    assert isinstance(nbytes, int) and nbytes >= 0
    # 0xFF bytes read as NaN in every float dtype, so reading unwritten workspace shows.
    workspace = np.full(nbytes, 0xFF, dtype=np.uint8) if nbytes else None
    y = np.full(problem.output_shape, np.nan, dtype=problem.dtype)
    algorithm.run(x, w, y, workspace, problem, config)
    return y


def test_registry_has_every_name() -> None:
    assert list(NAMES) == list(ALGORITHM_NAMES)
    for algorithm in ALGORITHMS:
        assert algorithm.backend == "cpu"
        assert isinstance(algorithm, Algorithm)
        assert get_algorithm("cpu", algorithm.name) is algorithm


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("name", NAMES)
def test_matches_reference(name: str, shape: str, dtype: str) -> None:
    algorithm = get_algorithm("cpu", name)
    problem = _problem(shape, dtype)
    support = algorithm.supports(problem)
    if refuses(name, problem):
        assert not support
        assert isinstance(support.reason, str) and support.reason.strip()
        return
    assert support, support.reason
    x, w = _inputs(problem)
    ref = reference_conv(x, w, problem)
    configs = algorithm.configs(problem)
    assert configs and all(isinstance(c, str) and c for c in configs)
    for config in configs:
        y = _run(algorithm, problem, config, x, w)
        assert y.shape == problem.output_shape and y.dtype == np.dtype(dtype)
        assert np.isfinite(y).all(), f"{name}/{config} left elements unwritten or read NaN"
        error = relative_error(y, ref)
        assert error <= tolerance(dtype, name), f"{name}/{config}: relative error {error:.3g}"


@pytest.mark.parametrize("name", NAMES)
def test_unsupported_reasons_are_text(name: str) -> None:
    algorithm = get_algorithm("cpu", name)
    for shape in SHAPES:
        for dtype in DTYPES:
            problem = _problem(shape, dtype)
            support = algorithm.supports(problem)
            assert bool(support) != refuses(name, problem), (shape, dtype, support.reason)
            if not support:
                assert isinstance(support.reason, str) and support.reason.strip()


def test_direct_needs_no_workspace() -> None:
    direct = get_algorithm("cpu", "direct")
    assert direct.configs(_problem("stride2", "float32")) == (DEFAULT_CONFIG,)
    for shape in SHAPES:
        for dtype in ("float32", "float64"):
            problem = _problem(shape, dtype)
            assert direct.workspace_bytes(problem, DEFAULT_CONFIG) == 0


def test_implicit_gemm_workspace_much_smaller_than_im2col() -> None:
    # A ResNet-sized layer: sizes only, nothing is run.
    problem = ConvProblem(n=8, c=256, h=56, w=56, k=256, r=3, s=3, pad=1)
    im2col = get_algorithm("cpu", "im2col_gemm")
    implicit = get_algorithm("cpu", "implicit_gemm")
    col_bytes = im2col.workspace_bytes(problem, DEFAULT_CONFIG)
    assert col_bytes >= problem.c * 9 * 56 * 56 * problem.itemsize  # the column matrix
    sizes = [implicit.workspace_bytes(problem, cfg) for cfg in implicit.configs(problem)]
    assert max(sizes) < col_bytes
    assert min(sizes) * 8 <= col_bytes


def test_implicit_gemm_workspace_does_not_grow_with_batch_or_image() -> None:
    implicit = get_algorithm("cpu", "implicit_gemm")
    big = ConvProblem(n=64, c=64, h=224, w=224, k=64, r=3, s=3, pad=1)
    bigger = ConvProblem(n=256, c=64, h=448, w=448, k=64, r=3, s=3, pad=1)
    for config in implicit.configs(big):
        assert implicit.workspace_bytes(big, config) == implicit.workspace_bytes(bigger, config)


@pytest.mark.parametrize("dtype", ("float32", "float16"))
def test_float16_workspace_holds_float32_buffers(dtype: str) -> None:
    # float16 storage computes in float32, so the workspace cannot shrink with the dtype.
    problem = ConvProblem(n=2, c=8, h=10, w=10, k=8, r=3, s=3, pad=1, dtype=dtype)
    as_f32 = ConvProblem(n=2, c=8, h=10, w=10, k=8, r=3, s=3, pad=1, dtype="float32")
    for name in ("im2col_gemm", "implicit_gemm", "fft"):
        algorithm = get_algorithm("cpu", name)
        for config in algorithm.configs(problem):
            assert algorithm.workspace_bytes(problem, config) >= algorithm.workspace_bytes(
                as_f32, config
            )


@pytest.mark.parametrize("name", NAMES)
def test_unknown_config_is_rejected(name: str) -> None:
    algorithm = get_algorithm("cpu", name)
    with pytest.raises(ValueError, match="config"):
        algorithm.workspace_bytes(_problem("basic_3x3_pad1", "float32"), "no_such_config")


@pytest.mark.parametrize("name", ("im2col_gemm", "implicit_gemm", "fft"))
def test_short_workspace_is_refused(name: str) -> None:
    algorithm = get_algorithm("cpu", name)
    problem = _problem("stride2", "float32")
    x, w = _inputs(problem)
    for config in algorithm.configs(problem):
        nbytes = algorithm.workspace_bytes(problem, config)
        assert nbytes > 0
        short = np.zeros(nbytes - 256, dtype=np.uint8)
        with pytest.raises(ValueError, match="workspace"):
            algorithm.run(x, w, np.empty(problem.output_shape, np.float32), short, problem, config)


@pytest.mark.parametrize("name", NAMES)
def test_run_is_repeatable_on_a_reused_workspace(name: str) -> None:
    # The tuner times repeated runs on one workspace: leftovers must not leak into y.
    algorithm = get_algorithm("cpu", name)
    problem = _problem("depthwise_dilated_strided" if name == "depthwise"
                       else "pad_gt_filter_strided", "float32")
    if refuses(name, problem):
        assert not algorithm.supports(problem)
        return
    x, w = _inputs(problem)
    ref = reference_conv(x, w, problem)
    for config in algorithm.configs(problem):
        nbytes = algorithm.workspace_bytes(problem, config)
        workspace = np.full(nbytes, 0xFF, dtype=np.uint8) if nbytes else None
        for _ in range(2):
            y = np.full(problem.output_shape, np.nan, dtype=np.float32)
            algorithm.run(x, w, y, workspace, problem, config)
            assert relative_error(y, ref) <= tolerance("float32", name)


def test_tap_range_matches_brute_force() -> None:
    rng = np.random.default_rng()
    for _ in range(500):
        out_len, in_len = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        stride, pad = int(rng.integers(1, 4)), int(rng.integers(0, 5))
        offset = int(rng.integers(0, 9))
        lo, hi = tap_range(out_len, in_len, stride, pad, offset)
        valid = [o for o in range(out_len) if 0 <= o * stride - pad + offset < in_len]
        assert list(range(lo, hi)) == valid, (out_len, in_len, stride, pad, offset)


def _random_problem(rng: np.random.Generator, dtype: str) -> ConvProblem:
    """A random small problem (retrying until the output is non-empty)."""
    while True:
        groups = int(rng.choice([1, 1, 2, 3]))
        kwargs: dict[str, Any] = dict(
            n=int(rng.integers(1, 3)),
            c=groups * int(rng.integers(1, 4)),
            k=groups * int(rng.integers(1, 4)),
            h=int(rng.integers(1, 10)),
            w=int(rng.integers(1, 10)),
            r=int(rng.integers(1, 5)),
            s=int(rng.integers(1, 5)),
            pad=(int(rng.integers(0, 4)), int(rng.integers(0, 4))),
            stride=(int(rng.integers(1, 4)), int(rng.integers(1, 4))),
            dilation=(int(rng.integers(1, 3)), int(rng.integers(1, 3))),
            groups=groups,
            dtype=dtype,
        )
        try:
            return ConvProblem(**kwargs)
        except ValueError:
            continue  # the dilated filter does not fit the padded input


@pytest.mark.parametrize("dtype", ("float32", "float64"))
def test_random_problems(dtype: str) -> None:
    rng = np.random.default_rng()
    for _ in range(40):
        problem = _random_problem(rng, dtype)
        x, w = _inputs(problem)
        ref = reference_conv(x, w, problem)
        for algorithm in ALGORITHMS:
            if refuses(algorithm.name, problem):
                assert not algorithm.supports(problem)
                continue
            assert algorithm.supports(problem)
            for config in algorithm.configs(problem):
                error = relative_error(_run(algorithm, problem, config, x, w), ref)
                assert error <= tolerance(dtype, algorithm.name), (
                    f"{algorithm.name}/{config} on {problem.describe()}: error {error:.3g}"
                )


BACKWARD = ("backward_data", "backward_filter")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("direction", BACKWARD)
@pytest.mark.parametrize("name", NAMES)
def test_backward_directions_match_reference(
    name: str, direction: str, shape: str, dtype: str
) -> None:
    algorithm = get_algorithm("cpu", name)
    problem = ConvProblem(**SHAPES[shape], dtype=dtype, direction=direction)
    support = algorithm.supports(problem)
    if not support:
        # Refusals name the direction, the dtype or (depthwise) the groups, precisely.
        named = (direction, dtype, "groups") if name == "depthwise" else (direction, dtype)
        assert any(word in support.reason for word in named), support.reason
        return
    rng = np.random.default_rng()
    a_shape, b_shape, out_shape = problem.operand_shapes
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    ref = reference(a, b, problem)
    for config in algorithm.configs(problem):
        nbytes = algorithm.workspace_bytes(problem, config)
        workspace = np.full(nbytes, 0xFF, dtype=np.uint8) if nbytes else None
        out = np.full(out_shape, np.nan, dtype=dtype)
        algorithm.run(a, b, out, workspace, problem, config)
        assert np.isfinite(out).all(), f"{name}/{config} left elements unwritten"
        error = relative_error(out, ref)
        assert error <= tolerance(dtype, name), f"{name}/{config}: relative error {error:.3g}"


def test_every_cpu_algorithm_serves_every_direction() -> None:
    for direction in BACKWARD:
        problem = ConvProblem(**SHAPES["stride2"], direction=direction)
        served = {name for name in NAMES if get_algorithm("cpu", name).supports(problem)}
        assert served == {name for name in NAMES if not refuses(name, problem)}


def test_workspace_bytes_is_remembered_and_still_refuses_unknown_configs() -> None:
    # Bug pinned: workspace_bytes is now remembered per (problem, config), since run() asks
    # on every call; an unknown config must still raise, before and after a cached answer.
    for algorithm in algorithms_for("cpu"):
        problem = ConvProblem(n=2, c=4, h=9, w=7, k=6, r=3, s=3, pad=1)
        if not algorithm.supports(problem):
            continue
        for config in algorithm.configs(problem):
            first = algorithm.workspace_bytes(problem, config)
            assert algorithm.workspace_bytes(problem, config) == first
            assert first == algorithm._workspace(problem, config)  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match="unknown config"):
            algorithm.workspace_bytes(problem, "no-such-config")


def test_fft_sizes_are_scipys_real_fast_lengths() -> None:
    # Ours replaced scipy.fft.next_fast_len(real=True) (whose import cost a new process
    # 0.33 s): the sizes, and so every stored workspace of fft, must not change.
    from scipy.fft import next_fast_len as scipys

    from algorithms.cpu.fft import next_fast_len

    assert [next_fast_len(n) for n in range(1, 5000)] == [scipys(n, real=True)
                                                        for n in range(1, 5000)]
    assert next_fast_len(1_000_003) == scipys(1_000_003, real=True)


# Mutation gap: the GPU-only entries' run() must fail loudly (it left y unwritten), and
# their reasons must say why and what the CPU offers instead.
@pytest.mark.parametrize(("name", "hardware"), [("implicit_gemm_tc", "mma.sync"),
                                                ("implicit_gemm_wgmma", "wgmma")])
def test_gpu_only_entries_refuse_and_do_not_run(name: str, hardware: str) -> None:
    algorithm = get_algorithm("cpu", name)
    problem = _problem("basic_3x3_pad1", "float32")
    support = algorithm.supports(problem)
    assert not support
    assert f"{name} is GPU-only" in support.reason and hardware in support.reason
    assert support.reason.endswith("on the CPU use implicit_gemm")
    x, w = _inputs(problem)
    y = np.full(problem.output_shape, np.nan, np.float32)
    with pytest.raises(RuntimeError, match="GPU-only"):
        algorithm.run(x, w, y, None, problem, DEFAULT_CONFIG)
