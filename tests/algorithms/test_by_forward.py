"""Backward directions as forward problems (algorithms/by_forward.py): the copies, and one
forward call per backward call."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from algorithms.by_forward import Remap, forward_problem
from algorithms.cpu._by_forward import CpuByForward
from algorithms.cpu.fft import _FftConvForward
from algorithms.cpu.implicit_gemm import _ImplicitGemmConvForward
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


@pytest.mark.parametrize("forward", [_ImplicitGemmConvForward, _FftConvForward],
                         ids=["implicit_gemm", "fft"])
@pytest.mark.parametrize("shape", sorted(_GROUPED))
def test_grouped_backward_filter_is_one_forward_call(forward: type, shape: str) -> None:
    # Bug pinned: grouped backward_filter ran the forward algorithm once per group, so a
    # depthwise layer of c channels cost c forward calls (c launch sets on the GPU).
    algorithm = _counting(forward)
    problem = ConvProblem(**_GROUPED[shape], direction="backward_filter")
    inner = forward_problem(problem)
    assert inner.groups == problem.groups
    rng = np.random.default_rng()
    x = rng.standard_normal(problem.operand_shapes[0]).astype(np.float32)
    dy = rng.standard_normal(problem.operand_shapes[1]).astype(np.float32)
    ref = reference(x, dy, problem)
    for config in algorithm.configs(problem):
        algorithm.runs.clear()
        nbytes = algorithm.workspace_bytes(problem, config)
        workspace = np.full(nbytes, 0xFF, np.uint8) if nbytes else None
        dw = np.full(problem.operand_shapes[2], np.nan, np.float32)
        algorithm.run(x, dy, dw, workspace, problem, config)
        assert algorithm.runs == [inner]
        assert relative_error(dw, ref) <= tolerance("float32", "implicit_gemm")
        # Three copies (x, dy in; dw out) around the forward run's own launches.
        launches = algorithm.work(problem, config).launches
        assert launches == algorithm.work(inner, config).launches + 3


def test_ungrouped_backward_filter_problem_is_unchanged() -> None:
    # groups == 1: the rearranged problem is the one the per-group form had.
    problem = ConvProblem(n=4, c=3, h=9, w=9, k=5, r=3, s=3, pad=1, stride=2,
                          direction="backward_filter")
    inner = forward_problem(problem)
    assert (inner.n, inner.c, inner.k, inner.groups) == (3, 4, 5, 1)
    # H' = (r-1)*dilation + (out-1)*stride + 1 = 2 + 4*2 + 1; the filter is dy's 5x5 plane.
    assert (inner.h, inner.w, inner.r, inner.s) == (11, 11, 5, 5)
    assert inner.stride == (1, 1) and inner.dilation == (2, 2)
