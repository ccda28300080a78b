"""A plan's runs replayed: the GPU calls of one (problem, config) worked out once, with x's,
w's and y's addresses left as offsets, so that a call fills them in and enqueues.

Why: after the prepared launches (_launch) a plan call on ready operands still ran the
algorithm's Python to reach them: its run, its launch looked up per (problem, config), the
kernel looked up per device, the launch bound, each operand's address read. On the H200's
host of 2026-11-27 that was 4.8 of a 9.8 us run (`bench_host_path`: the run's own Python
3.3 us, the lookups 1.5 us), beside 5.5 us for the launch itself. A replay calls the
prepared launches (and cuBLAS) straight away.

How a run is worked out: twice, dry (algorithms.cuda._recording: nothing is enqueued), on
Addresses, the second time with x, w and y each moved by its own shift. An argument that
moved by x's shift is x's address plus a fixed offset, and so for w and y; one that did not
move is fixed (the workspace's regions: a replay is kept per workspace); anything else (a
different call, a flag that changed) and the run is not replayed: it runs as before. The
shifts are 16 modulo 2**k for every k from 5 on, so each operand keeps its address modulo
16, the largest alignment a run tests today (16-byte vectors), and changes it modulo any
larger power of two: a run that came to test a larger alignment would differ between the
dry runs and stay unreplayed, not be replayed wrongly. Replays are kept per (lane, each
address modulo 16), the lane being the stream (CudaRuntime.lane) whose workspace it is.

Only algorithms that declare `replayable` are worked out this way: their runs make every
GPU call through _launch.enqueue or _cublas.gemm_strided_batched (a CuPy operation or cuFFT
call would not be recorded, and would be skipped on replay). tests/cuda_emu checks each
such algorithm's replay against its run on every emulated case. CONVTUNE_REPLAY=0, read
when a plan is made, turns replays off.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from algorithms.cuda import _recording
from algorithms.cuda._lanes import CaptureRefused
from algorithms.cuda._launch import Address
from algorithms.problem import ConvProblem

ENV = "CONVTUNE_REPLAY"
#: x's, w's and y's shifts in the second dry run (see the module docstring).
SHIFTS = (16 + (1 << 40), 16 + (1 << 41), 16 + (1 << 42))
#: The alignment a replay is kept per: each operand's address modulo this.
ALIGNMENT = 16
#: Replays kept per plan before the oldest are dropped (lanes times alignments).
KEPT = 64

#: Where a replayed argument comes from: fixed, x, w, y, the stream.
FIXED, X, W, Y, STREAM = range(5)


@dataclass(frozen=True)
class Replay:
    """A run's calls with their arguments as (source, value): fixed values as they are,
    addresses as offsets from x, w, y (or the stream's handle at offset 0)."""

    calls: tuple[tuple[Callable[..., None], tuple[tuple[int, Any], ...]], ...]

    def __call__(self, stream: int, x: int, w: int, y: int) -> None:
        """Enqueue the run on `stream` for operands at these addresses (cuBLAS calls go
        on CuPy's current stream, which a ready call's stream is)."""
        bases = (0, x, w, y, stream)
        for function, args in self.calls:
            function(*[bases[source] + value if source else value for source, value in args])


def record(algorithm: Any, problem: ConvProblem, config: str, x: int, w: int, y: int,
           workspace: Any) -> Replay | None:
    """The Replay of `algorithm`'s runs of `config` with this workspace and operands at
    these addresses modulo ALIGNMENT, or None where its calls cannot be worked out."""
    runs = []
    for dx, dw, dy in ((0, 0, 0), SHIFTS):
        with _recording.recording() as taken:
            try:
                algorithm.run(Address(x + dx), Address(w + dw), Address(y + dy), workspace,
                              problem, config)
            except CaptureRefused:  # not a verdict on the run: kept, it would stay unreplayed
                raise
            except Exception:  # the real run raises it, or runs unreplayed
                return None
        if taken.refused is not None:
            return None
        runs.append(taken.calls)
    first, second = runs
    if len(first) != len(second):
        return None
    calls = []
    for (function, args), (again, moved) in zip(first, second, strict=True):
        if again is not function or len(args) != len(moved):
            return None
        sources = []
        for a, b in zip(args, moved, strict=True):
            source = _source(a, b, (x, w, y))
            if source is None:
                return None
            sources.append(source)
        calls.append((function, tuple(sources)))
    return Replay(tuple(calls))


def _source(first: Any, moved: Any, bases: tuple[int, int, int]) -> tuple[int, Any] | None:
    """Where an argument comes from, by how it moved between the dry runs (None: neither
    fixed nor an operand's address)."""
    if first is _recording.STREAM:
        return (STREAM, 0) if moved is first else None
    if type(first) is type(moved) and first == moved:
        return (FIXED, first)
    if type(first) is int and type(moved) is int:
        for source, base, shift in zip((X, W, Y), bases, SHIFTS, strict=True):
            if moved - first == shift:
                return (source, first - base)
    return None


def enabled() -> bool:
    """Whether plans made now replay their runs (CONVTUNE_REPLAY, default on)."""
    return os.environ.get(ENV, "1") != "0"


class Runner:
    """A plan's runs on ready operands (lane, then x, w, y: device addresses as ints, or
    CuPy arrays; CudaRuntime.ready), run as they come: for algorithms that do not replay."""

    def __init__(self, algorithm: Any, problem: ConvProblem, config: str,
                 workspace: Callable[[Hashable], Any]) -> None:
        self._algorithm = algorithm
        self._problem = problem
        self._config = config
        self._workspace = workspace

    def __call__(self, lane: Any, x: Any, w: Any, y: Any) -> None:
        """Enqueue a run on the lane's stream (CuPy's current one)."""
        self._algorithm.run(Address(x) if type(x) is int else x,
                            Address(w) if type(w) is int else w,
                            Address(y) if type(y) is int else y,
                            self._workspace(lane), self._problem, self._config)


class Replayer(Runner):
    """A Runner that replays where `record` works a run out, else runs. Safe to share
    between threads (two working out the same replay at once keep either; both are the
    same)."""

    def __init__(self, algorithm: Any, problem: ConvProblem, config: str,
                 workspace: Callable[[Hashable], Any]) -> None:
        super().__init__(algorithm, problem, config, workspace)
        self._replays: dict[tuple[Any, ...], Replay | None] = {}

    def __call__(self, lane: Any, x: Any, w: Any, y: Any) -> None:
        """Enqueue a run on the lane's stream."""
        # Inline, not a helper per operand: this runs on every plan call. Tensors come as
        # ints (CudaRuntime.ready), CuPy arrays as themselves.
        xp = x if type(x) is int else x.data.ptr
        wp = w if type(w) is int else w.data.ptr
        yp = y if type(y) is int else y.data.ptr
        key = (lane, xp % ALIGNMENT, wp % ALIGNMENT, yp % ALIGNMENT)
        replay = self._replays.get(key, self)
        if replay is self:  # not yet worked out for this lane and alignment
            replay = self._worked_out(key, xp, wp, yp)
        if replay is None:
            super().__call__(lane, x, w, y)
        else:  # a lane is its stream's handle, or (handle, thread): algorithms.cuda._lanes
            replay(lane if type(lane) is int else lane[0], xp, wp, yp)

    def prepare(self, lane: Any, x: Any, w: Any, y: Any) -> None:
        """Work out the replay that a call with these operands on this lane makes, and run
        nothing: the tuner's first timed call would otherwise pay the dry runs (and decide
        a sample's batch by them)."""
        xp, wp, yp = (a if type(a) is int else a.data.ptr for a in (x, w, y))
        key = (lane, xp % ALIGNMENT, wp % ALIGNMENT, yp % ALIGNMENT)
        if key not in self._replays:
            self._worked_out(key, xp, wp, yp)

    def _worked_out(self, key: tuple[Any, ...], xp: int, wp: int, yp: int) -> Replay | None:
        if len(self._replays) >= KEPT:
            self._replays.clear()
        replay = self._replays[key] = record(self._algorithm, self._problem, self._config,
                                             xp, wp, yp, self._workspace(key[0]))
        return replay
