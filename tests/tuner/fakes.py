"""Fake algorithms for testing the tuner without depending on real kernels' speed."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from algorithms.base import DEFAULT_CONFIG, SUPPORTED, Support, unsupported
from algorithms.problem import ConvProblem
from algorithms.reference import reference_conv


class Fake:
    """Correct (via the reference), counts its runs, needs `ws` bytes of workspace."""

    backend: ClassVar[str] = "cpu"
    impl_hash = "fake-v1"

    def __init__(self, name: str, ws: int = 0, configs: tuple[str, ...] = (DEFAULT_CONFIG,)):
        self.name = name  # type: ignore[misc]
        self.ws = ws
        self._configs = configs
        self.runs = 0

    def supports(self, problem: ConvProblem) -> Support:
        return SUPPORTED

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        return self._configs

    def workspace_bytes(self, problem: ConvProblem, config: str) -> int:
        return self.ws

    def run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        self.runs += 1
        if self.ws:
            assert workspace is not None and workspace.size >= self.ws
        y[...] = reference_conv(x, w, problem)


class Raises(Fake):
    """A candidate whose kernel fails."""

    def run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        self.runs += 1
        raise RuntimeError("kernel launch failed: too many resources requested")


class Wrong(Fake):
    """A candidate that computes the wrong answer (and would otherwise look fastest)."""

    def run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        self.runs += 1
        y[...] = reference_conv(x, w, problem) * 1.01


class Lazy(Fake):
    """A candidate that leaves part of the output unwritten."""

    def run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        self.runs += 1
        ref = reference_conv(x, w, problem)
        y[:, :, :-1] = ref[:, :, :-1]


class Refuses(Fake):
    """A candidate that supports nothing."""

    def supports(self, problem: ConvProblem) -> Support:
        return unsupported("only 1x1 filters")


def small_problem(**kw: Any) -> ConvProblem:
    """A tiny problem for quick tuning."""
    args: dict[str, Any] = dict(n=2, c=4, h=9, w=7, k=6, r=3, s=3, pad=(1, 1))
    args.update(kw)
    return ConvProblem(**args)


def random_inputs(problem: ConvProblem, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Standard-normal x and w for a problem, in its dtype."""
    x = rng.standard_normal(problem.input_shape).astype(problem.dtype)
    w = rng.standard_normal(problem.filter_shape).astype(problem.dtype)
    return x, w
