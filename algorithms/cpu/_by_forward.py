"""The CPU side of algorithms/by_forward.py: its rearranging copies as NumPy slicing."""

from __future__ import annotations

from typing import Any

from algorithms.by_forward import ByForward, Remap
from algorithms.cpu._common import CpuAlgorithm
from algorithms.phases import Axis, Phases
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

    def _phase_filter(self, w: Any, dst: Any, found: Phases, problem: ConvProblem) -> None:
        """dst[g][th][tw][c][k][j][l] = w[g][k][c][th + S_h*(J_h-1-j)][tw + S_w*(J_w-1-l)]."""
        source = w.reshape(found.groups, found.kg, found.cg, problem.r, problem.s)
        target = dst.reshape(found.filter_shape)
        target.fill(0)
        for th in range(found.h.active):
            for tw in range(found.w.active):
                # Taps th, th + S, ... of the phase, flipped: sub-tap J-1 is tap th.
                rows, cols = _sub_taps(found.h, th), _sub_taps(found.w, tw)
                target[:, th, tw, :, :, rows[0], cols[0]] = \
                    source[:, :, :, rows[1], cols[1]].transpose(0, 2, 1, 3, 4)

    def _phase_shuffle(self, z: Any, dx: Any, found: Phases, problem: ConvProblem) -> None:
        """dx at (q0 + o)*S + t0 - P = phase t0's output o; 0 at phases without taps."""
        source = z.reshape(problem.n, found.groups, found.h.active, found.w.active, found.cg,
                           found.h.count, found.w.count)
        target = dx.reshape(problem.n, found.groups, found.cg, problem.h, problem.w)
        target.fill(0)
        for th in range(found.h.active):
            for tw in range(found.w.active):
                rows, cols = _phase_positions(found.h, th), _phase_positions(found.w, tw)
                target[..., rows[0], cols[0]] = source[:, :, th, tw, :, rows[1], cols[1]]


def _sub_taps(axis: Axis, t0: int) -> tuple[slice, slice]:
    """(sub-filter, filter) slices of phase t0's taps t0, t0 + S, ... < R, flipped: tap
    t0 + S*j is sub-tap J-1-j."""
    count = -(-(axis.taps - t0) // axis.stride)
    last = axis.sub_taps - 1
    flipped = slice(last, last - count if last - count >= 0 else None, -1)
    return flipped, slice(t0, t0 + axis.stride * count, axis.stride)


def _phase_positions(axis: Axis, t0: int) -> tuple[slice, slice]:
    """(dx, phase output) slices: dx positions i of phase t0 in [0, size), every S-th, and
    their outputs o = (i + P - t0) / S - q0."""
    first = (t0 - axis.pad) % axis.stride  # the first i >= 0 with (i + P) % S == t0
    count = max(0, -(-(axis.size - first) // axis.stride))
    o = (first + axis.pad - t0) // axis.stride - axis.first
    return slice(first, first + axis.stride * count, axis.stride), slice(o, o + count)


def _placed(count: int, first: int, step: int, size: int) -> tuple[slice, slice]:
    """(destination, source) slices of the `count` positions first + i*step inside [0, size)."""
    lo = max(0, -(first // step))  # the first i with first + i*step >= 0
    hi = max(lo, min(count, (size - 1 - first) // step + 1))
    return slice(first + lo * step, first + hi * step, step), slice(lo, hi)
