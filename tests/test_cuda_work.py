"""An algorithm's `work`, what the cost model reads, checked on the host against what its run
launches over stand-in kernels: the launches counted, the blocks of its own first kernel's
grid, and the share of its tiles the output fills.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from algorithms.base import AlgorithmBase
from algorithms.cuda import KERNEL_MODULES
from algorithms.problem import ConvProblem
from tests.cuda_emu.cases import ALGORITHMS as ALGOS
from tests.cuda_kernel_standins import LAUNCHES, Sized, checked_launch
from tests.cuda_shapes import SHAPES


@pytest.mark.parametrize(("name", "direction"), [
    *itertools.product(["direct", "implicit_gemm", "implicit_gemm_tc"],
                       ["forward", "backward_data", "backward_filter"]),
    ("depthwise", "forward"),
])
def test_work_describes_what_run_launches(monkeypatch: pytest.MonkeyPatch, name: str,
                                          direction: str) -> None:
    """An algorithm's `work` (what the cost model reads) counts the launches `run` makes,
    and its blocks are the grid of the algorithm's own first kernel."""
    for module in KERNEL_MODULES:
        monkeypatch.setattr(module, "get_kernel", checked_launch)
    algorithm = ALGOS[name]
    assert isinstance(algorithm, AlgorithmBase)  # `work` is AlgorithmBase's, not the protocol's
    own_file = next(m.KERNEL_FILE for m in KERNEL_MODULES
                    if m.__name__.endswith(f".{name}"))
    checked = 0
    for shape in ("odd", "groups4", "stride_pair", "depthwise", "r50_res2_1x1", "r50_res5_1x1a",
                  "single_pixel"):
        problem = ConvProblem(**SHAPES[shape], direction=direction)
        if not algorithm.supports(problem):
            continue
        for config in algorithm.configs(problem):
            LAUNCHES.clear()
            ws = algorithm.workspace_bytes(problem, config)
            algorithm.run(Sized(1), Sized(1), Sized(1), Sized(ws) if ws else None,
                          problem, config)
            work = algorithm.work(problem, config)
            assert work.launches == len(LAUNCHES), (shape, config)
            main = next(launch for launch in LAUNCHES if launch["file"] == own_file)
            assert work.blocks == int(np.prod(main["grid"])), (shape, config)
            assert 0 < work.fill <= 1
            checked += 1
    assert checked


def test_work_fill_is_whole_only_when_tiles_divide_the_output() -> None:
    """fill is 1 when the tiles cover the output exactly, and the covered share otherwise."""
    tc, direct = ALGOS["implicit_gemm_tc"], ALGOS["direct"]
    assert isinstance(tc, AlgorithmBase) and isinstance(direct, AlgorithmBase)
    exact = ConvProblem(n=2, c=16, h=8, w=8, k=64, r=1, s=1)  # 128 pixels, 64 channels
    assert tc.work(exact, "64x128").fill == 1.0
    ragged = ConvProblem(n=1, c=16, h=10, w=10, k=48, r=1, s=1)  # 100 pixels, 48 channels
    assert tc.work(ragged, "64x128").fill == pytest.approx(100 * 48 / (128 * 64))
    assert direct.work(ConvProblem(n=1, c=4, h=16, w=16, k=8, r=3, s=3, pad=1),
                       "16x16k8").fill == 1.0
    assert direct.work(ConvProblem(n=1, c=4, h=17, w=16, k=8, r=3, s=3, pad=1),
                       "16x16k8").fill == pytest.approx(17 / 32)
