"""The CUDA runtime's bridge to torch (algorithms.cuda._torch_bridge), without a GPU: a
stand-in CuPy records what the bridge builds from a tensor's pointer or torch's stream,
and stand-in CUDA tensors carry the attributes the bridge reads. tests/gpu/test_plans_gpu.py
runs the same paths on real tensors and streams."""

from __future__ import annotations

import types
from typing import Any

import pytest

from algorithms.cuda import _torch_bridge
from algorithms.cuda._torch_bridge import TorchBridge, is_torch


class FakeCupy:
    """Records the memory, arrays and streams the bridge asks for."""

    def __init__(self) -> None:
        self.current = 0xC0
        self.built: list[tuple[Any, ...]] = []
        cuda = types.SimpleNamespace(
            UnownedMemory=lambda ptr, size, owner, device: ("memory", ptr, size, device),
            MemoryPointer=lambda memory, offset: ("pointer", memory, offset),
            ExternalStream=self._stream,
            get_current_stream=lambda: types.SimpleNamespace(ptr=self.current),
        )
        self.cuda = cuda

    def _stream(self, ptr: int, device: int) -> tuple[str, int, int]:
        self.built.append(("stream", ptr, device))
        return ("stream", ptr, device)

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


def test_torch_stream_becomes_a_kept_cupy_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    current = {1: 0xC0}
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream",
                        lambda index: current[index], raising=False)
    cupy = FakeCupy()
    bridge = TorchBridge(cupy, 1)
    assert bridge.stream() is None  # torch's current stream is CuPy's already
    current[1] = 0xD0
    stream = bridge.stream()
    assert stream == ("stream", 0xD0, 1)
    assert bridge.stream() is stream
    assert cupy.built == [("stream", 0xD0, 1)]


def test_is_torch_reads_the_type_module_only() -> None:
    import torch

    assert is_torch(torch.zeros(1))
    assert is_torch(FakeCudaTensor(0, (1,)))
    assert not is_torch([0.0])
