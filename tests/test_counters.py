"""Split K's tile counters (algorithms.cuda._counters): zeroed once, kept per workspace."""

from __future__ import annotations

import ctypes
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from algorithms.cuda import _counters, _lanes
from tests.cuda_emu.host import at, dev


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the zeroed blocks asked for, counters kept from none."""
    made: list[int] = []

    def zeros(nbytes: int) -> np.ndarray:
        made.append(nbytes)
        return dev(np.zeros(nbytes, np.uint8))

    monkeypatch.setattr(_counters, "zeros", zeros)
    monkeypatch.setattr(_counters, "_kept", {})
    monkeypatch.setattr(_counters, "_retired", [])
    return made


def test_a_workspace_keeps_its_counters_until_it_needs_more(made: list[int]) -> None:
    rng = np.random.default_rng()
    ptr, other = (int(v) for v in rng.integers(1, 2**40, size=2) * 256)
    count = int(rng.integers(1, 200))
    first = _counters.counters_at(ptr, count)
    assert not at(first, count, np.uint32).any()  # zeroed
    # What the kernels leave behind (zeros) stays; the same address every time, no new memory.
    assert _counters.counters_at(ptr, count) == first
    assert _counters.counters_at(ptr, max(1, count // 2)) == first
    assert made == [count * 4]
    # Another workspace: counters of its own (two streams' runs never share them).
    assert _counters.counters_at(other, count) != first
    # More tiles than it holds: a larger zeroed set; the smaller one stays allocated, as runs
    # still queued may count in it.
    larger = _counters.counters_at(ptr, count + 1)
    assert larger != first and not at(larger, count + 1, np.uint32).any()
    assert len(_counters._retired) == 1
    assert ctypes.c_uint32.from_address(first).value == 0


# Bug: a plan whose first split-K run came inside a CUDA-graph capture zeroed its counters
# there: the memset became a graph node, so runs before the graph's first launch counted
# from whatever the memory held, out of phase for good (every later sum wrong, silently).
# Then such counters were refused, which failed PyTorch's own pattern (a warm-up on one
# stream, the capture on another). Now they are zeroed at once on a stream of their own.
@pytest.mark.parametrize("capturing", [0, 1])
def test_counters_made_while_the_stream_captures_are_zeroed_at_once(
        monkeypatch: pytest.MonkeyPatch, capturing: int) -> None:
    modes = [0]  # the calling thread's capture mode (0: global)
    current = [0x100]  # CuPy's current stream
    events: list[tuple[str, int, int]] = []  # (what, stream, capture mode)

    class Stream:
        def __init__(self, non_blocking: bool) -> None:
            assert non_blocking  # unordered with the legacy stream
            self.ptr, self._outer = 0x900, 0

        def __enter__(self) -> None:
            self._outer, current[0] = current[0], self.ptr

        def __exit__(self, *exc: object) -> None:
            current[0] = self._outer

        def synchronize(self) -> None:
            events.append(("wait", self.ptr, modes[0]))

        def __del__(self) -> None:  # CuPy's Stream destroys its CUDA stream here
            events.append(("destroy", self.ptr, modes[0]))

    def zeros(nbytes: int, dtype: type) -> np.ndarray:
        events.append(("zeros", current[0], modes[0]))
        return np.zeros(nbytes, dtype)

    def exchange(mode: int) -> int:
        modes[0], previous = mode, modes[0]
        return previous

    cuda = SimpleNamespace(
        runtime=SimpleNamespace(streamIsCapturing=lambda ptr: int(capturing and ptr == 0x100)),
        get_current_stream=lambda: SimpleNamespace(ptr=current[0]), Stream=Stream)
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(cuda=cuda, uint8=np.uint8,
                                                             zeros=zeros))
    monkeypatch.setattr(_lanes, "exchange_capture_mode", exchange)
    assert _counters._cupy_zeros(64).nbytes == 64
    if capturing:  # zeroed on a stream of its own and waited for, the capture mode relaxed
        # The stream destroyed relaxed too: the global mode may refuse cudaStreamDestroy.
        assert events == [("zeros", 0x900, _lanes._RELAXED), ("wait", 0x900, _lanes._RELAXED),
                          ("destroy", 0x900, _lanes._RELAXED)]
    else:  # ordered on the current stream
        assert events == [("zeros", 0x100, 0)]
    assert modes == [0] and current == [0x100]
