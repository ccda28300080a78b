"""The CPU side of algorithms/by_forward.py: its rearranging copies as NumPy slicing."""

from __future__ import annotations

from typing import Any

from algorithms.by_forward import ByForward, Remap
from algorithms.cpu._common import CpuAlgorithm
from algorithms.problem import ConvProblem


class CpuByForward(ByForward, CpuAlgorithm):
    """Both backward directions of the CPU forward algorithm after this class in the MRO."""

    def _remap(self, src: Any, dst: Any, remap: Remap, problem: ConvProblem) -> None:
        """dst = the remapped src (see Remap): zeros, then one strided copy of what lands."""
        source = src.reshape(remap.src_shape)
        target = dst.reshape(remap.dst_shape)
        if remap.flip:
            target = target[..., ::-1, ::-1]
        target.fill(0)
        rows = _placed(remap.src_hw[0], remap.offset[0], remap.step[0], remap.dst_hw[0])
        cols = _placed(remap.src_hw[1], remap.offset[1], remap.step[1], remap.dst_hw[1])
        target[..., rows[0], cols[0]] = source[..., rows[1], cols[1]].transpose(0, 3, 2, 1, 4, 5)


def _placed(count: int, first: int, step: int, size: int) -> tuple[slice, slice]:
    """(destination, source) slices of the `count` positions first + i*step inside [0, size)."""
    lo = max(0, -(first // step))  # the first i with first + i*step >= 0
    hi = max(lo, min(count, (size - 1 - first) // step + 1))
    return slice(first + lo * step, first + hi * step, step), slice(lo, hi)
