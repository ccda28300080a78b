"""Problems too large for a device's kernels, run in batch chunks.

Our CUDA kernels index in 32 bits, so every GPU algorithm refuses an operand of 2**31
elements or more (`Runtime.max_operand_elements`). PyTorch runs such a convolution in batch
chunks (its cuDNN path splits the batch so that each part indexes in 32 bits); so does a
plan here. The images are split into the fewest chunks of near-equal size whose operands
fit, at most two sizes apart by one image (q and q + 1), and each size is tuned, stored and
planned as a problem of its own: what is measured is what runs. The chunks run one after
another on the caller's stream, on views of the caller's arrays; forward and backward_data
write their chunk of the output, backward_filter sums the chunks' filter gradients (the
first straight into the output, each other through one filter-sized buffer per call).

`find` and `tune` still answer for the whole problem as it is (each algorithm refusing it,
with the reason): only a plan, and so `convolve` and the torch module, runs it in chunks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from algorithms.problem import ConvProblem
from algorithms.runtime import Runtime, is_torch
from tuner.plans import Plan

#: Which of a direction's operands (a, b, out) is the filter, the one without a batch.
FILTER_OPERAND = {"forward": 1, "backward_data": 1, "backward_filter": 2}


def chunk_sizes(problem: ConvProblem, max_elements: int | None) -> tuple[int, ...] | None:
    """The batch sizes, in order, that split `problem` so each operand has at most
    `max_elements` elements; None where it need not or cannot be split (it fits, there is no
    limit, or one image alone, or the filter, is already too large)."""
    if max_elements is None:
        return None
    elements = [math.prod(shape) for shape in problem.operand_shapes]
    if max(elements) <= max_elements:
        return None
    # The filter (w, or dw going backward_filter) has no batch: no split makes it smaller.
    filter_at = FILTER_OPERAND[problem.direction]
    per_image = max(count // problem.n for at, count in enumerate(elements) if at != filter_at)
    if elements[filter_at] > max_elements or per_image > max_elements:
        return None
    largest = max_elements // per_image
    count = -(-problem.n // largest)  # the fewest chunks of at most `largest` images
    size, extra = divmod(problem.n, count)
    return (size + 1,) * extra + (size,) * (count - extra)


class ChunkedPlan(Plan):
    """A plan of a problem too large for the device's kernels: one plan per batch chunk,
    called like any plan (`plan(x, w, out=None)`), on views of the caller's arrays.

    `algorithm` and `config` are the first chunk's; `chunks` lists each chunk's
    (first image, end, plan)."""

    def __init__(self, problem: ConvProblem, device: str, runtime: Runtime,
                 chunks: Sequence[tuple[int, int, Plan]]) -> None:
        # Not Plan.__init__: this plan runs nothing of its own; its chunks' plans do.
        first = chunks[0][2]
        self.problem = problem
        self.device = device
        self.choice = first.choice
        self.algorithm = first.algorithm
        self.config = first.config
        self.implementation = first.implementation
        self.workspace_bytes = max(plan.workspace_bytes for _, _, plan in chunks)
        self.chunks = tuple(chunks)
        self._runtime = runtime
        self._shapes = problem.operand_shapes
        self._names = problem.operand_names

    def __repr__(self) -> str:
        parts = ", ".join(f"{end - start} images: {plan.algorithm}/{plan.config}"
                          for start, end, plan in self.chunks)
        return (f"ChunkedPlan({self.problem.describe()} on {self.device} in "
                f"{len(self.chunks)} chunks: {parts})")

    def workspace(self, lane: Hashable = None) -> Any:
        """The first chunk's plan's workspace for `lane` (each chunk's plan holds its own)."""
        return self.chunks[0][2].workspace(lane)

    def output(self, x: Any, out: Any) -> Any:
        """`out`; else a new whole result beside a torch `x`; else None (enqueue allocates)."""
        if out is not None:
            return out
        if is_torch(x):
            return x.new_empty(*self._shapes[2])
        return None

    def enqueue(self, x: Any, w: Any, out: Any = None) -> Any:
        """Each chunk through its plan, in order on the caller's stream; returns `out`, or
        without it a new backend array."""
        # Checked whole here: a chunk's plan would name the chunk's shape, not the caller's.
        names = (*self._names[:2], "out")
        for operand, name, shape in zip((x, w, out), names, self._shapes, strict=True):
            held = getattr(operand, "shape", None)
            if held is not None and tuple(held) != shape:
                raise ValueError(f"{name} has shape {tuple(held)}; this plan needs {shape}")
        if out is None:
            with self._runtime.caller_stream(x):
                out = self._runtime.empty(self._shapes[2], self.problem.dtype)
        if self.problem.direction == "backward_filter":
            self._sum_chunks(x, w, out)
        else:  # a and the output are batched, b (the filter) is whole
            for start, end, plan in self.chunks:
                plan.enqueue(x[start:end], w, out[start:end])
        return out

    def _sum_chunks(self, x: Any, dy: Any, dw: Any) -> None:
        """dw = the sum over chunks of each chunk's dw (x and dy both batched)."""
        (start, end, plan), *rest = self.chunks
        plan.enqueue(x[start:end], dy[start:end], dw)
        # The caller's kind, so that the sum runs where the caller ordered dw.
        part = dw.clone() if is_torch(dw) else dw.copy()
        for start, end, plan in rest:
            plan.enqueue(x[start:end], dy[start:end], part)
            with self._runtime.caller_stream(x):
                dw += part


def chunked_plan(problem: ConvProblem, device: str, runtime: Runtime, sizes: Sequence[int],
                 plan_of: Callable[[ConvProblem], Plan]) -> ChunkedPlan:
    """A ChunkedPlan of `problem` in chunks of `sizes` images, each planned by `plan_of`
    (one call per distinct size)."""
    plans: dict[int, Plan] = {}
    chunks = []
    start = 0
    for size in sizes:
        if size not in plans:
            plans[size] = plan_of(dataclasses.replace(problem, n=size))
        chunks.append((start, start + size, plans[size]))
        start += size
    return ChunkedPlan(problem, device, runtime, chunks)
