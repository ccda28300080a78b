"""The GPU side of algorithms/by_forward.py: its rearranging copies as one kernel
(kernels/rearrange.cu through _rearrange.remap), enqueued on the current stream, allocating
nothing.

Each copy reads and writes whole tensors of 32-bit-indexable size: `_limits` refuses a
problem whose rearranged operands have 2**31 elements or more.
"""

from __future__ import annotations

from math import prod
from typing import Any

from algorithms.base import Support, unsupported
from algorithms.by_forward import ByForward, Remap, copies, forward_problem
from algorithms.cuda import _rearrange
from algorithms.cuda._base import CudaAlgorithm
from algorithms.cuda._loader import tensors_fit_int32
from algorithms.phases import Phases
from algorithms.problem import ConvProblem


class CudaByForward(ByForward, CudaAlgorithm):
    """Both backward directions of the CUDA forward algorithm after this class in the MRO."""

    def _limits(self, problem: ConvProblem) -> Support:
        """The forward algorithm's limits, and 32-bit indexing of every rearranged tensor."""
        found = super()._limits(problem)  # first: it refuses an invalid rearranged problem
        if found and problem.direction != "forward":
            # The phase copies touch only the problem's and the forward problem's tensors.
            copied = [prod(shape) for copy in copies(problem) if isinstance(copy, Remap)
                      for shape in (copy.src_shape, copy.dst_shape)]
            copied += [prod(shape) for shape in forward_problem(problem).operand_shapes]
            if not tensors_fit_int32(problem, *copied):
                return unsupported(f"a rearranged {problem.direction} operand has "
                                   "2**31 elements or more (32-bit indexing)")
        return found

    def _remap(self, src: Any, dst: Any, remap: Remap, problem: ConvProblem) -> None:
        """One launch of the copy kernel over dst."""
        _rearrange.remap(src, dst, remap, problem.itemsize)

    def _phase_filter(self, w: Any, dst: Any, found: Phases, problem: ConvProblem) -> None:
        """One launch of the sub-filter copy over dst."""
        _rearrange.phase_filter(w, dst, found, problem)

    def _phase_shuffle(self, z: Any, dx: Any, found: Phases, problem: ConvProblem) -> None:
        """One launch of the interleaving copy over dx."""
        _rearrange.phase_shuffle(z, dx, found, problem)
