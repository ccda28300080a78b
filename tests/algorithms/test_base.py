"""The shared interface (algorithms/base.py): workspace layouts and views, the checks `run`
makes before an implementation runs, and the memo of workspace sizes."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from algorithms.base import (
    DEFAULT_CONFIG,
    AlgorithmBase,
    Work,
    WorkspaceLayout,
    align,
    workspace_view,
)
from algorithms.problem import ConvProblem
from algorithms.registry import get_algorithm


# Mutation gap: align's rounding (exact multiples stay, 256 by default) was unpinned.
def test_align_rounds_up_to_256_by_default() -> None:
    assert [align(v) for v in (0, 1, 255, 256, 257, 512, 513)] == [0, 256, 256, 256, 512,
                                                                    512, 768]
    assert [align(v, 8) for v in (0, 1, 8, 9)] == [0, 8, 8, 16]


# Mutation gap: layout offsets (each buffer aligned), byte ranges (unaligned ends) and
# membership were unpinned.
def test_layout_packs_aligned_buffers() -> None:
    rng = np.random.default_rng()
    layout = WorkspaceLayout().add("a", (3,), np.float32).add("b", (2, 5), np.float64)
    assert layout.nbytes == 256 + 256
    assert layout.byte_ranges() == {"a": slice(0, 12), "b": slice(256, 336)}
    assert "a" in layout and "b" in layout and "c" not in layout
    workspace = np.zeros(layout.nbytes, np.uint8)
    views = layout.views(workspace)
    values = rng.standard_normal((2, 5))
    views["b"][...] = values
    np.testing.assert_array_equal(workspace[256:336].view(np.float64).reshape(2, 5), values)
    assert layout.view(workspace, "a").shape == (3,)


# Mutation gap: workspace_view's alignment check and its exact-fit bound were unpinned.
def test_workspace_view_checks_alignment_and_size() -> None:
    workspace = np.zeros(64, np.uint8)
    assert workspace_view(workspace, 32, (4, 2), np.float32).shape == (4, 2)  # ends at 64
    with pytest.raises(ValueError, match="not aligned to 4 bytes"):
        workspace_view(workspace, 2, (2,), np.float32)
    with pytest.raises(ValueError, match="need 68 bytes, have 64"):
        workspace_view(workspace, 36, (4, 2), np.float32)
    assert workspace_view(workspace, 0, (64,), np.uint8).shape == (64,)
    with pytest.raises(ValueError, match="need 65 bytes, have 64"):  # one byte over
        workspace_view(workspace, 0, (65,), np.uint8)


def _problem() -> ConvProblem:
    return ConvProblem(n=2, c=4, h=7, w=6, k=5, r=3, s=3, pad=1)


def _operands(problem: ConvProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng()
    return (rng.standard_normal(problem.input_shape).astype(np.float32),
            rng.standard_normal(problem.filter_shape).astype(np.float32),
            np.full(problem.output_shape, np.nan, np.float32))


# Mutation gap: run() with no workspace, or one a single byte short, must refuse with a
# ValueError (the tests cut 256 bytes only).
@pytest.mark.parametrize("name", ["im2col_gemm", "implicit_gemm", "fft", "winograd"])
def test_a_missing_or_one_byte_short_workspace_is_refused(name: str) -> None:
    algorithm = get_algorithm("cpu", name)
    problem = _problem()
    x, w, y = _operands(problem)
    for config in algorithm.configs(problem):
        nbytes = algorithm.workspace_bytes(problem, config)
        for workspace in (None, np.zeros(nbytes - 1, np.uint8)):
            with pytest.raises(ValueError, match=f"{name}: workspace needs {nbytes} bytes"):
                algorithm.run(x, w, y, workspace, problem, config)
        assert np.isnan(y).all()  # refused before anything was written


# Mutation gap: "default" is a config only of algorithms without variants; it was never
# tried on one with variants. The name itself is stored in databases.
def test_default_is_only_the_config_of_algorithms_without_variants() -> None:
    assert DEFAULT_CONFIG == "default"
    problem = _problem()
    assert get_algorithm("cpu", "direct").configs(problem) == ("default",)
    for name in ("implicit_gemm", "winograd"):
        with pytest.raises(ValueError, match="unknown config 'default'"):
            get_algorithm("cpu", name).workspace_bytes(problem, "default")


class _Counting(AlgorithmBase):
    name: ClassVar[str] = "direct"
    backend: ClassVar[str] = "cpu"

    def __init__(self) -> None:
        self.asked = 0

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        self.asked += 1
        return problem.n * 4

    def _run(self, *args: Any) -> None:
        raise NotImplementedError


# Mutation gap: the workspace-size memo is bounded (a server sees unboundedly many
# problems); only its remembering was tested.
def test_the_workspace_memo_stays_bounded() -> None:
    algorithm = _Counting()
    problems = [ConvProblem(n=n, c=1, h=1, w=1, k=1, r=1, s=1) for n in range(1, 4200)]
    for problem in problems:
        assert algorithm.workspace_bytes(problem, DEFAULT_CONFIG) == problem.n * 4
    assert algorithm.asked == len(problems)
    assert len(algorithm.__dict__["_workspace_memo"]) <= 4096
    algorithm.workspace_bytes(problems[-1], DEFAULT_CONFIG)  # the newest is remembered
    assert algorithm.asked == len(problems)


# Mutation gap: what an algorithm that says nothing about its work reports (one launch,
# unknown blocks, full tiles) was unpinned.
def test_work_defaults_to_one_launch() -> None:
    assert Work() == Work(blocks=0, fill=1.0, launches=1)
    problem = _problem()
    for name in ("fft", "winograd", "depthwise"):
        algorithm = get_algorithm("cpu", name)
        assert isinstance(algorithm, AlgorithmBase)
        config = algorithm.configs(problem)[0]
        assert algorithm.work(problem, config) == Work(0, 1.0, 1)
