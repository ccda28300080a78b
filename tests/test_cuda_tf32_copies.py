"""im2col_gemm under math "tf32", checked on the host over stand-in kernels and GEMMs: every
GEMM computes in TF32 on operand copies our kernels rounded (and none does under "fp32"),
with the leading roundings in one launch.
"""

from __future__ import annotations

from typing import Any

import pytest

from algorithms.base import AlgorithmBase
from algorithms.cuda import KERNEL_MODULES, _cublas, _loader, im2col_gemm
from algorithms.cuda._im2col_program import ROUND_TF32_PAIR
from algorithms.problem import ConvProblem
from tests.cuda_emu.cases import ALGORITHMS as ALGOS
from tests.cuda_kernel_standins import LAUNCHES, Sized, checked_gemm, checked_launch

#: im2col_gemm's kernels that store TF32-rounded GEMM operands.
TF32_WRITERS = {*(im2col_gemm.name_expression("float32", inner, tf32=True)
                  for inner in (False, True)),
                im2col_gemm.images_inner_expression("float32", tf32=True), im2col_gemm.ROUND_TF32,
                ROUND_TF32_PAIR}


@pytest.mark.parametrize("geometry", [dict(r=3, s=2, pad=1, stride=2), dict(r=1, s=1)])
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_filter"])
@pytest.mark.parametrize("math", ["fp32", "tf32"])
def test_im2col_gemm_reads_tf32_only_from_rounded_copies(monkeypatch: pytest.MonkeyPatch,
                                                         math: str, direction: str,
                                                         geometry: dict[str, Any]) -> None:
    """Under math "tf32" every GEMM computes in TF32 on operands our kernels rounded (cuBLAS
    would truncate the caller's); under "fp32" none does. `work` counts the launches. A
    pointwise layer (the second geometry) reads x itself only under "fp32"."""
    gemms: list[bool] = []

    def gemm(*args: Any) -> None:
        checked_gemm(*args)
        gemms.append(args[-1])

    monkeypatch.setattr(_loader, "get_kernel", checked_launch)
    for module in KERNEL_MODULES:
        monkeypatch.setattr(module, "get_kernel", checked_launch)
    monkeypatch.setattr(_cublas, "_gemm", gemm)
    algorithm = ALGOS["im2col_gemm"]
    assert isinstance(algorithm, AlgorithmBase)  # `work` is AlgorithmBase's
    problem = ConvProblem(n=5, c=6, h=9, w=8, k=4, **geometry, direction=direction, math=math)
    for config in algorithm.configs(problem):
        LAUNCHES.clear()
        gemms.clear()
        ws = algorithm.workspace_bytes(problem, config)
        algorithm.run(Sized(1), Sized(1), Sized(1), Sized(ws) if ws else None, problem,
                      config)
        kernels = [launch["kernel"] for launch in LAUNCHES]
        assert gemms and set(gemms) == {math == "tf32"}, config
        # The kernels that write a GEMM operand: rounding instances exactly under "tf32".
        writers = [k for k in kernels if not k.startswith("col2im")]
        if config == im2col_gemm.MERGED and (direction == "forward" or problem.pointwise):
            # Its last launch copies the GEMM's output to y (or, pointwise, the column
            # matrix to dx: col2im's gather is that copy there), not an operand.
            assert writers[-1] == im2col_gemm.images_inner_expression("float32"), kernels
            writers = writers[:-1]
        assert set(map(TF32_WRITERS.__contains__, writers)) <= {math == "tf32"}, kernels
        if config == im2col_gemm.MERGED and problem.pointwise:
            # Its column matrix is x (dx) with images and channels swapped: plain copies,
            # not im2col's (col2im's) per-tap arithmetic.
            assert not [k for k in kernels if k.startswith(("im2col", "col2im"))], kernels
        rounds = [k for k in kernels if k in (im2col_gemm.ROUND_TF32, ROUND_TF32_PAIR)]
        assert bool(rounds) == (math == "tf32" and direction != "backward_filter")
        assert algorithm.work(problem, config).launches == len(kernels) + len(gemms), config
        # Regression: w and the first chunk's operand were rounded by two launches, one
        # more host-bound launch per run; the two leading roundings are one launch now.
        # (Both are copies where the layer is pointwise forward, and in backward_data.)
        paired = rounds and config != im2col_gemm.MERGED and (
            direction == "backward_data" or problem.pointwise)
        assert (kernels[:1] == [ROUND_TF32_PAIR]) == bool(paired), kernels
        assert kernels[1:].count(ROUND_TF32_PAIR) == 0
