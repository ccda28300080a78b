"""Prepared launches (algorithms.cuda._launch): the parameter buffer a run hands to
cuLaunchKernel, read back here as the driver would read it."""

from __future__ import annotations

import ctypes
from typing import Any, cast

import numpy as np
import pytest

from algorithms.cuda import _launch
from algorithms.cuda._launch import ENV, INT32, POINTER, Address, prepare
from algorithms.cuda._loader import CONV_SHAPE


class Recorder:
    """A kernel that launches from a buffer: its parameters by letter and size, as the
    emulator's kernels declare them."""

    name = "recorder"
    signature = "ppSiuf"
    sizes = (8, 8, CONV_SHAPE.itemsize, 4, 4, 4)
    ptr = 0x1234

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def launch_kernel(self, function: int, gx: int, gy: int, gz: int, bx: int, by: int,
                      bz: int, shared_mem: int, stream: int, params: int, extra: int) -> None:
        at = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        self.calls.append((
            function, (gx, gy, gz), (bx, by, bz), shared_mem, stream, extra,
            ctypes.c_void_p.from_address(at[0]).value, ctypes.c_void_p.from_address(at[1]).value,
            np.frombuffer(ctypes.string_at(at[2], CONV_SHAPE.itemsize), CONV_SHAPE)[0],
            ctypes.c_int32.from_address(at[3]).value, ctypes.c_uint32.from_address(at[4]).value,
            ctypes.c_float.from_address(at[5]).value))


def _shape() -> np.void:
    return cast(np.void, np.array(tuple(range(1, 17)), dtype=CONV_SHAPE)[()])


def test_a_launch_fills_its_slots_and_keeps_the_rest() -> None:
    kernel = Recorder()
    launch = prepare(kernel, (7, 2), (128,), (POINTER, POINTER, _shape(), INT32,
                                              np.uint32(9), np.float32(0.5)), 4096)
    assert launch is not None
    launch(77, 0x1000, 0x2000, -3)
    launch(78, 0x3000, 0x4000, 1)
    first, second = kernel.calls
    assert first[:6] == (0x1234, (7, 2, 1), (128, 1, 1), 4096, 77, 0)
    assert first[6:8] == (0x1000, 0x2000) and second[6:8] == (0x3000, 0x4000)
    assert first[8].item() == _shape().item()
    assert first[9:] == (-3, 9, 0.5) and second[9] == 1


def test_a_launch_refuses_what_the_kernel_does_not_take() -> None:
    kernel = Recorder()
    with pytest.raises(TypeError, match="not a Slot"):  # 32 or 64 bits?
        prepare(kernel, (1,), (1,), (POINTER, POINTER, _shape(), 5, np.uint32(1),
                                     np.float32(1)))
    with pytest.raises(TypeError, match="recorder: parameters"):  # one size off
        prepare(kernel, (1,), (1,), (POINTER, POINTER, _shape(), np.uint64(5),
                                     np.uint32(1), np.float32(1)))
    launch = prepare(kernel, (1,), (1,), (POINTER, POINTER, _shape(), INT32, np.uint32(1),
                                          np.float32(1)))
    assert launch is not None
    with pytest.raises(ValueError):  # a slot left unfilled
        launch(0, 1, 2)


def test_only_kernels_that_launch_from_a_buffer_are_prepared(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def stand_in(grid: Any, block: Any, args: Any, shared_mem: int = 0) -> None:
        """A recording stand-in: it can only be called."""

    assert prepare(stand_in, (1,), (1,), (POINTER,)) is None
    assert prepare(Recorder(), (1,), (1,), (POINTER, POINTER, _shape(), INT32,
                                            np.uint32(1), np.float32(1))) is not None
    monkeypatch.setenv(ENV, "0")
    assert _launch.entry(Recorder()) is None


def test_an_address_reads_like_an_array() -> None:
    assert Address(0x40).data.ptr == 0x40


def test_a_gpu_kernel_is_checked_against_the_drivers_parameter_sizes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU the driver says each parameter's size (cuFuncGetParamInfo): a buffer that
    does not fit is refused when prepared; a driver that cannot say skips the check."""
    declared = [("p", 8), ("S", CONV_SHAPE.itemsize), ("i", 4)]
    kernel = object()  # no emulator signature: the driver decides
    monkeypatch.setattr(_launch, "driver_parameter_sizes",
                        lambda function: [8, CONV_SHAPE.itemsize, 4])
    _launch._check_parameters(kernel, declared, function=0x99)
    monkeypatch.setattr(_launch, "driver_parameter_sizes", lambda function: [8, 8, 4])
    with pytest.raises(TypeError, match="driver says"):
        _launch._check_parameters(kernel, declared, function=0x99)
    monkeypatch.setattr(_launch, "driver_parameter_sizes", lambda function: None)
    _launch._check_parameters(kernel, declared, function=0x99)


def test_without_libcuda_the_driver_says_nothing() -> None:
    if _launch._param_info() is not None:
        pytest.skip("libcuda is loadable here")
    assert _launch.driver_parameter_sizes(0x99) is None



def _args() -> tuple[Any, ...]:
    return (POINTER, POINTER, _shape(), INT32, np.uint32(1), np.float32(1))


def test_a_launch_pads_a_short_grid_and_block_with_ones() -> None:
    # Mutation gap: the y and z a 1-D grid or block is padded with were unpinned (a zero
    # there is an invalid launch on a GPU; the tests launched 2-D grids only).
    kernel = Recorder()
    launch = prepare(kernel, (7,), (128,), _args())
    assert launch is not None
    launch(0, 1, 2, 3)
    assert kernel.calls[0][1:3] == ((7, 1, 1), (128, 1, 1))


class OptingRecorder(Recorder):
    """A Recorder that, as CuPy's RawKernel, takes the opt-in to more shared memory."""

    def __init__(self) -> None:
        super().__init__()
        self.opt_ins: list[int] = []

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self.opt_ins[-1] if self.opt_ins else 48 * 1024

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, nbytes: int) -> None:
        self.opt_ins.append(nbytes)


def test_a_bound_launch_opts_its_kernel_in_to_its_shared_memory_once() -> None:
    # Mutation gap: bind() without the opt-in survived: a prepared launch of a "-sS" tile
    # (80-90 KiB) then fails on a GPU, since the kernel's own call (which opts in) is not
    # taken.
    kernel = OptingRecorder()
    launch = _launch.KernelLaunch("f.cu", "k", (2,), (64,), _args(), 80 * 1024)
    for _ in range(3):
        bound = launch.bind(lambda file, name: kernel)
        assert bound is not None
        bound(0, 1, 2, 3)
    assert kernel.opt_ins == [80 * 1024]
    assert [call[3] for call in kernel.calls] == [80 * 1024] * 3


def test_a_launch_prepared_for_one_kernel_is_not_bound_to_another_of_the_same_id() -> None:
    # Mutation gap: bind()'s check that the cached entry holds this very kernel (ids are
    # reused once a kernel is gone, e.g. per device or after a test swaps kernels) was
    # unpinned: another kernel's parameter buffer would be launched.
    old, new = Recorder(), Recorder()
    new.ptr = 0x5678
    launch = _launch.KernelLaunch("f.cu", "k", (1,), (1,), _args())
    stale = prepare(old, (1,), (1,), _args())
    launch.prepared[id(new)] = (old, stale)  # as if `old` had lived at new's address
    bound = launch.bind(lambda file, name: new)
    assert bound is not None and bound is not stale
    bound(0, 1, 2, 3)
    assert new.calls and new.calls[0][0] == 0x5678 and not old.calls
