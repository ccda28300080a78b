"""Backward directions as forward problems (algorithms/by_forward.py, phases.py): the copies,
one forward call per backward call, and strided backward_data by phases."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from algorithms.by_forward import Remap, forward_problem
from algorithms.cpu._by_forward import CpuByForward
from algorithms.cpu.fft import _FftConvForward
from algorithms.cpu.implicit_gemm import _ImplicitGemmConvForward
from algorithms.phases import forward_of, phases
from algorithms.problem import ConvProblem
from algorithms.reference import reference, relative_error, tolerance
from algorithms.registry import get_algorithm

_REMAPS = {
    "swap": Remap(1, 3, 4, (2, 3), (2, 3)),
    "groups_flip": Remap(2, 3, 2, (3, 2), (3, 2), flip=True),
    "middle_window": Remap(1, 2, 3, (4, 5), (6, 4), (1, 2), middle=3),
    "middle_spread": Remap(2, 2, 2, (3, 3), (7, 8), (1, -1), (2, 3), middle=2),
}


def _remapped(src: np.ndarray, remap: Remap) -> np.ndarray:
    """Remap's definition, element by element (the oracle)."""
    source = src.reshape(remap.src_shape)
    out = np.zeros(remap.dst_shape, src.dtype)
    (dst_h, dst_w), (src_h, src_w) = remap.dst_hw, remap.src_hw
    for g, b, m, a, i, j in np.ndindex(*remap.dst_shape):
        y, x = (dst_h - 1 - i, dst_w - 1 - j) if remap.flip else (i, j)
        y, rest_y = divmod(y - remap.offset[0], remap.step[0])
        x, rest_x = divmod(x - remap.offset[1], remap.step[1])
        if not rest_y and not rest_x and 0 <= y < src_h and 0 <= x < src_w:
            out[g, b, m, a, i, j] = source[g, a, m, b, y, x]
    return out


@pytest.mark.parametrize("name", sorted(_REMAPS))
def test_cpu_remap_matches_its_definition(name: str) -> None:
    remap = _REMAPS[name]
    src = np.random.default_rng().standard_normal(remap.src_shape).astype(np.float32)
    dst = np.full(remap.dst_shape, np.nan, np.float32)
    problem = ConvProblem(n=1, c=1, h=3, w=3, k=1, r=1, s=1)
    get_algorithm("cpu", "implicit_gemm")._remap(src, dst, remap, problem)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(dst, _remapped(src, remap))


#: Grouped backward_filter layers: depthwise (multiplier 1 and 2) and grouped dense.
_GROUPED: dict[str, dict[str, Any]] = {
    "depthwise": dict(n=3, c=5, h=9, w=8, k=5, r=3, s=3, pad=1, stride=2, groups=5),
    "depthwise_m2": dict(n=2, c=4, h=7, w=7, k=8, r=3, s=3, pad=1, groups=4),
    "groups3_dilated": dict(n=2, c=6, h=10, w=9, k=9, r=3, s=2, pad=(2, 1), dilation=2,
                            groups=3),
}


def _counting(forward: type) -> Any:
    """A CPU backward algorithm over `forward` that counts its forward runs."""

    class Spy(forward):  # type: ignore[misc, valid-type]
        runs: ClassVar[list[ConvProblem]] = []

        def _run(self, a: Any, b: Any, out: Any, workspace: Any, problem: ConvProblem,
                 config: str) -> None:
            self.runs.append(problem)
            super()._run(a, b, out, workspace, problem, config)

    class Counting(CpuByForward, Spy):  # ByForward's forward calls reach Spy
        pass

    return Counting()


