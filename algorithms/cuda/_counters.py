"""Zeroed tile counters for the kernels that sum split K themselves (kernels/common.cuh
sum_split_tile): one uint32 per output tile, which the last of a tile's splits resets to
zero, so a counter that starts a launch at zero ends it at zero.

Why not in the workspace: a caller's workspace comes uninitialised and other candidates
share it (the tuner times every verified configuration of a layer in one workspace), and a
memset before every run would cost the launch that summing in the kernel saves. So the
counters of a run live apart, zeroed once when first needed, and are kept per workspace
address: work ordered on one workspace is ordered on its counters too (two runs at once on
one workspace would already clash in its partial sums), and a CUDA graph replays the same
addresses. On a device every workspace is device memory, so its address names one device.
Counters are never freed (a run still queued may count in them): one small block per
workspace address ever seen, which CuPy's memory pool, reusing its addresses, keeps few.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from algorithms.cuda import _recording
from algorithms.cuda._lanes import relaxed, stream_captures

#: Bytes per counter (uint32).
COUNTER_BYTES = 4


def _cupy_zeros(nbytes: int) -> Any:
    import cupy

    if not stream_captures(cupy, cupy.cuda.get_current_stream().ptr):
        return cupy.zeros(nbytes, dtype=cupy.uint8)
    # Inside a capture a memset on the capturing stream would become a graph node instead
    # of running: runs before the graph's first launch would count from whatever the memory
    # held, and a count that starts off its phase never returns to it (every later split-K
    # run summed wrongly). So the counters are zeroed on a stream of their own, waited for
    # at once, with the capture mode relaxed (_lanes.relaxed) for the allocation, the wait
    # and the stream's destruction (cudaStreamDestroy, at its last reference's release).
    with relaxed():
        side = cupy.cuda.Stream(non_blocking=True)
        with side:
            zeroed = cupy.zeros(nbytes, dtype=cupy.uint8)
        side.synchronize()
        del side
    return zeroed


#: Zeroed device memory of `nbytes` on the current device, ordered before the current
#: stream's later work (CuPy's zeros; inside a capture zeroed at once on a stream of its
#: own); tests/cuda_emu replaces it with host memory.
zeros: Callable[[int], Any] = _cupy_zeros

# workspace address -> (its counters' array, how many counters they hold)
_kept: dict[int, tuple[Any, int]] = {}
# Sets a larger one replaced: kept, as runs still queued may count in them.
_retired: list[Any] = []
_lock = threading.Lock()


def counters_at(workspace_ptr: int, count: int) -> int:
    """The device address of at least `count` zeroed counters kept for `workspace_ptr` (0
    in a names-only dry run, whose workspace is not real: nothing is allocated for it)."""
    found = _kept.get(workspace_ptr)
    if found is None or found[1] < count:
        if (taking := _recording.active()) is not None and taking.names_only:
            return 0
        with _lock:
            found = _kept.get(workspace_ptr)
            if found is None or found[1] < count:
                if found is not None:
                    _retired.append(found[0])
                found = _kept[workspace_ptr] = (zeros(count * COUNTER_BYTES), count)
    return int(found[0].data.ptr)
