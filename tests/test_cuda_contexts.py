"""Our own driver calls from a thread with no current CUDA context: the shared-memory opt-in
and prepared launches make the thread's context current where the driver refuses them for
want of one (and only then), and a context is made current only where none is.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from algorithms.cuda import _launch, _loader
from algorithms.cuda._launch import INT32, POINTER
from tests.cuda_kernel_standins import PlainFunction
from tests.test_launch import Recorder, _shape


class _DriverError(RuntimeError):
    """What CuPy's driver wrapper raises: the CUresult as `status`."""

    def __init__(self, status: int) -> None:
        super().__init__(f"CUresult {status}")
        self.status = status


# Bug: the shared-memory opt-in called cuFuncSetAttribute straight, as prepared launches
# call cuLaunchKernel: from a thread without a current CUDA context it would be refused.
def test_the_shared_memory_opt_in_makes_a_context_current_when_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    current: list[bool] = []
    calls: list[tuple[int, ...]] = []

    def set_attribute(*args: int) -> None:
        if not current:
            raise _DriverError(_loader.INVALID_CONTEXT)
        calls.append(args)

    monkeypatch.setattr(_loader, "_func_set_attribute", set_attribute)
    monkeypatch.setattr(_loader, "make_context_current", lambda: current.append(True))
    kernel = PlainFunction(0x7F01)
    _loader.allow_shared_memory(kernel, 160 * 1024)
    assert current == [True]
    assert calls == [(0x7F01, _loader.MAX_DYNAMIC_SHARED_SIZE_BYTES, 160 * 1024)]

    def illegal(*args: int) -> None:
        raise _DriverError(700)  # CUDA_ERROR_ILLEGAL_ADDRESS: not a context's absence

    monkeypatch.setattr(_loader, "_func_set_attribute", illegal)
    with pytest.raises(_DriverError):
        _loader.allow_shared_memory(PlainFunction(0x7F02), 160 * 1024)
    assert current == [True]


class _ContextlessThread(Recorder):
    """A kernel launched from a thread with no current CUDA context until one is made."""

    def __init__(self, refusal: int) -> None:
        super().__init__()
        self.refusal, self.current = refusal, False

    def launch_kernel(self, *args: Any) -> None:
        if not self.current:
            raise _DriverError(self.refusal)
        super().launch_kernel(*args)


# Bug: prepared launches went to cuLaunchKernel straight, skipping what CuPy's own
# launches do first (make the device's context current on the calling thread), so a plan
# called first from a thread that had made no CUDA runtime call (a server's worker thread)
# would be refused with CUDA_ERROR_INVALID_CONTEXT.
def test_a_launch_without_a_current_context_makes_one_and_goes_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = _ContextlessThread(_loader.INVALID_CONTEXT)
    made: list[bool] = []

    def make_current() -> None:
        made.append(True)
        kernel.current = True

    monkeypatch.setattr(_loader, "make_context_current", make_current)
    args = (POINTER, POINTER, _shape(), INT32, np.uint32(9), np.float32(0.5))
    launch = _launch.prepare(kernel, (1,), (1,), args)
    assert launch is not None
    launch(5, 0x1000, 0x2000, 1)
    launch(5, 0x3000, 0x4000, 2)
    assert made == [True]  # once: the context stays current on the thread
    assert [call[6:8] for call in kernel.calls] == [(0x1000, 0x2000), (0x3000, 0x4000)]
    other = _ContextlessThread(700)  # CUDA_ERROR_ILLEGAL_ADDRESS: not ours to retry
    launch = _launch.prepare(other, (1,), (1,), args)
    assert launch is not None
    with pytest.raises(_DriverError):
        launch(5, 0x1000, 0x2000, 1)
    assert made == [True] and other.calls == []


# A thread's first GEMM may come inside a capture, where a runtime call may be refused:
# only a thread with no current context makes one.
@pytest.mark.parametrize("current", [0, 0x7F00])
def test_a_context_is_made_current_only_where_none_is(monkeypatch: pytest.MonkeyPatch,
                                                      current: int) -> None:
    made: list[bool] = []
    cupy = SimpleNamespace(cuda=SimpleNamespace(
        driver=SimpleNamespace(ctxGetCurrent=lambda: current)))
    monkeypatch.setattr(_loader, "require_cupy", lambda: cupy)
    monkeypatch.setattr(_loader, "make_context_current", lambda: made.append(True))
    _loader.ensure_context()
    assert made == ([] if current else [True])
