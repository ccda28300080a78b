"""What a run enqueues, worked out once per (problem, config): kernel launches and cuBLAS
calls whose every argument but the operands is fixed, so that a run only binds its arrays.

A program names its operands: "a", "b" and "out" (the run's arrays: x, w, y going forward)
and byte ranges of the workspace ("regions"). A kernel step passes operands whole (the
kernels take plain pointers and offsets of their own); a GEMM step passes their device
addresses plus fixed byte offsets. A region is bound as a uint8 slice of the workspace, not
a typed view (three CuPy calls instead of one), once per run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from algorithms.cuda import _cublas
from algorithms.cuda._launch import POINTER, Address, KernelLaunch, enqueue

#: An operand and a byte offset into it.
Ref = tuple[str, int]


@dataclass(frozen=True)
class Kernel:
    """One launch: the operands its leading pointer parameters take, then fixed scalars."""

    file: str
    name: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    operands: tuple[str, ...]
    scalars: tuple[Any, ...]

    @functools.cached_property
    def launch(self) -> KernelLaunch:
        """The launch, its operands as pointer Slots."""
        return KernelLaunch(self.file, self.name, self.grid, self.block,
                            (*(POINTER for _ in self.operands), *self.scalars))


@dataclass(frozen=True)
class Gemm:
    """One strided-batched cuBLAS GEMM (_cublas.gemm_strided_batched's arguments, with
    operand references in place of the three addresses)."""

    dtype: str
    transa: int
    transb: int
    m: int
    n: int
    k: int
    a: Ref
    lda: int
    stride_a: int
    b: Ref
    ldb: int
    stride_b: int
    c: Ref
    ldc: int
    stride_c: int
    batch: int
    accumulate: bool = False
    float32_c: bool = False
    tf32: bool = False


@dataclass(frozen=True)
class Program:
    """The regions a run binds, and its steps in stream order."""

    regions: tuple[tuple[str, slice], ...]
    steps: tuple[Kernel | Gemm, ...]

    def run(self, get_kernel: Callable[[str, str], Any], a: Any, b: Any, out: Any,
            workspace: Any) -> None:
        """Enqueue every step on the current stream with the run's operands; `get_kernel`
        is the calling module's (tests replace it per module). Regions go to the kernels as
        Addresses, not views (host time on every run)."""
        operands = {"a": a, "b": b, "out": out}
        for name, span in self.regions:
            operands[name] = Address(workspace.data.ptr + span.start)
        for step in self.steps:
            if isinstance(step, Kernel):
                enqueue(step.launch, get_kernel, *map(operands.__getitem__, step.operands))
            else:
                _gemm(step, {name: operands[name].data.ptr for name in
                             (step.a[0], step.b[0], step.c[0])})


def _gemm(step: Gemm, addresses: dict[str, int]) -> None:
    """Enqueue a GEMM step on the operands' `addresses`."""
    _cublas.gemm_strided_batched(
        step.dtype, step.transa, step.transb, step.m, step.n, step.k,
        addresses[step.a[0]] + step.a[1], step.lda, step.stride_a,
        addresses[step.b[0]] + step.b[1], step.ldb, step.stride_b,
        addresses[step.c[0]] + step.c[1], step.ldc, step.stride_c, step.batch,
        step.accumulate, step.float32_c, step.tf32)
