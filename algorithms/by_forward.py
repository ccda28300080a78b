"""Backward directions computed by a forward algorithm on a rearranged problem (any backend).

Both gradients of a cross-correlation are cross-correlations themselves:

- backward_data: dx = (dy with stride-1 zeros inserted, framed by (r-1)*dilation rows and
  columns of zeros) cross-correlated, stride 1 and the same dilation, with the filter
  flipped in (r, s) and transposed within each group (k <-> c/groups). With a stride > 1
  and dilation 1, algorithms/phases.py's decomposition instead: no inserted zeros, the
  stride's phases as output channels, then one copy interleaving them into dx.
- backward_filter: dw^T = x^T cross-correlated with dy^T as the filter (out_h x out_w
  taps), stride = the dilation and dilation = the stride, in the same groups. x^T is x with
  its batch and channels-within-a-group swapped, (c/groups, groups * n, H', W'), padded and
  cropped to H' = (r-1)*dilation + (out-1)*stride + 1: group gi's input channels are the n
  images of its channels, so one grouped forward call serves every group. The result
  (c/groups, k, r, s) is dw transposed.

The rearranged operands are exact copies (no arithmetic), so the error is the forward
algorithm's on the rearranged problem. Every copy is one `Remap`: an axis swap of a
(groups, a, middle, b, height, width) tensor with the spatial plane shifted, spread by a
step, zero-framed or flipped, or one of the phases' two copies (`PhaseFilter`,
`PhaseShuffle`); `copies(problem)` lists them. `ByForward` wraps a forward-only algorithm:
the subclass lists it after `ByForward` in its bases, and every method maps a backward
problem to `forward_problem(problem)` before calling the forward implementation; a backend
supplies the copies (NumPy slicing on the CPU, one copy kernel each on the GPU).

Workspace (E: the storage element size; F: the forward algorithm's workspace for the
rearranged problem):
    backward_data:   align(n*k*(h+(r-1)*dh)*(w+(s-1)*dw)*E) + align(c*(k/g)*r*s*E) + F
    ... by phases:   align(n*k*(Q_h+J_h-1)*(Q_w+J_w-1)*E) + align(A*c*(k/g)*J_h*J_w*E)
                     + align(n*A*c*Q_h*Q_w*E) + F (A, J, Q: algorithms/phases.py)
    backward_filter: align(c*n*H'*W'*E) + align(k*n*out_h*out_w*E)
                     + align(c*(k/g)*r*s*E) + F, with H' = (r-1)*dh + (out_h-1)*sh + 1
(until 2026-11-25 backward_filter ran one forward call per group, and F was one group's;
strided backward_data spread dy with zeros whatever the dilation)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from algorithms.base import AlgorithmBase, Support, Work, WorkspaceLayout, unsupported
from algorithms.phases import PhaseFilter, Phases, PhaseShuffle, forward_of, phases
from algorithms.problem import DIRECTIONS, ConvProblem


# The three functions below are memoised: `run` asks each on every call of a plan.
@functools.lru_cache(maxsize=4096)
def forward_problem(problem: ConvProblem) -> ConvProblem:
    """The forward problem whose output is (a rearrangement of) the backward result."""
    if problem.direction == "forward":
        return problem
    found = phases(problem)
    if found is not None:
        return forward_of(problem, found)
    (dh, dw), (sh, sw) = problem.dilation, problem.stride
    out_h, out_w = problem.out_hw
    g = problem.groups
    if problem.direction == "backward_data":
        return ConvProblem(
            n=problem.n, c=problem.k, h=problem.h + (problem.r - 1) * dh,
            w=problem.w + (problem.s - 1) * dw, k=problem.c, r=problem.r, s=problem.s,
            dilation=problem.dilation, groups=g, dtype=problem.dtype, math=problem.math,
        )
    # backward_filter: batch c/g, n channels per group, k out_h x out_w filters.
    return ConvProblem(
        n=problem.c // g, c=g * problem.n, h=(problem.r - 1) * dh + (out_h - 1) * sh + 1,
        w=(problem.s - 1) * dw + (out_w - 1) * sw + 1, k=problem.k, r=out_h, s=out_w,
        stride=problem.dilation, dilation=problem.stride, groups=g, dtype=problem.dtype,
        math=problem.math,
    )


@dataclass(frozen=True)
class Remap:
    """dst[g][b][m][a][i][j] = src[g][a][m][b][y][x] over a (groups, a, middle, b, src_h,
    src_w) source: a and b swap around the middle axis.

    (y, x) is the source position that dst's (i, j) maps to: with `flip`, (i, j) is first
    mirrored to (dst_h-1-i, dst_w-1-j); then y = (i - offset_h) / step_h when that is a
    whole number in [0, src_h), likewise x, and dst is 0 where either is not.
    """

    groups: int
    a: int
    b: int
    src_hw: tuple[int, int]
    dst_hw: tuple[int, int]
    offset: tuple[int, int] = (0, 0)
    step: tuple[int, int] = (1, 1)
    flip: bool = False
    middle: int = 1

    @property
    def src_shape(self) -> tuple[int, ...]:
        """The source viewed as (groups, a, middle, b, src_h, src_w)."""
        return (self.groups, self.a, self.middle, self.b, *self.src_hw)

    @property
    def dst_shape(self) -> tuple[int, ...]:
        """The destination viewed as (groups, b, middle, a, dst_h, dst_w)."""
        return (self.groups, self.b, self.middle, self.a, *self.dst_hw)


#: One rearranging copy: a Remap, or one of the phases' copies.
Copy = Remap | PhaseFilter | PhaseShuffle


@functools.lru_cache(maxsize=4096)
def copies(problem: ConvProblem) -> tuple[Copy, Copy, Copy | None]:
    """The copies into the forward problem's (a, b), and out of its y into the result where
    y is not the result itself (None: the forward run writes the result)."""
    out_hw = problem.out_hw
    inner = forward_problem(problem)
    found = phases(problem)
    if found is not None:  # dy (n, k, P, Q) framed: dy[p] lands at J - 1 - q0 + p
        framed = Remap(1, 1, problem.n * problem.k, out_hw, (inner.h, inner.w),
                       (found.h.offset, found.w.offset))
        return framed, PhaseFilter(found), PhaseShuffle(found)
    g, r, s = problem.groups, problem.r, problem.s
    kg, cg = problem.k // g, problem.c // g
    (dh, dw), (ph, pw) = problem.dilation, problem.pad
    if problem.direction == "backward_data":
        # dy (n, k, P, Q) spread over (n, k, h', w'): dy[p] lands at (r-1)*dh - ph + p*sh.
        spread = Remap(1, 1, problem.n * problem.k, out_hw, (inner.h, inner.w),
                       ((r - 1) * dh - ph, (s - 1) * dw - pw), problem.stride)
        # w (g, kg, cg, r, s) -> (g, cg, kg, r, s), flipped in (r, s).
        flipped = Remap(g, kg, cg, (r, s), (r, s), flip=True)
        return spread, flipped, None
    # x (n, g, cg, h, w) -> (cg, g, n, H', W'), framed by the padding and cropped.
    window = Remap(1, problem.n, cg, (problem.h, problem.w), (inner.h, inner.w), (ph, pw),
                   middle=g)
    dy_t = Remap(1, problem.n, problem.k, out_hw, out_hw)  # (n, k, P, Q) -> (k, n, P, Q)
    dw_back = Remap(1, cg, problem.k, (r, s), (r, s))  # (cg, k, r, s) -> (k, cg, r, s)
    return window, dy_t, dw_back


@functools.lru_cache(maxsize=4096)
def _layout(problem: ConvProblem) -> WorkspaceLayout:
    """The rearranged operands (storage dtype), before the forward algorithm's workspace:
    the forward problem's x and w, and its y where a copy follows (backward_filter's dw
    transposed, the phases' stacked dx)."""
    a_shape, b_shape, out_shape = forward_problem(problem).operand_shapes
    layout = WorkspaceLayout().add("a", a_shape, problem.dtype).add("b", b_shape, problem.dtype)
    if copies(problem)[2] is not None:
        layout.add("out", out_shape, problem.dtype)
    return layout


