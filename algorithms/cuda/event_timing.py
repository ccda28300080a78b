"""Timing on a GPU with CUDA events: samples behind an L2 flush, the device's time alone
behind a spin, and the clocks' warm-up (CudaRuntime's timing half)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from algorithms.runtime import Timing, TimingPolicy, time_runs, warm_until_stable

#: The longest the clock warm-up spins; boost clocks settle within a few hundred ms.
WARM_UP_S = 0.5
#: device_ms's first head start, and the longest it doubles to, in nanoseconds.
_HEAD_START_NS, _MAX_HEAD_START_NS = 200_000, 100_000_000


def runs_spanning(ms: float) -> int:
    """Runs for `CudaRuntime.device_ms` to span about a millisecond of a run timed at `ms`
    with the host, at most 16 (their enqueueing must stay within the spin's head start)."""
    return max(1, min(16, math.ceil(1.0 / ms)))


class EventTiming:
    """The timing methods of a runtime on one GPU (CudaRuntime sets what they use)."""

    _cupy: Any
    _dev: Any  # the cupy.cuda.Device
    _props: dict[str, Any]
    _flush: Any  # the L2 flush's buffer, allocated on the first timing
    #: The latest sample's host enqueueing time per run (ms): what the tuner logs to tell
    #: a host-bound configuration's time from its GPU work.
    last_host_ms: float | None

    def elapsed_ms(self, fn: Callable[[], None]) -> float:
        """Events around `fn` on the current stream; waits for the end event only."""
        with self._dev:
            start, end = self._cupy.cuda.Event(), self._cupy.cuda.Event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(self._cupy.cuda.get_elapsed_time(start, end))

    @property
    def l2_bytes(self) -> int:
        """The device's L2 cache size."""
        return int(self._props.get("l2CacheSize", 0))

    def _flush_l2(self) -> None:
        # Writing a buffer twice the L2 evicts whatever the previous run left there, so
        # every timed run starts from device memory like a real network layer would.
        if self._flush is None:
            self._flush = self._cupy.empty(max(2 * self.l2_bytes, 1 << 20), dtype=np.uint8)
        stream = self._cupy.cuda.get_current_stream()
        self._cupy.cuda.runtime.memsetAsync(
            self._flush.data.ptr, 0, self._flush.nbytes, stream.ptr
        )

    def prime(self, fn: Callable[[], None], last_ms: float) -> None:
        """Nothing: every sample starts from a flushed L2, whatever ran before it."""

    def sample_ms(self, fn: Callable[[], None], runs: int) -> float:
        """`runs` back-to-back calls, per call: the longer of their time between two events
        and the host's time to enqueue them; L2 flushed before them.

        The flush is enqueued ahead of the start event, so the host launches the runs while
        the GPU is still busy flushing: launches overlap work as they do in a network. That
        head start (tens of microseconds) can hide a host-bound run's enqueueing from the
        events, the more so the fewer runs a sample holds: back to back, such a run cannot
        go faster than the host issues it, so the host's time bounds the sample from below.
        """
        cupy = self._cupy
        with self._dev:
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            self._flush_l2()
            start.record()
            began = time.perf_counter()
            for _ in range(runs):
                fn()
            host_ms = (time.perf_counter() - began) * 1e3
            end.record()
            end.synchronize()
            self.last_host_ms = host_ms / runs
            return max(float(cupy.cuda.get_elapsed_time(start, end)), host_ms) / runs

    def device_ms(self, fn: Callable[[], None], runs: int, samples: int = 5) -> float:
        """`fn`'s device time per run, the host's left out: the median of `samples` samples
        of `runs` runs, each behind the L2 flush and a spin (algorithms/cuda/spin.py) that
        outlasts the host's enqueueing of the runs, so that they wait queued on the GPU.
        sample_ms, which times runs as a network issues them, measures the host instead
        wherever a run takes longer to enqueue than to run. A sample whose enqueueing
        outlasted its spin is taken again behind a spin twice as long."""
        from algorithms.cuda.spin import spin

        cupy = self._cupy
        head_ns, times = _HEAD_START_NS, list[float]()
        with self._dev:
            while len(times) < samples:
                events = [cupy.cuda.Event() for _ in range(3)]
                self._dev.synchronize()  # the spin starts as soon as it is enqueued
                self._flush_l2()
                events[0].record()
                spin(head_ns)
                events[1].record()
                began = time.perf_counter()
                for _ in range(runs):
                    fn()
                host_ms = (time.perf_counter() - began) * 1e3
                events[2].record()
                events[2].synchronize()
                if host_ms >= 0.9 * cupy.cuda.get_elapsed_time(events[0], events[1]):
                    if head_ns >= _MAX_HEAD_START_NS:
                        raise RuntimeError(f"enqueueing {runs} runs took {host_ms:.1f} ms")
                    head_ns *= 2
                    continue
                times.append(float(cupy.cuda.get_elapsed_time(events[1], events[2])) / runs)
        return statistics.median(times)

    def time(self, fn: Callable[[], None], policy: TimingPolicy) -> Timing:
        """Warm up, then time samples until the budget, max_reps or the race cutoff."""
        return time_runs(self.sample_ms, fn, policy)

    def warm_up(self) -> None:
        """Run a cuBLAS SGEMM until its time is steady: clocks leave their idle state."""
        with self._dev:
            a = self._cupy.ones((2048, 2048), dtype=np.float32)
            c = self._cupy.empty_like(a)

            def spin() -> None:
                self._cupy.matmul(a, a, out=c)

            warm_until_stable(lambda: self.elapsed_ms(spin), WARM_UP_S)
