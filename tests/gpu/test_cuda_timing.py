"""The CUDA runtime's device reference, comparison, clock warm-up and batched samples.

Skipped without a GPU (tests/gpu/conftest.py); written before any GPU ran them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from algorithms.problem import DIRECTIONS, ConvProblem
from algorithms.reference import reference, relative_error
from algorithms.runtime import TimingPolicy


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_device_reference_matches_the_host_one(runtime: Any, direction: str,
                                               dtype: str) -> None:
    p = ConvProblem(n=3, c=8, h=11, w=9, k=6, r=3, s=3, pad=1, stride=(2, 1), groups=2,
                    dtype=dtype, direction=direction)
    rng = np.random.default_rng()
    a_shape, b_shape, _ = p.operand_shapes
    a, b = runtime.random(a_shape, dtype, rng), runtime.random(b_shape, dtype, rng)
    expected = reference(runtime.to_numpy(a, dtype), runtime.to_numpy(b, dtype), p)
    on_device = runtime.reference(a, b, p)
    assert relative_error(runtime.to_numpy(on_device), expected) < 1e-12
    max_abs, rel = runtime.compare(runtime.contiguous(expected.astype(dtype), dtype),
                                   on_device, dtype)
    assert 0 < rel < (1e-2 if dtype == "bfloat16" else 1e-6) and max_abs > 0


def test_warm_up_and_batched_samples(runtime: Any) -> None:
    runtime.warm_up()
    tiny = runtime.random((8, 8), "float32", np.random.default_rng())
    # Bug pinned: one warm-up decided the batch, and the first call of `tiny + 1` (its
    # kernel loaded on first use) took over 0.5 ms on an H100, so nothing was batched.
    timing = runtime.time(lambda: tiny + 1, TimingPolicy(warmup=2, budget_s=0.0, min_reps=3,
                                                         batch_below_ms=0.5))
    assert timing.runs_per_sample > 1 and all(t > 0 for t in timing.times_ms)
    raced = runtime.time(lambda: tiny @ tiny, replace(
        TimingPolicy(warmup=1, budget_s=10.0, min_reps=3, max_reps=50), cutoff_ms=1e-9))
    assert len(raced.times_ms) == 3


def test_device_time_leaves_the_host_out(runtime: Any) -> None:
    """device_ms times a run's GPU work alone: for a launch-bound call (tiny + 1, a few
    microseconds of GPU work, more of CuPy's host work) it is below the back-to-back wall
    time, and a one-millisecond spin per run is timed as at least that."""
    from algorithms.cuda.spin import spin

    tiny = runtime.random((8, 8), "float32", np.random.default_rng())
    work = runtime.device_ms(lambda: tiny + 1, runs=16)
    wall = runtime.sample_ms(lambda: tiny + 1, 16)
    assert 0 < work < wall
    assert runtime.device_ms(lambda: spin(1_000_000), runs=4) >= 0.99


def test_a_sample_is_never_faster_than_the_host_enqueues(runtime: Any) -> None:
    # Bug pinned: the L2 flush's head start hid a host-bound run's enqueueing from a
    # one-run sample (MobileNet-v2 block6.2.expand, H200 2026-11-27: im2col_gemm timed at
    # its 0.019 ms of GPU work by the tuner, 0.041 ms back to back alone).
    import time

    tiny = runtime.random((8, 8), "float32", np.random.default_rng())

    def host_bound() -> None:  # 0.3 ms of host work, then a few microseconds of GPU work
        end = time.perf_counter() + 3e-4
        while time.perf_counter() < end:
            pass
        tiny + 1

    runtime.sample_ms(host_bound, 1)  # the elementwise kernel loaded
    assert runtime.sample_ms(host_bound, 1) >= 0.3
    assert runtime.sample_ms(host_bound, 8) >= 0.3
