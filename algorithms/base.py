"""The one interface every convolution algorithm implements, on every backend."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from algorithms.problem import DTYPES, ConvProblem

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


@dataclass(frozen=True)
class Work:
    """How one run divides its work: what a cost model (tuner.features) reads beyond the
    problem's sizes.

    - blocks: parallel blocks of the main kernel; 0 where it is not known here (a cuBLAS
      or cuFFT call, the CPU).
    - fill: the share of those blocks' tiles that is real output (tiles overhanging the
      edges compute padding).
    - launches: kernels (GPU) or Python-level steps (CPU) of one run, each with a fixed
      cost that small problems feel.
    """

    blocks: int = 0
    fill: float = 1.0
    launches: int = 1


def unsupported(reason: str) -> Support:
    """A falsy Support that says why."""
    return Support(False, reason)


def depthwise_limits(problem: ConvProblem) -> Support:
    """Whether every group holds one input channel (groups == c), as each depthwise needs."""
    if problem.groups != problem.c:
        return unsupported(
            f"depthwise needs groups == c (one input channel per group), "
            f"got groups={problem.groups}, c={problem.c}"
        )
    return SUPPORTED


@runtime_checkable
class Algorithm(Protocol):
    """A stateless convolution algorithm on one backend.

    Contract (the tuner and `convolve` rely on it):
    - `supports` is cheap and honest: supported means `run` is correct for that problem,
      in its `direction` and within the error its `math` allows.
    - `configs` lists the tunable variants (stable strings, stored in the database); an
      algorithm without variants returns `(DEFAULT_CONFIG,)`.
    - `run` reads C-contiguous `x` (n, c, h, w) and `w` (k, c/groups, r, s), writes every
      element of the C-contiguous `y` (n, k, out_h, out_w) — for the backward directions
      the arrays are `problem.operand_shapes`: (dy, w) -> dx and (x, dy) -> dw — and uses
      no memory beyond the
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


def check_config(name: str, config: str, configs: tuple[str, ...]) -> None:
    """ValueError when `config` is not one of the algorithm's configs."""
    if config not in configs:
        raise ValueError(f"{name}: unknown config {config!r}; expected one of {list(configs)}")


class AlgorithmBase:
    """What every implementation shares: config and workspace checks, no-variant defaults.

    A subclass sets `name` and `backend` (and `directions` / `dtypes` where it serves
    fewer), implements `_workspace` and `_run`, and overrides `_limits` or `configs` where
    it has limits or variants. `supports` checks the direction and dtype before `_limits`;
    `run` checks the config and the workspace size before `_run`, so no implementation
    repeats either.
    """

    name: ClassVar[str]
    backend: ClassVar[str]
    #: The directions `run` computes (see algorithms.problem.DIRECTIONS).
    directions: ClassVar[tuple[str, ...]] = ("forward",)
    #: The storage dtypes `run` accepts.
    dtypes: ClassVar[tuple[str, ...]] = tuple(DTYPES)

    def supports(self, problem: ConvProblem) -> Support:
        """The directions and dtypes above, within the limits `_limits` names."""
        if problem.direction not in self.directions:
            return unsupported(
                f"{self.name} computes {' and '.join(self.directions)} only, "
                f"not {problem.direction}"
            )
        if problem.dtype not in self.dtypes:
            return unsupported(
                f"dtype {problem.dtype} is not supported ({', '.join(self.dtypes)} only)"
            )
        return self._limits(problem)

    def _limits(self, problem: ConvProblem) -> Support:
        return SUPPORTED

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """No variants."""
        return (DEFAULT_CONFIG,)

    def workspace_bytes(self, problem: ConvProblem, config: str) -> int:
        """Bytes of workspace `run` uses (see the implementation's module docstring)."""
        # Remembered per (problem, config): `run` asks on every call, and listing the
        # configs (tile grids, chunk limits) is pure Python on every plan call.
        key = (problem, config)
        memo = self.__dict__.setdefault("_workspace_memo", {})
        needed = memo.get(key)
        if needed is None:
            check_config(self.name, config, self.configs(problem))
            needed = self._workspace(problem, config)
            if len(memo) >= 4096:
                memo.clear()
            memo[key] = needed
        return needed

    def run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """y = x (cross-correlated with) w; on a GPU, enqueued on the current stream."""
        needed = self.workspace_bytes(problem, config)
        if needed and (workspace is None or workspace.size < needed):
            raise ValueError(f"{self.name}: workspace needs {needed} bytes")
        self._run(x, w, y, workspace, problem, config)

    def work(self, problem: ConvProblem, config: str) -> Work:
        """How a run of `config` divides its work (unknown blocks, one launch, unless an
        implementation says more)."""
        return Work()

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        return 0

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        raise NotImplementedError


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


@functools.cache  # asked per workspace view on every run: np.dtype() of a name is slow
def _itemsize(dtype: Any) -> int:
    import numpy as np

    return int(np.dtype(dtype).itemsize)


def align(nbytes: int, to: int = 256) -> int:
    """Round `nbytes` up to a multiple of `to` (256 keeps every view aligned on a GPU too)."""
    return -(-nbytes // to) * to


class WorkspaceLayout:
    """Named, aligned sub-buffers packed one after another into a byte workspace (any backend)."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[int, tuple[int, ...], Any]] = {}
        self._size = 0

    def add(self, name: str, shape: tuple[int, ...], dtype: Any) -> WorkspaceLayout:
        """Reserve `shape` of `dtype` under `name` (returns self for chaining)."""
        dims = tuple(int(d) for d in shape)
        count = 1
        for dim in dims:
            count *= dim
        self._entries[name] = (self._size, dims, dtype)
        self._size += align(count * _itemsize(dtype))
        return self

    @property
    def nbytes(self) -> int:
        """Total bytes of the workspace this layout needs."""
        return self._size

    def views(self, workspace: Any) -> dict[str, Any]:
        """Typed views of every sub-buffer of `workspace` (NumPy or CuPy; no copies)."""
        return {
            name: workspace_view(workspace, offset, shape, dtype)
            for name, (offset, shape, dtype) in self._entries.items()
        }

    def byte_ranges(self) -> dict[str, slice]:
        """Each sub-buffer's bytes of the workspace, by name: for kernels that take plain
        pointers, a uint8 slice is all the view they need."""
        ranges = {}
        for name, (offset, shape, dtype) in self._entries.items():
            count = 1
            for dim in shape:
                count *= dim
            ranges[name] = slice(offset, offset + count * _itemsize(dtype))
        return ranges

    def view(self, workspace: Any, name: str) -> Any:
        """A typed view of the sub-buffer `name` of `workspace` (no copy)."""
        offset, shape, dtype = self._entries[name]
        return workspace_view(workspace, offset, shape, dtype)

    def __contains__(self, name: str) -> bool:
        return name in self._entries
