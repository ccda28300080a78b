"""The GPU-only algorithms' CPU entries: registered so that every name has one, each
`supports()` saying why it cannot run on the host.

implicit_gemm_tc and implicit_gemm_wgmma exist to use tensor cores (algorithms/cuda); on the
host the same GEMM is `implicit_gemm`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from algorithms.base import Support, unsupported
from algorithms.cpu._common import CpuAlgorithm
from algorithms.problem import ConvProblem


class GpuOnly(CpuAlgorithm):
    """A CPU entry that supports nothing, for the reason its subclass gives."""

    reason: ClassVar[str]

    def _limits(self, problem: ConvProblem) -> Support:
        """Nothing: the algorithm needs a GPU's tensor cores."""
        return unsupported(self.reason)

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        raise RuntimeError(self.reason)


class ImplicitGemmTcConv(GpuOnly):
    """The CPU placeholder of the tensor-core implicit GEMM."""

    name: ClassVar[str] = "implicit_gemm_tc"
    reason: ClassVar[str] = ("implicit_gemm_tc is GPU-only: it runs on tensor cores (mma.sync, "
                             "compute capability 8.0+); on the CPU use implicit_gemm")


class ImplicitGemmWgmmaConv(GpuOnly):
    """The CPU placeholder of the Hopper (wgmma) implicit GEMM."""

    name: ClassVar[str] = "implicit_gemm_wgmma"
    reason: ClassVar[str] = ("implicit_gemm_wgmma is GPU-only: it runs on Hopper's warpgroup "
                             "tensor cores (wgmma, compute capability 9.0); on the CPU use "
                             "implicit_gemm")
