"""implicit_gemm_tc on the CPU: not available; the algorithm is GPU-only.

It exists to use tensor cores (mma.sync, see algorithms/cuda/implicit_gemm_tc.py); on the
host the same GEMM is `implicit_gemm`. Registered so every name has a CPU entry whose
`supports()` says why it cannot run here.
"""

from __future__ import annotations

from typing import Any, ClassVar

from algorithms.base import Support, unsupported
from algorithms.cpu._common import CpuAlgorithm
from algorithms.problem import ConvProblem

REASON = ("implicit_gemm_tc is GPU-only: it runs on tensor cores (mma.sync, compute "
          "capability 8.0+); on the CPU use implicit_gemm")


class ImplicitGemmTcConv(CpuAlgorithm):
    """The CPU placeholder of the tensor-core implicit GEMM: supports nothing."""

    name: ClassVar[str] = "implicit_gemm_tc"

    def _limits(self, problem: ConvProblem) -> Support:
        """Nothing: tensor cores exist only on the GPU."""
        return unsupported(REASON)

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        raise RuntimeError(REASON)
