"""The CUDA runtime's bridge to torch (algorithms.cuda._torch_bridge) and its `ready`
operands, without a GPU: a stand-in CuPy records what the bridge builds from a tensor's
pointer or torch's stream, and stand-in CUDA tensors carry the attributes the bridge reads.
tests/gpu/test_plans_gpu.py runs the same paths on real tensors and streams."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")  # the bridge is torch's; most cases ask torch for its types

from algorithms.cuda import _torch_bridge
from algorithms.cuda._torch_bridge import TorchBridge, is_torch


class FakeCupy:
    """Records the memory, arrays and streams the bridge asks for."""

    def __init__(self, from_external: bool = True) -> None:
        self.current = 0xC0
        self.built: list[tuple[Any, ...]] = []
        # CuPy 14 wraps a foreign stream with Stream.from_external (the CUDA stream protocol,
        # no device), CuPy 13 with ExternalStream(ptr, device) only.
        stream = types.SimpleNamespace(from_external=self._from_external) if from_external \
            else types.SimpleNamespace()
        cuda = types.SimpleNamespace(
            UnownedMemory=lambda ptr, size, owner, device: ("memory", ptr, size, device),
            MemoryPointer=lambda memory, offset: ("pointer", memory, offset),
            Stream=stream,
            ExternalStream=self._external_stream,
            get_current_stream=lambda: types.SimpleNamespace(ptr=self.current),
        )
        self.cuda = cuda

    def _from_external(self, obj: Any) -> tuple[str, int, Any]:
        version, ptr = obj.__cuda_stream__()
        assert version == 0
        self.built.append(("stream", ptr, obj))
        return ("stream", ptr, obj)

    def _external_stream(self, ptr: int, device: int) -> tuple[str, int, int]:
        self.built.append(("external stream", ptr, device))
        return ("external stream", ptr, device)

    def ndarray(self, shape: tuple[int, ...], dtype: str, pointer: Any) -> tuple[Any, ...]:
        self.built.append(("array", shape, dtype, pointer))
        return ("array", shape, dtype, pointer)


class FakeCudaTensor:
    """What the bridge reads of a torch CUDA tensor."""

    __module__ = "torch.fake"
    is_cuda = True

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: str = "torch.float32",
                 contiguous: bool = True, item: int = 4, device: int = 1) -> None:
        self.ptr, self.shape, self.dtype = ptr, shape, dtype
        self.contiguous, self.item, self.device_index = contiguous, item, device

    def get_device(self) -> int:
        return self.device_index

    def is_contiguous(self) -> bool:
        return self.contiguous

    def data_ptr(self) -> int:
        return self.ptr

    def numel(self) -> int:
        count = 1
        for extent in self.shape:
            count *= extent
        return count

    def element_size(self) -> int:
        return self.item

    @property
    def nbytes(self) -> int:
        return self.numel() * self.item


def test_a_tensor_is_viewed_from_its_pointer_once() -> None:
    cupy = FakeCupy()
    bridge = TorchBridge(cupy, 1)
    tensor = FakeCudaTensor(0x1000, (2, 3, 4, 5))
    view = bridge.view(tensor)
    assert view == ("array", (2, 3, 4, 5), "float32",
                    ("pointer", ("memory", 0x1000, 480, 1), 0))
    assert bridge.view(tensor) is view  # kept: nothing built on the second call
    assert bridge.view(FakeCudaTensor(0x1000, (2, 3, 4, 5))) is view  # same address
    assert len(cupy.built) == 1
    # Another address, shape or dtype is another view.
    bridge.view(FakeCudaTensor(0x2000, (2, 3, 4, 5)))
    bridge.view(FakeCudaTensor(0x1000, (2, 3, 20)))
    bridge.view(FakeCudaTensor(0x1000, (2, 3, 4, 5), "torch.float16", item=2))
    assert len(cupy.built) == 4


def test_bfloat16_is_viewed_as_its_bits_and_other_tensors_are_not_viewed() -> None:
    bridge = TorchBridge(FakeCupy(), 1)
    bits = bridge.view(FakeCudaTensor(0x1000, (4,), "torch.bfloat16", item=2))
    assert bits is not None and bits[2] == "uint16"
    assert bridge.view(FakeCudaTensor(0x1000, (4,), "torch.int64", item=8)) is None
    assert bridge.view(FakeCudaTensor(0x1000, (4,), contiguous=False)) is None
    host = FakeCudaTensor(0x1000, (4,))
    host.is_cuda = False
    assert bridge.view(host) is None
    assert bridge.view([1.0, 2.0]) is None  # not a tensor at all


def test_only_this_gpus_tensors_are_viewed() -> None:
    cupy = FakeCupy()
    bridge = TorchBridge(cupy, 1)
    assert bridge.view(FakeCudaTensor(0x1000, (4,), device=0)) is None
    assert cupy.built == []  # nothing built or kept for another GPU's tensor
    assert bridge.view(FakeCudaTensor(0x1000, (4,), device=1)) is not None


def test_built_names_the_dtype_of_its_own_views_only() -> None:
    bridge = TorchBridge(FakeCupy(), 1)
    view = bridge.view(FakeCudaTensor(0x1000, (4,), "torch.bfloat16", item=2))
    assert bridge.built(view) == "uint16"
    assert bridge.built(("array", (4,), "uint16", None)) is None  # equal, not the same
    assert bridge.built(FakeCudaTensor(0x1000, (4,))) is None


def test_views_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_torch_bridge, "_KEPT", 3)
    cupy = FakeCupy()
    bridge = TorchBridge(cupy, 1)
    tensors = [FakeCudaTensor(0x1000 * (i + 1), (4,)) for i in range(4)]
    for tensor in tensors:
        bridge.view(tensor)
    newest = bridge.view(tensors[3])  # the newest survives the reset
    oldest = bridge.view(tensors[0])  # the oldest was dropped: built again
    assert len(cupy.built) == 5
    assert bridge.built(newest) == bridge.built(oldest) == "float32"


@pytest.mark.parametrize("from_external", [True, False], ids=["cupy14", "cupy13"])
def test_torch_stream_becomes_a_kept_cupy_stream(monkeypatch: pytest.MonkeyPatch,
                                                 from_external: bool) -> None:
    import torch

    current = {1: 0xC0}
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream",
                        lambda index: current[index], raising=False)
    cupy = FakeCupy(from_external)
    bridge = TorchBridge(cupy, 1)
    assert bridge.stream() is None  # torch's current stream is CuPy's already
    current[1] = 0xD0
    stream = bridge.stream()
    assert stream is not None
    assert stream[:2] == (("stream" if from_external else "external stream"), 0xD0)
    if not from_external:
        assert stream[2] == 1  # the tensor's GPU, where CuPy 13 is told it
    assert bridge.stream() is stream
    assert cupy.built == [stream]


def test_cupy_14_wraps_torch_streams_without_the_deprecated_class() -> None:
    # Bug: the bridge built every torch stream wrapper with cupy.cuda.ExternalStream, which
    # CuPy 14 deprecates (a DeprecationWarning per wrapper in the H200 run of 2026-11-27's
    # plan tests) and a later CuPy removes.
    cupy = FakeCupy()

    def refused(ptr: int, device: int) -> None:
        raise AssertionError("ExternalStream used where Stream.from_external exists")

    cupy.cuda.ExternalStream = refused
    bridge = TorchBridge(cupy, 0)
    bridge._raw_stream = lambda index: 0xE0
    stream = bridge.stream()
    assert stream is not None and stream[:2] == ("stream", 0xE0)


def test_is_torch_reads_the_type_module_only() -> None:
    import torch

    assert is_torch(torch.zeros(1))
    assert is_torch(FakeCudaTensor(0, (1,)))
    assert not is_torch([0.0])


class PlainTensor(FakeCudaTensor):
    """A stand-in CUDA tensor with torch's dtype objects, as `ready` compares them."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: Any = None,
                 contiguous: bool = True, device: int = 1) -> None:
        import torch

        super().__init__(ptr, shape, contiguous=contiguous, device=device)
        self.dtype = torch.float32 if dtype is None else dtype  # type: ignore[assignment]