def _check_one_forward_call(forward: type, problem: ConvProblem) -> None:
    """Every config of the backward algorithm over `forward`, on fresh operands: one forward
    run, on forward_problem(problem), a result within tolerance, and `work` counting that
    run's launches plus the three copies around it."""
    algorithm = _counting(forward)
    inner = forward_problem(problem)
    rng = np.random.default_rng()
    a = rng.standard_normal(problem.operand_shapes[0]).astype(np.float32)
    b = rng.standard_normal(problem.operand_shapes[1]).astype(np.float32)
    ref = reference(a, b, problem)
    for config in algorithm.configs(problem):
        algorithm.runs.clear()
        nbytes = algorithm.workspace_bytes(problem, config)
        workspace = np.full(nbytes, 0xFF, np.uint8) if nbytes else None
        out = np.full(problem.operand_shapes[2], np.nan, np.float32)
        algorithm.run(a, b, out, workspace, problem, config)
        assert algorithm.runs == [inner]
        assert relative_error(out, ref) <= tolerance("float32", "implicit_gemm")
        assert algorithm.work(problem, config).launches == (
            algorithm.work(inner, config).launches + 3)


@pytest.mark.parametrize("forward", [_ImplicitGemmConvForward, _FftConvForward],
                         ids=["implicit_gemm", "fft"])
@pytest.mark.parametrize("shape", sorted(_GROUPED))
def test_grouped_backward_filter_is_one_forward_call(forward: type, shape: str) -> None:
    # Bug pinned: grouped backward_filter ran the forward algorithm once per group, so a
    # depthwise layer of c channels cost c forward calls (c launch sets on the GPU).
    problem = ConvProblem(**_GROUPED[shape], direction="backward_filter")
    assert forward_problem(problem).groups == problem.groups
    _check_one_forward_call(forward, problem)


def test_ungrouped_backward_filter_problem_is_unchanged() -> None:
    # groups == 1: the rearranged problem is the one the per-group form had.
    problem = ConvProblem(n=4, c=3, h=9, w=9, k=5, r=3, s=3, pad=1, stride=2,
                          direction="backward_filter")
    inner = forward_problem(problem)
    assert (inner.n, inner.c, inner.k, inner.groups) == (3, 4, 5, 1)
    # H' = (r-1)*dilation + (out-1)*stride + 1 = 2 + 4*2 + 1; the filter is dy's 5x5 plane.
    assert (inner.h, inner.w, inner.r, inner.s) == (11, 11, 5, 5)
    assert inner.stride == (1, 1) and inner.dilation == (2, 2)


#: Strided backward_data layers: filters shorter than the stride (phases without taps),
#: strides differing per axis, padding past the filter, groups, and a ResNet-like 3x3 s2.
_STRIDED: dict[str, dict[str, Any]] = {
    "3x3_s2": dict(n=2, c=3, h=9, w=8, k=4, r=3, s=3, pad=1, stride=2),
    "1x1_s2": dict(n=2, c=4, h=7, w=8, k=6, r=1, s=1, stride=2),
    "2x2_s3_pad": dict(n=2, c=3, h=10, w=11, k=4, r=2, s=2, pad=1, stride=3),
    "stride_pair": dict(n=1, c=2, h=11, w=9, k=3, r=5, s=2, pad=(2, 3), stride=(3, 2)),
    "pad_past_filter_groups": dict(n=2, c=6, h=5, w=6, k=4, r=3, s=2, pad=(3, 2), stride=2,
                                   groups=2),
}


@pytest.mark.parametrize("forward", [_ImplicitGemmConvForward, _FftConvForward],
                         ids=["implicit_gemm", "fft"])
@pytest.mark.parametrize("shape", sorted(_STRIDED))
def test_strided_backward_data_runs_the_phases_forward_problem(forward: type,
                                                               shape: str) -> None:
    # Bug pinned: backward_data at stride > 1 spread dy with zeros and ran the forward
    # algorithm over them: 3 of 4 products with zeros at stride 2 (2.25x the work on 3x3).
    problem = ConvProblem(**_STRIDED[shape], direction="backward_data")
    found = phases(problem)
    assert found is not None
    inner = forward_problem(problem)
    assert inner == forward_of(problem, found) and inner.stride == (1, 1)
    _check_one_forward_call(forward, problem)


