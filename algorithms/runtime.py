"""What the tuner needs from a device: buffers, random data, timing, identity.

Each backend package implements `Runtime` in its `runtime.py`; the tuner only sees this
protocol and the timing policy it passes in."""

from __future__ import annotations

import functools
import math
import os
import statistics
import time
from collections.abc import Callable, Hashable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from algorithms.problem import ConvProblem


def is_torch(array: Any) -> bool:
    """Whether `array` is a torch tensor (without importing torch)."""
    return is_torch_type(type(array))


def _torch_module(kind: Any) -> bool:
    # Any base: a user's subclass of torch.Tensor lives in the user's module (a review of
    # 2026-11-30: such tensors went the NumPy way and came back as NumPy arrays).
    return any(getattr(base, "__module__", "").partition(".")[0] == "torch"
               for base in getattr(kind, "__mro__", (kind,)))


#: Whether arrays of a type are torch tensors (without importing torch), kept per type: asked
#: several times on every cached convolve() (its key, its result).
is_torch_type: Callable[[Any], bool] = functools.cache(_torch_module)



def overlaps(a: Any, b: Any) -> bool:
    """Whether two arrays (NumPy, CuPy or torch) share any byte of memory.

    Why: an algorithm writes its output while it still reads its operands (direct zeroes
    the output first, the GEMM paths write image by image), so an `out` that overlaps x or
    w gave wrong numbers without a word (review of 2026-11-30)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        # Bounds first (cheap), then exact where they meet: interleaved views share none.
        return bool(np.may_share_memory(a, b) and np.shares_memory(a, b))
    (lo_a, hi_a), (lo_b, hi_b) = _byte_span(a), _byte_span(b)
    return lo_a < hi_b and lo_b < hi_a


def out_overlaps(out_at: int, out_bytes: int, x_at: int, x_bytes: int, w_at: int,
                 w_bytes: int) -> bool:
    """`overlaps` for three contiguous buffers given as address and size: whether out's
    bytes meet x's or w's (a plan's direct path, on every call: integer compares only)."""
    out_end = out_at + out_bytes
    return (x_at < out_end and out_at < x_at + x_bytes) or (
        w_at < out_end and out_at < w_at + w_bytes)


def _byte_span(array: Any) -> tuple[int, int]:
    """[first, last + 1) of the bytes an array touches (empty for an empty array): NumPy's
    by its interface, torch's by element strides, CuPy's by `.data.ptr` and byte strides."""
    if isinstance(array, np.ndarray):
        start = int(array.__array_interface__["data"][0])
        item, strides = array.itemsize, array.strides
    elif is_torch(array):
        start, item = int(array.data_ptr()), int(array.element_size())
        strides = tuple(step * item for step in array.stride())
    else:
        start, item, strides = int(array.data.ptr), int(array.itemsize), array.strides
    if 0 in array.shape:
        return start, start
    low = high = start
    for size, stride in zip(array.shape, strides, strict=True):
        reach = (size - 1) * stride
        if reach < 0:
            low += reach
        else:
            high += reach
    return low, high + item



@dataclass(frozen=True)
class TimingPolicy:
    """How long and how often to time one candidate."""

    warmup: int = 1  # untimed runs first: compilation, plans, pool growth stay out
    budget_s: float = 0.25  # stop repeating once this much time has been spent timing
    min_reps: int = 3
    max_reps: int = 50
    # A run shorter than this (judged by the last warm-up run) is launch-bound: it is timed
    # in samples of back-to-back runs, as a network runs it, each sample about this long.
    batch_below_ms: float = 0.5
    # Racing: after min_reps, stop once the fastest run is slower than this (the measurer
    # sets it from the leader's median); None times the full budget.
    cutoff_ms: float | None = None

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ValueError(f"warmup must be non-negative, got {self.warmup}")
        if self.min_reps < 1 or self.max_reps < self.min_reps:
            raise ValueError(f"min_reps ({self.min_reps}) must be at least 1 and at most "
                             f"max_reps ({self.max_reps})")
        # not (x >= 0): NaN too, which would compare false with every time and never stop.
        if not (self.budget_s >= 0 and self.batch_below_ms >= 0) or math.isinf(self.budget_s):
            raise ValueError(f"budget_s ({self.budget_s}) and batch_below_ms "
                             f"({self.batch_below_ms}) must be finite and non-negative")
        if self.cutoff_ms is not None and not self.cutoff_ms > 0:
            raise ValueError(f"race cutoff must be positive, got {self.cutoff_ms}")


@dataclass(frozen=True)
class Timing:
    """Per-run times of one candidate, in milliseconds, and their summary."""

    times_ms: tuple[float, ...]
    runs_per_sample: int = 1  # >1: each time is the mean of that many back-to-back runs

    @property
    def median_ms(self) -> float:
        """Median run time."""
        return float(statistics.median(self.times_ms))

    @property
    def spread_ms(self) -> float:
        """Interquartile range (0 for fewer than 4 runs: too few to say)."""
        if len(self.times_ms) < 4:
            return 0.0
        q = statistics.quantiles(self.times_ms, n=4)
        return float(q[2] - q[0])

    @property
    def min_ms(self) -> float:
        """Fastest run."""
        return float(min(self.times_ms))


#: Most back-to-back runs in one sample of a launch-bound candidate.
MAX_BATCH = 256


def batch_size(probe_ms: float | None, policy: TimingPolicy) -> int:
    """Back-to-back runs per sample: enough that a sample of a short run spans the threshold."""
    if probe_ms is None or probe_ms <= 0 or probe_ms >= policy.batch_below_ms:
        return 1
    return min(MAX_BATCH, math.ceil(policy.batch_below_ms / probe_ms))


def time_runs(sample: Callable[[Callable[[], None], int], float], fn: Callable[[], None],
              policy: TimingPolicy) -> Timing:
    """Time `fn` under `policy` with a runtime's `sample_ms` (one loop for every backend).

    Warm-up samples are untimed; the fastest decides the batch. After min_reps it stops
    at the budget, at max_reps, or as soon as the fastest sample is past the race cutoff.
    """
    # The fastest warm-up decides the batch: the first one can include a kernel's lazy load.
    probes = [sample(fn, 1) for _ in range(policy.warmup)]
    runs = batch_size(min(probes, default=None), policy)
    times: list[float] = []
    began = time.perf_counter()
    while len(times) < policy.min_reps or (
        time.perf_counter() - began < policy.budget_s and len(times) < policy.max_reps
        and (policy.cutoff_ms is None or min(times) <= policy.cutoff_ms)
    ):
        times.append(sample(fn, runs))
    return Timing(tuple(times), runs)


def warm_until_stable(sample: Callable[[], float], max_s: float, rel: float = 0.03) -> int:
    """Call `sample` until three in a row agree within `rel`, or `max_s` passes; the count.

    Clocks ramp up under load (GPU boost, CPU governors): the first candidate of a pass
    would otherwise be timed on a cold device.
    """
    began = time.perf_counter()
    last: list[float] = []
    count = 0
    while time.perf_counter() - began < max_s:
        last = [*last[-2:], sample()]
        count += 1
        if len(last) == 3 and max(last) <= min(last) * (1 + rel):
            break
    return count


def cpus_allowed() -> int:
    """CPUs this process may run on (its affinity mask, e.g. under taskset or a cgroup)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Prepared:
    """What a runtime built before candidates' first runs (Runtime.prepare)."""

    built: int = 0  # kernels compiled, or loaded from a disk cache
    failed: tuple[str, ...] = ()  # "what: why" of each that could not be built
    threads: int = 0
    seconds: float = 0.0  # wall time


class Runtime(Protocol):
    """One device as the tuner and `convolve` see it (a backend module implements it)."""

    backend: str  # the registry backend: "cpu" or "cuda"
    device: str  # canonical device string: "cpu" or "cuda:N"
    #: The latest sample_ms's host enqueueing per run (ms), where it differs from the
    #: sample's time (a GPU's); None where the sample is the host's work itself.
    last_host_ms: float | None
    #: Whether the plans of one lane all run in its one workspace (`scratch`) instead of
    #: each keeping its own (tuner.plans).
    shares_scratch: bool
    #: Whether work here can be captured into a CUDA graph (`capturing` asks per lane).
    captures: bool
    #: The most elements an operand may have for the algorithms here (None: no limit); a
    #: plan runs a larger problem in batch chunks (tuner.batch_chunks).
    max_operand_elements: int | None

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any: ...

    def workspace(self, nbytes: int) -> Any: ...

    def scratch(self, nbytes: int) -> Any:
        """`nbytes` of the calling lane's workspace, the one every plan on it runs in (only
        where shares_scratch)."""
        ...

    def random(self, shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> Any: ...

    def to_numpy(self, array: Any, dtype: str | None = None) -> np.ndarray:
        """A host copy; `dtype` names what storage arrays hold (bfloat16 bits on CuPy)."""
        ...

    def storage_dtype(self, dtype: str) -> str:
        """The array dtype that holds a problem's `dtype` here (CuPy has no bfloat16)."""
        ...

    def adopt(self, array: Any) -> Any | None: ...

    def contiguous(self, array: Any, dtype: str) -> Any: ...

    def ready(self, x: Any, w: Any, out: Any, shapes: tuple[tuple[int, ...], ...],
              storage: str) -> tuple[Hashable, Any, Any, Any] | None:
        """(lane, x, w, out as the implementation's `direct_runner`, where it has one, or
        else its `run` takes them) where the caller's arrays need no adopting, check, copy
        or context switch on this device; else None."""
        ...

    def output(self, x: Any, shape: tuple[int, ...], storage: str) -> Any | None:
        """A new result array of `shape` beside `x` where `x` is this device's own kind of
        array and no context switch is needed to allocate it; else None."""
        ...

    def synchronize(self) -> None: ...

    def fault(self) -> str | None:
        """Why the device can run no more work (a sticky CUDA error), or None if it can."""
        ...

    def activate(self) -> AbstractContextManager[None]: ...

    def lane(self) -> Hashable:
        """What work enqueued now is ordered on: the thread (CPU) or current stream (GPU).

        Plans keep one workspace per lane, so that lanes running at once never share one.
        """
        ...

    def capturing(self, lane: Hashable) -> bool:
        """Whether `lane`'s stream is capturing a CUDA graph now (only where `captures`)."""
        ...

    def caller_stream(self, array: Any) -> AbstractContextManager[None]:
        """Make the stream the caller of `array` works on current (torch's, for a tensor)."""
        ...

    def elapsed_ms(self, fn: Callable[[], None]) -> float:
        """Run `fn` once and say how long its work took (waits for that work only)."""
        ...

    def sample_ms(self, fn: Callable[[], None], runs: int) -> float:
        """One timed sample: `runs` back-to-back calls of `fn`, in ms per call."""
        ...

    def prime(self, fn: Callable[[], None], last_ms: float) -> None:
        """Before a sample of `fn` that follows other work: leave the caches as runs of `fn`
        back to back leave them (`last_ms`: its latest time per run)."""
        ...

    def time(self, fn: Callable[[], None], policy: TimingPolicy) -> Timing:
        """Per-sample times of `fn` under `policy` (`time_runs` over `sample_ms`)."""
        ...

    def warm_up(self) -> None:
        """Bring the device to steady clocks before the first candidate of a pass."""
        ...

    def prepare(self, problem: ConvProblem, candidates: Iterable[tuple[Any, str]]
                ) -> Prepared:
        """Before the first runs of (algorithm, config) candidates of `problem`: build what
        they need, several at once (a GPU compiles their kernels in parallel); nothing
        where runs need nothing built. A failure is reported, not raised: the candidate's
        own run meets it again, where the tuner records it."""
        ...

    def reference(self, a: Any, b: Any, problem: ConvProblem) -> Any:
        """The float64 result of `problem` from its operands, kept where this runtime computes."""
        ...

    def compare(self, out: Any, ref: Any, dtype: str) -> tuple[float, float]:
        """(max abs error, relative error) of `out` (in `dtype`'s storage) against `ref`."""
        ...

    def fingerprint(self) -> dict[str, Any]: ...

    def memory_bytes(self) -> int | None: ...


def random_operands(runtime: Runtime, problem: ConvProblem,
                    rng: np.random.Generator) -> tuple[Any, Any, Any]:
    """Fresh random operands of the problem's direction on `runtime`, and an empty output:
    (x, w, y), (dy, w, dx) or (x, dy, dw)."""
    a_shape, b_shape, out_shape = problem.operand_shapes
    return (runtime.random(a_shape, problem.dtype, rng),
            runtime.random(b_shape, problem.dtype, rng),
            runtime.empty(out_shape, problem.dtype))