SHAPES = ((2, 3, 4, 5), (6, 3, 1, 1), (2, 6, 4, 5))


Three = tuple[Any, Any, Any]


def _plain(**change: Any) -> Three:
    """x, w and out on GPU 1, one of them changed by `change` (which: keyword)."""
    which = change.pop("which", None)
    x, w, out = (PlainTensor(0x1000 * (i + 1), shape, **(change if i == which else {}))
                 for i, shape in enumerate(SHAPES))
    return x, w, out


@pytest.fixture()
def raw_stream(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """torch's current raw stream per GPU, as `_cuda_getCurrentRawStream` reports it."""
    import torch

    current = {1: 0xC0}
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream",
                        lambda index: current[index], raising=False)
    return current


def test_plain_tensors_are_ready_with_their_addresses(raw_stream: dict[int, int]) -> None:
    cupy = FakeCupy()
    bridge = TorchBridge(cupy, 1, (PlainTensor,))
    assert bridge.ready(*_plain(), SHAPES, "float32") == (0xC0, 0x1000, 0x2000, 0x3000)
    raw_stream[1] = 0xD0
    assert (bridge.ready(*_plain(), SHAPES, "float32") or [None])[0] == 0xD0
    assert cupy.built == []  # no view, no stream wrapper


@pytest.mark.parametrize("which", [0, 1, 2])
@pytest.mark.parametrize("change", [
    {"shape": (2, 3, 4, 6)}, {"contiguous": False}, {"device": 0}, {"dtype": "float16"},
])
def test_a_tensor_that_does_not_fit_is_not_ready(raw_stream: dict[int, int], which: int,
                                                 change: dict[str, Any]) -> None:
    import torch

    if change.get("dtype") == "float16":
        change = {"dtype": torch.float16}
    if "shape" in change:  # the stand-in's shape is positional
        tensors = _plain()
        tensors[which].shape = change["shape"]
    else:
        tensors = _plain(which=which, **change)
    assert TorchBridge(FakeCupy(), 1, (PlainTensor,)).ready(*tensors, SHAPES,
                                                           "float32") is None


