"""backward_data at stride > 1 as one dense forward problem over the stride's phases.

Along one axis (stride S, filter R, padding P, dilation 1), dx[i] only receives the taps t
with t = i + P (mod S); t0 = (i + P) mod S is its phase. Writing i = q*S + t0 - P,
    dx[i] = sum_j dy[q - j] * w[t0 + S*j],   j < J = ceil(R / S),
a stride-1 cross-correlation of dy (framed by zeros) with the flipped sub-filter
wf[j'] = w[t0 + S*(J-1-j')] (0 where that tap is past R). Phases t0 >= R have no taps
(dx is 0 there), so A = min(S, R) phases are active. Stacking the active phases of both
axes as output channels makes one forward problem:
    x:  dy framed to (n, k, Q_h + J_h - 1, Q_w + J_w - 1), dy[p] at p - q0 + J - 1;
    w:  (groups, A_h, A_w, c/groups, k/groups, J_h, J_w), the phases' flipped sub-filters;
    y:  (n, groups, A_h, A_w, c/groups, Q_h, Q_w), output o of phase t0 being dx at
        i = (q0 + o)*S + t0 - P,
with q0 the smallest q any active phase needs and Q the count of q up to the largest.
Against spreading dy with stride-1 zeros (by_forward.py's general backward_data), this does
not multiply by the inserted zeros: S_h*S_w*R_h*R_w / (A_h*A_w*J_h*J_w) times fewer
products, 2.25x on a 3x3 stride-2 layer and 4x on a 1x1 stride-2 one. Used for dilation 1
and any stride > 1; with a dilation D > 1 a phase's taps are not every S-th one (t*D = i + P
mod S), so those problems keep the spread.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from algorithms.problem import ConvProblem


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Axis:
    """One spatial axis of the decomposition."""

    stride: int
    taps: int  # R, the filter's size
    pad: int
    size: int  # dx's size along the axis
    active: int  # A = min(stride, taps): phases with at least one tap
    sub_taps: int  # J = ceil(taps / stride)
    first: int  # q0
    count: int  # Q

    @property
    def framed(self) -> int:
        """The framed dy's size along the axis: Q + J - 1."""
        return self.count + self.sub_taps - 1

    @property
    def offset(self) -> int:
        """Where dy's first row lands in the framed dy: J - 1 - q0."""
        return self.sub_taps - 1 - self.first


def axis(stride: int, taps: int, pad: int, size: int) -> Axis:
    """The decomposition along one axis."""
    active = min(stride, taps)
    # Phase t0 needs q in [ceil((P - t0)/S), ceil((size + P - t0)/S)).
    first = _ceil_div(pad - active + 1, stride)
    last = _ceil_div(size + pad, stride)
    return Axis(stride, taps, pad, size, active, _ceil_div(taps, stride), first, last - first)


@dataclass(frozen=True)
class Phases:
    """The phase decomposition of one backward_data problem."""

    groups: int
    kg: int  # output channels of the forward problem per group (dy's channels)
    cg: int  # input channels per group (dx's channels)
    h: Axis
    w: Axis

    @property
    def active(self) -> int:
        """Active phases of both axes: A_h * A_w."""
        return self.h.active * self.w.active

    @property
    def filter_shape(self) -> tuple[int, ...]:
        """The stacked sub-filters: (groups, A_h, A_w, c/groups, k/groups, J_h, J_w)."""
        return (self.groups, self.h.active, self.w.active, self.cg, self.kg,
                self.h.sub_taps, self.w.sub_taps)


@dataclass(frozen=True)
class PhaseFilter:
    """The copy of w into the phases' stacked, flipped sub-filters (Phases.filter_shape)."""

    phases: Phases


@dataclass(frozen=True)
class PhaseShuffle:
    """The copy of the phases' outputs into dx, interleaved (0 where no phase has a tap)."""

    phases: Phases


@functools.lru_cache(maxsize=4096)
def phases(problem: ConvProblem) -> Phases | None:
    """The decomposition of a backward_data problem with a stride > 1 and dilation 1; None
    for any other problem (by_forward.py spreads dy with zeros for those), and where every
    dx position along an axis falls in a phase without taps (dx is all zeros, and there is
    no forward problem to run: a 1x1 stride-2 filter over one padded pixel)."""
    if (problem.direction != "backward_data" or problem.stride == (1, 1)
            or problem.dilation != (1, 1)):
        return None
    g = problem.groups
    found = Phases(g, problem.k // g, problem.c // g,
                   axis(problem.stride[0], problem.r, problem.pad[0], problem.h),
                   axis(problem.stride[1], problem.s, problem.pad[1], problem.w))
    return found if found.h.count > 0 and found.w.count > 0 else None


def forward_of(problem: ConvProblem, ph: Phases) -> ConvProblem:
    """The dense forward problem: framed dy by the stacked sub-filters, stride 1."""
    return ConvProblem(
        n=problem.n, c=problem.k, h=ph.h.framed, w=ph.w.framed,
        k=ph.active * problem.c, r=ph.h.sub_taps, s=ph.w.sub_taps, groups=ph.groups,
        dtype=problem.dtype, math=problem.math,
    )
