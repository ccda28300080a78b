"""Launches on problems too big to run anywhere but a GPU, checked on the host: whatever
supports() accepts launches within the grid, block and shared-memory limits, with 32-bit
scalar arguments and cuBLAS batch counts within bounds, and depthwise says why it refuses
what it does and offers its compiled-in filter sizes only for them. The kernels themselves
run on the CPU in tests/test_cuda_emulated.py, and on a GPU in tests/gpu.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms.cuda import KERNEL_MODULES, _cublas, fft
from algorithms.problem import ConvProblem
from tests.cuda_emu.cases import ALGORITHMS as ALGOS
from tests.cuda_emu.host import dev
from tests.cuda_kernel_standins import LAUNCHES, Sized, checked_gemm, checked_launch
from tests.cuda_shapes import SHAPES

# --- launch limits on problems too big to emulate -------------------------------------------------
BIG_PROBLEMS: dict[str, dict[str, Any]] = {
    "batch_over_grid_yz": dict(n=70000, c=1, h=3, w=3, k=2, r=3, s=3, pad=1),
    "groups_over_grid_yz": dict(n=1, c=70000, h=2, w=2, k=70000, r=1, s=1, groups=70000),
    "k_tiles_over_grid_yz": dict(n=1, c=1, h=2, w=2, k=600000, r=1, s=1),
    "near_int32": dict(n=64, c=512, h=224, w=224, k=64, r=3, s=3, pad=1),
    "huge_dilation": dict(n=1, c=2, h=300, w=300, k=2, r=3, s=3, dilation=100),
    # Depthwise: just under 2**31 input elements, and a footprint over 48 KB for every tile
    # (the flat instances serve it).
    "depthwise_near_int32": dict(n=64, c=512, h=255, w=255, k=512, r=3, s=3, pad=1,
                                 groups=512),
    "depthwise_huge_dilation": dict(n=1, c=2, h=300, w=300, k=4, r=3, s=3, dilation=100,
                                    groups=2),
}


class _NullPlan:
    def __init__(self, fft_type: int, batch: int, fh: int, fw: int) -> None:
        assert batch <= 2**31 - 1 and fh >= 2 and fw >= 2

    def fft(self, a: Any, out: Any, direction: int) -> None:
        pass


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_filter"])
@pytest.mark.parametrize("shape", list(BIG_PROBLEMS))
@pytest.mark.parametrize("name", ["direct", "im2col_gemm", "implicit_gemm", "implicit_gemm_tc",
                                  "depthwise"])
def test_launches_stay_within_device_limits(monkeypatch: pytest.MonkeyPatch, name: str,
                                            shape: str, direction: str, dtype: str) -> None:
    """Whatever supports() accepts launches within grid, block and shared-memory limits."""
    gemms: list[int] = []

    def gemm(*args: Any, **kwargs: Any) -> None:
        checked_gemm(*args, **kwargs)
        gemms.append(args[15])  # the batch

    for module in KERNEL_MODULES:
        monkeypatch.setattr(module, "get_kernel", checked_launch)
    monkeypatch.setattr(_cublas, "_gemm", gemm)
    LAUNCHES.clear()
    problem = ConvProblem(**BIG_PROBLEMS[shape], direction=direction, dtype=dtype)
    algorithm = ALGOS[name]
    if not algorithm.supports(problem):
        assert algorithm.supports(problem).reason
        return
    for config in algorithm.configs(problem):
        ws = algorithm.workspace_bytes(problem, config)
        algorithm.run(Sized(1), Sized(1), Sized(1), Sized(ws) if ws else None, problem,
                      config)
    assert LAUNCHES or gemms  # a pointwise im2col_gemm may be its GEMMs alone


@pytest.mark.parametrize("shape", ["groups_over_grid_yz", "one_pixel_many_planes"])
def test_fft_launches_stay_within_device_limits(monkeypatch: pytest.MonkeyPatch,
                                                shape: str) -> None:
    kw = BIG_PROBLEMS.get(shape) or dict(n=3000, c=30, h=1, w=1, k=3, r=1, s=1)
    monkeypatch.setattr(fft, "get_kernel", checked_launch)
    monkeypatch.setattr(_cublas, "_gemm", checked_gemm)
    monkeypatch.setattr(fft, "_plan", _NullPlan)
    LAUNCHES.clear()
    problem = ConvProblem(**kw)
    algorithm = ALGOS["fft"]
    if not algorithm.supports(problem):
        assert algorithm.supports(problem).reason
        return
    ws = algorithm.workspace_bytes(problem, "default")
    algorithm.run(Sized(1), Sized(1), Sized(1), dev(np.zeros(ws, np.uint8)), problem,
                  "default")
    assert LAUNCHES


def test_depthwise_limits_say_why() -> None:
    algorithm = ALGOS["depthwise"]
    assert "groups == c" in algorithm.supports(ConvProblem(**SHAPES["odd"])).reason
    # No tile's footprint fits 48 KB of shared memory: the flat instances (no shared memory)
    # serve it, except the one compiled for unit stride and dilation along the width.
    huge = ConvProblem(**BIG_PROBLEMS["depthwise_huge_dilation"])
    assert algorithm.supports(huge)
    assert algorithm.configs(huge) == ("flat_q1", "flat_q1_3x3")
    assert algorithm.supports(ConvProblem(**BIG_PROBLEMS["depthwise_near_int32"]))
    over = ConvProblem(**{**BIG_PROBLEMS["depthwise_near_int32"], "h": 256, "w": 256})
    assert "2**31" in algorithm.supports(over).reason


def test_depthwise_offers_compiled_in_filter_sizes_only_for_them() -> None:
    configs = {(r, s): set(ALGOS["depthwise"].configs(
        ConvProblem(n=1, c=4, h=9, w=9, k=4, r=r, s=s, pad=1, groups=4)))
        for r, s in ((3, 3), (5, 5), (3, 1))}
    compiled_3x3 = {"32x16p2_3x3", "16x16p2_3x3", "flat_q1_3x3", "flat_q4_3x3_s1"}
    assert compiled_3x3 <= configs[(3, 3)]
    assert configs[(5, 5)] == configs[(3, 1)] == set(configs[(3, 3)]) - compiled_3x3