# Bug (review of 2026-11-30): an `out` that shared memory with x or w ran on the direct
# path, where the kernels write the output while other blocks still read the operands.
@pytest.mark.parametrize("operand", [0, 1])
@pytest.mark.parametrize("shift", [0, 4, -4])
def test_an_out_that_overlaps_an_operand_is_not_ready(raw_stream: dict[int, int],
                                                      operand: int, shift: int) -> None:
    bridge = TorchBridge(FakeCupy(), 1, (PlainTensor,))
    tensors = list(_plain())
    start = tensors[operand].ptr + (shift if shift >= 0 else tensors[operand].nbytes + shift)
    tensors[2] = PlainTensor(start, SHAPES[2])
    assert bridge.ready(tensors[0], tensors[1], tensors[2], SHAPES, "float32") is None
    # Just past the operand's last byte, or ending at its first: no overlap, ready.
    for start in (tensors[operand].ptr + tensors[operand].nbytes,
                  tensors[operand].ptr - tensors[2].nbytes):
        tensors[2] = PlainTensor(start, SHAPES[2])
        assert bridge.ready(tensors[0], tensors[1], tensors[2], SHAPES, "float32") is not None


def test_only_plain_tensors_of_the_storage_dtype_are_ready(raw_stream: dict[int, int]) -> None:
    import torch

    bridge = TorchBridge(FakeCupy(), 1, (PlainTensor,))
    x, w, out = _plain()
    assert bridge.ready(FakeCudaTensor(0x1000, SHAPES[0]), w, out, SHAPES, "float32") is None
    assert bridge.ready(x, w, out, SHAPES, "float16") is None
    # bfloat16 is stored as its uint16 bits: bfloat16 tensors are ready for it.
    bx, bw, by = (PlainTensor(t.ptr, t.shape, torch.bfloat16) for t in (x, w, out))
    assert bridge.ready(bx, bw, by, SHAPES, "uint16") == (0xC0, 0x1000, 0x2000, 0x3000)
    # By default the plain types are torch's own: a CPU tensor is on no GPU.
    cx, cw, cy = (torch.randn(shape) for shape in SHAPES)
    assert TorchBridge(FakeCupy(), 1).ready(cx, cw, cy, SHAPES, "float32") is None
    assert TorchBridge(FakeCupy(), 1).ready([0.0], w, out, SHAPES, "float32") is None


class CupyArray:
    """A stand-in CuPy array: what CudaRuntime.ready reads."""

    #: Where the next stand-in's memory starts: arrays made one after another never overlap.
    _next = 0x10000

    def __init__(self, shape: tuple[int, ...], dtype: str = "float32", contiguous: bool = True,
                 device: int = 1, ptr: int | None = None) -> None:
        self.shape, self.dtype = shape, np.dtype(dtype)  # type: ignore[assignment]
        self.flags = types.SimpleNamespace(c_contiguous=contiguous)
        self.device = types.SimpleNamespace(id=device)
        self.nbytes = int(np.prod(shape)) * self.dtype.itemsize
        if ptr is None:
            ptr, CupyArray._next = CupyArray._next, CupyArray._next + self.nbytes
        self.data = types.SimpleNamespace(ptr=ptr)


@pytest.fixture()
def gpu(monkeypatch: pytest.MonkeyPatch, raw_stream: dict[int, int]) -> types.SimpleNamespace:
    """A CudaRuntime for GPU 1 over a stand-in CuPy; `state` sets the current device and
    CuPy's current stream."""
    from algorithms.cuda.runtime import CudaRuntime

    state = types.SimpleNamespace(device=1, stream=0xC0)
    cupy = FakeCupy()
    cupy.ndarray = CupyArray  # type: ignore[assignment,method-assign]
    cupy.cuda.runtime = types.SimpleNamespace(
        getDeviceCount=lambda: 2, getDeviceProperties=lambda index: {},
        getDevice=lambda: state.device)
    cupy.cuda.Device = lambda index: ("device", index)
    cupy.cuda.get_current_stream = lambda: types.SimpleNamespace(ptr=state.stream)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    runtime = CudaRuntime(1)
    runtime._torch = TorchBridge(cupy, 1, (PlainTensor,))
    return types.SimpleNamespace(runtime=runtime, state=state)