class ByForward(AlgorithmBase):
    """Serves both backward directions through the forward implementation after it in the MRO.

    A backend's subclass implements `_remap`, `_phase_filter` and `_phase_shuffle`; each copy
    reads and writes whole, contiguous tensors.
    """

    directions: ClassVar[tuple[str, ...]] = DIRECTIONS

    def _remap(self, src: Any, dst: Any, remap: Remap, problem: ConvProblem) -> None:
        raise NotImplementedError

    def _phase_filter(self, w: Any, dst: Any, found: Phases, problem: ConvProblem) -> None:
        """dst = the phases' flipped sub-filters of w (algorithms/phases.py)."""
        raise NotImplementedError

    def _phase_shuffle(self, z: Any, dx: Any, found: Phases, problem: ConvProblem) -> None:
        """dx = the phases' outputs z interleaved (0 where no phase has a tap)."""
        raise NotImplementedError

    def _copy(self, src: Any, dst: Any, copy: Copy, problem: ConvProblem) -> None:
        """One rearranging copy, by the backend's implementation of its kind."""
        if isinstance(copy, Remap):
            self._remap(src, dst, copy, problem)
        elif isinstance(copy, PhaseFilter):
            self._phase_filter(src, dst, copy.phases, problem)
        else:
            self._phase_shuffle(src, dst, copy.phases, problem)

    def _limits(self, problem: ConvProblem) -> Support:
        """The forward algorithm's limits on the rearranged problem."""
        if problem.direction == "forward":
            return super()._limits(problem)
        try:
            inner = forward_problem(problem)
        except ValueError as exc:  # e.g. a rearranged size over the problem limits
            return unsupported(f"the rearranged forward problem is invalid: {exc}")
        found = super().supports(inner)
        if not found:
            return unsupported(f"{problem.direction} as a forward problem: {found.reason}")
        return found

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """The forward algorithm's configs for the rearranged problem."""
        return super().configs(forward_problem(problem))

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """Rearranged operands plus the forward algorithm's workspace."""
        if problem.direction == "forward":
            return super()._workspace(problem, config)
        inner = forward_problem(problem)
        return _layout(problem).nbytes + super()._workspace(inner, config)

    def work(self, problem: ConvProblem, config: str) -> Work:
        """The forward run's work, plus the copies."""
        if problem.direction == "forward":
            return super().work(problem, config)
        inner = super().work(forward_problem(problem), config)
        count = sum(copy is not None for copy in copies(problem))
        return replace(inner, launches=inner.launches + count)

    def _run(
        self, a: Any, b: Any, out: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Rearrange, run forward, and rearrange back where a copy follows."""
        if problem.direction == "forward":
            super()._run(a, b, out, workspace, problem, config)
            return
        inner = forward_problem(problem)
        layout = _layout(problem)
        buf = layout.views(workspace)
        rest = workspace[layout.nbytes:] if self.workspace_bytes(inner, config) else None
        to_a, to_b, back = copies(problem)
        self._copy(a, buf["a"], to_a, problem)
        self._copy(b, buf["b"], to_b, problem)
        if back is None:  # backward_data without phases: the forward result is dx
            super()._run(buf["a"], buf["b"], out, rest, inner, config)
            return
        super()._run(buf["a"], buf["b"], buf["out"], rest, inner, config)
        self._copy(buf["out"], out, back, problem)
