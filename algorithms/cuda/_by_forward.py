"""The GPU side of algorithms/by_forward.py: its rearranging copies as one kernel
(kernels/rearrange.cu), enqueued on the current stream, allocating nothing.

Each copy reads and writes whole tensors of 32-bit-indexable size: `_limits` refuses a
problem whose rearranged operands have 2**31 elements or more.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from algorithms.base import Support, unsupported
from algorithms.by_forward import ByForward, Remap, remaps
from algorithms.cuda._base import CudaAlgorithm
from algorithms.cuda._loader import (
    fastdiv_args,
    get_kernel,
    grid_stride_blocks,
    tensors_fit_int32,
)
from algorithms.problem import ConvProblem

KERNEL_FILE = "rearrange.cu"

_THREADS = 256


#: Element size in bytes -> the unsigned type the copy kernel moves (bits, not values).
_BITS_TYPES: dict[int, str] = {2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}


def name_expression(itemsize: int) -> str:
    """The copy kernel's template instance for an element size."""
    return f"remap<{_BITS_TYPES[itemsize]}>"


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for."""
    return tuple(name_expression(size) for size in _BITS_TYPES)


def _elements(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


class CudaByForward(ByForward, CudaAlgorithm):
    """Both backward directions of the CUDA forward algorithm after this class in the MRO."""

    def _limits(self, problem: ConvProblem) -> Support:
        """The forward algorithm's limits, and 32-bit indexing of every rearranged tensor."""
        if problem.direction != "forward":
            copied = [_elements(shape) for remap in remaps(problem) if remap is not None
                      for shape in (remap.src_shape, remap.dst_shape)]
            if not tensors_fit_int32(problem, *copied):
                return unsupported(f"a rearranged {problem.direction} operand has "
                                   "2**31 elements or more (32-bit indexing)")
        return super()._limits(problem)

    def _remap(self, src: Any, dst: Any, remap: Remap, problem: ConvProblem) -> None:
        """One launch of the copy kernel over dst."""
        total = _elements(remap.dst_shape)
        (sh, sw), (dh, dw) = remap.src_hw, remap.dst_hw
        kernel = get_kernel(KERNEL_FILE, name_expression(problem.itemsize))
        kernel((grid_stride_blocks(total, _THREADS),), (_THREADS,),
               (src, dst, np.int32(remap.a), np.int32(remap.b), np.int32(sh), np.int32(sw),
                np.int32(dh), np.int32(dw), np.int32(remap.offset[0]),
                np.int32(remap.offset[1]), np.int32(remap.step[0]), np.int32(remap.step[1]),
                np.int32(remap.flip), np.int32(total),
                *fastdiv_args(dw, dh, remap.a, remap.b)))