def test_tensors_are_ready_as_addresses_on_the_current_device_and_stream(
        gpu: types.SimpleNamespace, raw_stream: dict[int, int]) -> None:
    ready = gpu.runtime.ready(*_plain(), SHAPES, "float32")
    assert ready is not None
    assert ready == (0xC0, 0x1000, 0x2000, 0x3000)  # addresses, for the plan's runner
    assert gpu.runtime.ready(*_plain()[:2], None, SHAPES, "float32") is None  # no out
    gpu.state.device = 0  # another GPU current: the checked path switches
    assert gpu.runtime.ready(*_plain(), SHAPES, "float32") is None
    gpu.state.device = 1
    raw_stream[1] = 0xD0  # torch on a side stream: the checked path makes it CuPy's
    assert gpu.runtime.ready(*_plain(), SHAPES, "float32") is None


@pytest.mark.parametrize("change", [{}, {"dtype": "float16"}, {"contiguous": False},
                                    {"device": 0}, {"shape": (1, 2, 3, 4)}])
@pytest.mark.parametrize("which", [0, 2])
def test_cupy_arrays_are_ready_as_they_are(gpu: types.SimpleNamespace, which: int,
                                           change: dict[str, Any]) -> None:
    arrays = [CupyArray(shape) for shape in SHAPES]
    if change:
        kwargs = {"shape": SHAPES[which], **change}
        arrays[which] = CupyArray(kwargs.pop("shape"), **kwargs)
    ready = gpu.runtime.ready(*arrays, SHAPES, "float32")
    assert ready == ((0xC0, *arrays) if not change else None)


def test_mixed_kinds_are_not_ready(gpu: types.SimpleNamespace) -> None:
    arrays = [CupyArray(shape) for shape in SHAPES]
    tensors = _plain()
    assert gpu.runtime.ready(arrays[0], tensors[1], arrays[2], SHAPES, "float32") is None
    assert gpu.runtime.ready(tensors[0], arrays[1], tensors[2], SHAPES, "float32") is None


def test_a_result_is_made_beside_this_gpus_cupy_arrays_only(
        gpu: types.SimpleNamespace, raw_stream: dict[int, int]) -> None:
    made: list[tuple[Any, ...]] = []

    def empty(shape: tuple[int, ...], dtype: Any) -> CupyArray:
        made.append((shape, np.dtype(dtype)))
        return CupyArray(shape, np.dtype(dtype).name)

    gpu.runtime._cupy.empty = empty
    x = CupyArray(SHAPES[0])
    out = gpu.runtime.output(x, SHAPES[2], "uint16")  # bfloat16's storage
    assert isinstance(out, CupyArray) and made == [(SHAPES[2], np.dtype(np.uint16))]
    # So that the plan's direct path then takes the call.
    arrays = [x, CupyArray(SHAPES[1]), gpu.runtime.output(x, SHAPES[2], "float32")]
    assert gpu.runtime.ready(*arrays, SHAPES, "float32") == (0xC0, *arrays)
    # Another GPU's array, another GPU current, a tensor, a host array: the checked path
    # allocates (switching device where it must).
    assert gpu.runtime.output(CupyArray(SHAPES[0], device=0), SHAPES[2], "float32") is None
    gpu.state.device = 0
    assert gpu.runtime.output(x, SHAPES[2], "float32") is None
    gpu.state.device = 1
    assert gpu.runtime.output(_plain()[0], SHAPES[2], "float32") is None
    assert gpu.runtime.output(np.ones(SHAPES[0], np.float32), SHAPES[2], "float32") is None
    assert len(made) == 2


# Bug (review of 2026-11-30): the same overlap on CuPy arrays' direct path.
@pytest.mark.parametrize("operand", [0, 1])
def test_a_cupy_out_that_overlaps_an_operand_is_not_ready(gpu: types.SimpleNamespace,
                                                          operand: int) -> None:
    arrays = [CupyArray(shape, ptr=0x100000 * (i + 1)) for i, shape in enumerate(SHAPES)]
    inside = arrays[operand].data.ptr + arrays[operand].nbytes - 4  # its last element
    arrays[2] = CupyArray(SHAPES[2], ptr=inside)
    assert gpu.runtime.ready(*arrays, SHAPES, "float32") is None
    arrays[2] = CupyArray(SHAPES[2], ptr=inside + 4)
    assert gpu.runtime.ready(*arrays, SHAPES, "float32") is not None