def test_phases_cut_the_products() -> None:
    # Multiply-adds of the forward problem against dy spread with zeros (the same layer at
    # dilation 1 stride 1 has the spread's cost: every dx pixel takes r*s*k products).
    def products(problem: ConvProblem) -> int:
        out_h, out_w = problem.out_hw
        return problem.n * problem.k * out_h * out_w * problem.c // problem.groups * (
            problem.r * problem.s)

    # 56x56 planes: the edges' share is small, so 3x3 s2 is near its 4*9/(4*2*2) = 2.25.
    layers: list[tuple[dict[str, Any], float]] = [(dict(r=3, s=3, pad=1), 2.25),
                                                   (dict(r=1, s=1), 4.0)]
    for layer, expected in layers:
        problem = ConvProblem(n=1, c=8, h=56, w=56, k=16, stride=2, **layer,
                              direction="backward_data")
        spread = products(ConvProblem(n=problem.n, c=problem.k, h=problem.h + problem.r - 1,
                                      w=problem.w + problem.s - 1, k=problem.c, r=problem.r,
                                      s=problem.s))
        assert spread / products(forward_problem(problem)) == pytest.approx(expected, rel=0.08)


def test_phases_only_where_they_apply() -> None:
    base: dict[str, Any] = dict(n=2, c=4, h=9, w=9, k=4, r=3, s=3, pad=1)
    assert phases(ConvProblem(**base, stride=2, direction="backward_data")) is not None
    assert phases(ConvProblem(**base, stride=(1, 2), direction="backward_data")) is not None
    others: list[dict[str, Any]] = [dict(stride=1, direction="backward_data"),
                                    dict(stride=2, dilation=2, direction="backward_data"),
                                    dict(stride=2, direction="backward_filter"),
                                    dict(stride=2),
                                    # one padded pixel in a phase without taps: dx is 0
                                    dict(h=1, w=1, r=1, s=1, stride=2, pad=1,
                                         direction="backward_data")]
    for other in others:
        assert phases(ConvProblem(**{**base, **other})) is None


@pytest.mark.parametrize("name", ["implicit_gemm", "implicit_gemm_tc", "fft"])
def test_an_invalid_rearranged_problem_is_refused_with_a_reason(name: str) -> None:
    # Bug pinned: the CUDA algorithms sized the rearranged copies before asking whether the
    # rearranged problem exists, so supports() raised ValueError instead of refusing.
    problem = ConvProblem(n=1, c=1, h=2**24, w=1, k=1, r=3, s=1, pad=(1, 0),
                          direction="backward_data")  # dy spread to 2**24 + 2 rows
    support = get_algorithm("cuda", name).supports(problem)
    assert not support and "rearranged forward problem is invalid" in support.reason


def _backward(name: str, problem: ConvProblem) -> tuple[np.ndarray, np.ndarray]:
    """(result, float64 reference) of the CPU algorithm `name` on fresh operands, every
    config, on a NaN-poisoned result and a 0xFF workspace of exactly the size asked."""
    algorithm = get_algorithm("cpu", name)
    support = algorithm.supports(problem)
    assert support, support.reason
    rng = np.random.default_rng()
    a_shape, b_shape, out_shape = problem.operand_shapes
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    ref = reference(a, b, problem)
    for config in algorithm.configs(problem):
        out = np.full(out_shape, np.nan, np.float32)
        nbytes = algorithm.workspace_bytes(problem, config)
        algorithm.run(a, b, out, np.full(nbytes, 0xFF, np.uint8), problem, config)
        assert relative_error(out, ref) <= tolerance("float32", name), config
    return out, ref


