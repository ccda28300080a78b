"""benchmarks/cpu_shared_scratch.py: its switch between one scratch and a workspace per
plan, and its timing of convolutions in order and alone."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch", reason="the benchmark times a torch model")

import torch

from algorithms.problem import ConvProblem
from benchmarks import cpu_shared_scratch as bench
from tests.tuner.fakes import random_inputs
from tuner import plan


def test_the_switch_gives_each_plan_its_own_workspace_and_back(db_url: str) -> None:
    problems = (ConvProblem(n=1, c=3, h=8, w=8, k=4, r=3, s=3, pad=1),
                ConvProblem(n=1, c=5, h=9, w=7, k=2, r=3, s=3, pad=1))
    plans = [plan(p, device="cpu", db=db_url, algorithm="im2col_gemm") for p in problems]
    rng = np.random.default_rng()
    for mode, shared in (("own", False), ("shared", True)):
        bench.set_mode(plans, mode)
        for chosen, problem in zip(plans, problems, strict=True):
            chosen(*random_inputs(problem, rng))
        a, b = (chosen.workspace() for chosen in plans)
        assert np.shares_memory(a, b) is shared


def test_it_times_each_call_in_order_and_alone() -> None:
    calls: list[tuple[int, float]] = []

    class Recorder(torch.nn.Module):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls.append((self.index, float(x.sum())))
            return x

    layers = [(Recorder(i), torch.full((2,), float(i))) for i in range(3)]
    assert bench.in_order_ms(layers, passes=4).shape == (3,)
    assert [i for i, _ in calls] == [0, 1, 2] * 4  # the model's order, pass after pass
    calls.clear()
    assert (bench.alone_ms(layers, reps=3) > 0).all()
    assert [i for i, _ in calls] == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # each back to back
    assert all(total == 2.0 * i for i, total in calls)
