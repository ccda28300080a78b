"""The one interface every convolution algorithm implements, on every backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from algorithms.problem import ConvProblem

#: The configuration name of an algorithm that has no tunable variants.
DEFAULT_CONFIG = "default"


@dataclass(frozen=True)
class Support:
    """Whether an algorithm supports a problem; falsy with the reason when it does not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


SUPPORTED = Support(True)


def unsupported(reason: str) -> Support:
    """A falsy Support that says why."""
    return Support(False, reason)


@runtime_checkable
class Algorithm(Protocol):
    """A stateless convolution algorithm on one backend.

    Contract (the tuner and `convolve` rely on it):
    - `supports` is cheap and honest: supported means `run` is correct for that problem.
    - `configs` lists the tunable variants (stable strings, stored in the database); an
      algorithm without variants returns `(DEFAULT_CONFIG,)`.
    - `run` reads C-contiguous `x` (n, c, h, w) and `w` (k, c/groups, r, s), writes every
      element of the C-contiguous `y` (n, k, out_h, out_w), and uses no memory beyond the
      1-D uint8 `workspace` of at least `workspace_bytes(problem, config)` bytes (it may be
      None when that is 0). All arrays live on the algorithm's backend. On a GPU, `run`
      only enqueues work on the current stream; the caller synchronises.
    """

    name: ClassVar[str]
    backend: ClassVar[str]

    def supports(self, problem: ConvProblem) -> Support: ...

    def configs(self, problem: ConvProblem) -> tuple[str, ...]: ...

    def workspace_bytes(self, problem: ConvProblem, config: str) -> int: ...

    def run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None: ...


def workspace_view(workspace: Any, offset: int, shape: tuple[int, ...], dtype: Any) -> Any:
    """A typed view of `workspace` bytes [offset, offset + size) shaped `shape` (no copy).

    Works for NumPy and CuPy buffers alike; `offset` must be aligned for `dtype`.
    """
    count = 1
    for dim in shape:
        count *= dim
    itemsize = _itemsize(dtype)
    if offset % itemsize:
        raise ValueError(f"workspace offset {offset} is not aligned to {itemsize} bytes")
    nbytes = count * itemsize
    if offset + nbytes > workspace.size:
        raise ValueError(
            f"workspace too small: need {offset + nbytes} bytes, have {workspace.size}"
        )
    return workspace[offset:offset + nbytes].view(dtype).reshape(shape)


def _itemsize(dtype: Any) -> int:
    import numpy as np

    return int(np.dtype(dtype).itemsize)


def align(nbytes: int, to: int = 256) -> int:
    """Round `nbytes` up to a multiple of `to` (256 keeps every view aligned on a GPU too)."""
    return -(-nbytes // to) * to