# Mutation gap: a strided backward_data whose rows all fall in phases without taps (one
# padded row under a 1x1 filter at stride 2) while its columns do not: no phases apply
# (the forward problem would be empty), and dx is exactly 0.
@pytest.mark.parametrize("name", ["implicit_gemm", "fft"])
def test_backward_data_with_one_axis_in_tapless_phases(name: str) -> None:
    problem = ConvProblem(n=2, c=3, h=1, w=7, k=4, r=1, s=1, pad=(1, 0), stride=2,
                          direction="backward_data")
    assert phases(problem) is None
    out, ref = _backward(name, problem)
    assert not ref.any() and not out.any()


# Mutation gap: strided backward_data dilated along one axis only keeps the spread (phases
# need dilation 1 on both axes).
@pytest.mark.parametrize("name", ["implicit_gemm", "fft"])
@pytest.mark.parametrize("dilation", [(1, 2), (2, 1)])
def test_strided_backward_data_dilated_on_one_axis(name: str, dilation: tuple[int, int]) -> None:
    problem = ConvProblem(n=2, c=3, h=9, w=10, k=4, r=3, s=3, pad=2, stride=2,
                          dilation=dilation, direction="backward_data")
    assert phases(problem) is None
    _backward(name, problem)


# Mutation gap: J = ceil(R / S) sub-taps exactly: a 2x2 stride-2 backward_data (a UNet's
# transposed convolution) is four 1x1 phases over dy itself, not 2x2 ones with a zero tap.
def test_a_filter_as_tall_as_the_stride_has_one_sub_tap() -> None:
    problem = ConvProblem(n=2, c=3, h=8, w=6, k=4, r=2, s=2, stride=2,
                          direction="backward_data")
    assert forward_problem(problem) == ConvProblem(n=2, c=4, h=4, w=3, k=4 * 3, r=1, s=1)
    _backward("implicit_gemm", problem)


# Mutation gap: the rearranged forward problem keeps the caller's math and dtype (a tf32
# backward call may use TF32 tensor cores in its forward run; an fp32 one may not).
@pytest.mark.parametrize("geometry", [dict(stride=2), dict(dilation=(1, 2)), dict()],
                         ids=["phases", "spread", "filter"])
def test_rearranged_problems_keep_math_and_dtype(geometry: dict[str, Any]) -> None:
    direction = "backward_data" if geometry else "backward_filter"
    problem = ConvProblem(n=2, c=4, h=9, w=9, k=6, r=3, s=3, pad=1, math="tf32",
                          direction=direction, **geometry)
    inner = forward_problem(problem)
    assert (inner.math, inner.dtype, inner.direction) == ("tf32", "float32", "forward")
    half = ConvProblem(n=2, c=4, h=9, w=9, k=6, r=3, s=3, pad=1, dtype="bfloat16",
                       direction=direction, **geometry)
    assert (forward_problem(half).math, forward_problem(half).dtype) == ("fp32", "bfloat16")


# Mutation gap: when the forward algorithm refuses the rearranged problem, the reason says
# which direction was rearranged (no CPU algorithm refuses one, so a stand-in does).
def test_a_refused_rearranged_problem_names_the_direction() -> None:
    from algorithms.base import SUPPORTED, Support, unsupported
    from algorithms.cpu._common import CpuAlgorithm

    class Short(CpuAlgorithm):
        name: ClassVar[str] = "implicit_gemm"

        def _limits(self, problem: ConvProblem) -> Support:
            return unsupported(f"r={problem.r} is too tall") if problem.r > 2 else SUPPORTED

    class ShortBackward(CpuByForward, Short):
        pass

    algorithm = ShortBackward()
    for direction in ("backward_data", "backward_filter"):
        problem = ConvProblem(n=2, c=3, h=3, w=6, k=4, r=3, s=1, direction=direction)
        r = forward_problem(problem).r  # 3 going back to the data, out_h = 1 for the filter
        support = algorithm.supports(problem)
        assert bool(support) is (r <= 2)
        if r > 2:
            assert support.reason == f"{direction} as a forward problem: r={r} is too tall"
