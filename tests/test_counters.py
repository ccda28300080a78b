"""Split K's tile counters (algorithms.cuda._counters): zeroed once, kept per workspace."""

from __future__ import annotations

import ctypes
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from algorithms.cuda import _counters
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
@pytest.mark.parametrize("capturing", [0, 1])
def test_counters_are_refused_while_the_stream_captures(
        monkeypatch: pytest.MonkeyPatch, capturing: int) -> None:
    zeroed: list[int] = []

    def zeros(nbytes: int, dtype: type) -> np.ndarray:
        zeroed.append(nbytes)
        return np.zeros(nbytes, dtype)

    cuda = SimpleNamespace(runtime=SimpleNamespace(streamIsCapturing=lambda ptr: capturing),
                           get_current_stream=lambda: SimpleNamespace(ptr=0x100))
    cupy = SimpleNamespace(cuda=cuda, uint8=np.uint8, zeros=zeros)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    if capturing:
        with pytest.raises(ValueError, match="run the plan once on that stream"):
            _counters._cupy_zeros(64)
        assert zeroed == []
    else:
        assert _counters._cupy_zeros(64).nbytes == 64 and zeroed == [64]
