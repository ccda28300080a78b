"""Shape sources: ONNX models' Conv nodes and the built-in networks' layer lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from algorithms.problem import ConvProblem
from tuner.networks import NETWORKS, network_layers, network_problems
from tuner.onnx_shapes import onnx_convs, onnx_problems

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def conv(name: str, x: str, w: str, y: str, **attrs: Any) -> Any:
    return helper.make_node("Conv", [x, w], [y], name=name, **attrs)


def weight(name: str, shape: tuple[int, ...]) -> Any:
    return numpy_helper.from_array(np.zeros(shape, dtype=np.float32), name)


def save(tmp_path: Path, nodes: list[Any], weights: list[Any], c: int = 3, hw: int = 32,
         batch: int | str = "N") -> Path:
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, hw, hw])],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        initializer=weights,
    )
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph), str(path))
    return path


def test_conv_nodes_become_problems_at_the_batch_size(tmp_path: Path) -> None:
    path = save(tmp_path, [
        conv("stem", "x", "w1", "a", pads=[3, 3, 3, 3], strides=[2, 2], kernel_shape=[7, 7]),
        helper.make_node("Relu", ["a"], ["b"]),
        conv("dw", "b", "w2", "c", pads=[1, 1, 1, 1], group=16),
        conv("dilated", "c", "w3", "d", pads=[2, 2, 2, 2], dilations=[2, 2]),
        conv("same", "d", "w4", "e", auto_pad=b"SAME_UPPER", strides=[1, 1]),
        conv("repeat", "e", "w4", "f", auto_pad="SAME_LOWER"),
    ], [weight("w1", (16, 3, 7, 7)), weight("w2", (16, 1, 3, 3)),
        weight("w3", (8, 16, 3, 3)), weight("w4", (8, 8, 3, 3))])
    problems, warnings = onnx_problems(path, 16)
    assert warnings == []
    assert problems == [
        ("stem", ConvProblem(n=16, c=3, h=32, w=32, k=16, r=7, s=7, pad=3, stride=2)),
        ("dw", ConvProblem(n=16, c=16, h=16, w=16, k=16, r=3, s=3, pad=1, groups=16)),
        ("dilated", ConvProblem(n=16, c=16, h=16, w=16, k=8, r=3, s=3, pad=2, dilation=2)),
        ("same", ConvProblem(n=16, c=8, h=16, w=16, k=8, r=3, s=3, pad=1)),
        # "repeat" has the same problem as "same": listed once
    ]
    assert onnx_problems(path, 1)[0][0][1].n == 1


def test_fixed_batch_is_overridden_and_asymmetric_pads_skipped(tmp_path: Path) -> None:
    path = save(tmp_path, [
        conv("ok", "x", "w1", "a", pads=[0, 1, 0, 1]),
        conv("asym", "a", "w2", "b", pads=[0, 0, 1, 1], strides=[2, 2]),
        conv("same_odd", "b", "w2", "c", auto_pad="SAME_UPPER"),  # 2x2 pads by 1 in all
    ], [weight("w1", (4, 3, 1, 3)), weight("w2", (4, 4, 2, 2))], batch=1, hw=8)
    problems, warnings = onnx_problems(path, 4)
    assert problems == [("ok", ConvProblem(n=4, c=3, h=8, w=8, k=4, r=1, s=3, pad=(0, 1)))]
    assert len(warnings) == 2
    assert "'asym'" in warnings[0] and "asymmetric padding [0, 0, 1, 1]" in warnings[0]
    assert "'same_odd'" in warnings[1] and "asymmetric" in warnings[1]
    assert [c.name for c in onnx_convs(path, 4)] == ["ok", "asym", "same_odd"]


def test_unusable_models_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such ONNX file"):
        onnx_problems(tmp_path / "missing.onnx", 1)
    (tmp_path / "junk.onnx").write_bytes(b"\x00not a model")
    with pytest.raises(ValueError, match="ONNX"):
        onnx_problems(tmp_path / "junk.onnx", 1)
    path = save(tmp_path, [conv("asym", "x", "w", "y", pads=[1, 0, 0, 0])],
                [weight("w", (4, 3, 3, 3))])
    with pytest.raises(ValueError, match="no 2-D Conv node"):
        onnx_problems(path, 1)


# --- built-in networks -------------------------------------------------------------------
def macs(name: str) -> float:
    return sum(layer.count * layer.problem(1).flops for layer in network_layers(name)) / 2


def test_network_sizes_match_the_papers() -> None:
    # Multiply-adds of the convolutions per image, as the papers and torchvision count them.
    assert 3.8e9 < macs("resnet50") < 4.2e9
    assert 15.0e9 < macs("vgg16") < 15.6e9
    assert 1.45e9 < macs("googlenet") < 1.65e9  # "1.5 billion multiply-adds"
    assert 0.28e9 < macs("mobilenet_v2") < 0.32e9  # "300M multiply-adds"
    convs = {name: sum(layer.count for layer in network_layers(name)) for name in NETWORKS}
    assert convs == {"resnet50": 53, "vgg16": 13, "alexnet": 5, "googlenet": 57,
                     "mobilenet_v2": 52}


def test_mobilenet_v2_depthwise_layers() -> None:
    layers = network_layers("mobilenet_v2")
    dw = [layer for layer in layers if "dw" in layer.name]
    assert sum(layer.count for layer in dw) == 17  # one per inverted residual block
    for layer in dw:
        assert layer.groups == layer.c == layer.k and (layer.r, layer.s, layer.pad) == (3, 3, 1)
    assert {layer.c for layer in dw} == {32, 96, 144, 192, 384, 576, 960}
    assert [layer.stride for layer in dw if layer.stride == 2] == [2, 2, 2, 2]
    last = layers[-1]
    assert (last.c, last.k, last.h) == (320, 1280, 7)
    problems = network_problems("mobilenet_v2", 8)
    assert all(p.n == 8 for _, p in problems)
    assert len({p for _, p in problems}) == len(problems) == len(layers)


def test_googlenet_inception_modules() -> None:
    layers = {layer.name: layer for layer in network_layers("googlenet")}
    assert layers["inception3a.5x5"].r == 5 and layers["inception3a.5x5"].pad == 2
    assert (layers["inception4e.poolproj"].c, layers["inception4e.poolproj"].k) == (528, 128)
    assert (layers["inception5b.1x1"].h, layers["inception5b.1x1"].k) == (7, 384)
    assert layers["inception4b.5x5reduce"].count == 2  # 4b and 4c: 512 -> 24 at 14x14


# --- the synthetic sweep -----------------------------------------------------------------
def test_the_sweep_is_the_same_list_every_time_and_no_network() -> None:
    from tuner.networks import SWEEP, SYNTHETIC, _sweep

    assert _sweep(NETWORKS.values()) == SWEEP == network_layers("sweep") == SYNTHETIC["sweep"]
    assert "sweep" not in NETWORKS  # never held out or scored as a network
    for name in NETWORKS:  # and shares no problem with one
        assert not {p for _, p in network_problems(name, 8)} & \
            {p for _, p in network_problems("sweep", 8)}
    assert len(SWEEP) >= 100
    assert len({layer.name for layer in SWEEP}) == len(SWEEP)
    problems = network_problems("sweep", 32, "float32", "tf32")
    assert len({p for _, p in problems}) == len(SWEEP)
    assert all(p.n == 32 and p.math == "tf32" for _, p in problems)


def test_the_sweep_spans_the_networks_kinds_within_its_work_bounds() -> None:
    from tuner.networks import _SWEEP_MACS, SWEEP

    kinds = {(layer.r, layer.stride, layer.groups > 1) for layer in SWEEP}
    assert {(1, 1, False), (1, 2, False), (3, 1, False), (3, 2, False), (3, 1, True),
            (5, 1, False)} <= kinds
    for layer in SWEEP:
        assert _SWEEP_MACS[0] <= layer.problem(1).flops / 2 <= _SWEEP_MACS[1], layer
        assert layer.groups in (1, layer.c) and layer.pad == layer.r // 2
    # The gap it was made for: pointwise layers with many outputs, which no network but
    # ResNet-50 has (so a model fitted without ResNet-50 had none).
    assert sum(layer.r == 1 and layer.k >= 512 for layer in SWEEP) >= 10


def test_an_unknown_network_names_the_sweep_among_the_known() -> None:
    with pytest.raises(ValueError, match=r"unknown network 'lenet'.*resnet50.*sweep"):
        network_layers("lenet")


def test_a_model_with_nothing_to_tune_says_why(tmp_path: Path) -> None:
    # Review finding 13: when every Conv was skipped, the error said "(1 skipped)" and the
    # reason (here: groups that do not divide the channels) was collected and dropped.
    path = save(tmp_path, [conv("grouped", "x", "w", "y", group=3)], [weight("w", (6, 1, 3, 3))],
                c=4)
    with pytest.raises(ValueError) as refused:
        onnx_problems(path, 1)
    assert str(refused.value) == (
        f"{path} has no 2-D Conv node convtune can tune (1 skipped: 'grouped': weight has 1 "
        "channels per group x group=3, input has c=4)"
    )
    # Past SKIPS_SHOWN nodes, the rest are counted, not listed: the error stays one line.
    many = [conv(f"c{i}", "x", "w", f"y{i}", pads=[1, 0, 0, 0]) for i in range(5)]
    path = save(tmp_path, many, [weight("w", (4, 3, 3, 3))])
    with pytest.raises(ValueError, match=r"\(5 skipped: 'c0': asymmetric padding .*'c1': .*"
                       r"'c2': asymmetric padding .*; 2 more\)$") as refused:
        onnx_problems(path, 1)
    assert "'c3'" not in str(refused.value) and "\n" not in str(refused.value)


# --- the networks against torch's own shape arithmetic --------------------------------------
def _convs_torch_runs(layers: list[Any], hw: int = 224) -> list[tuple[int, ...]]:
    """(c, h, w, k, r, s, pad, stride, groups) of every Conv2d `layers` run, from torch
    running them on a meta tensor (shapes only, no arithmetic), sorted. An entry of `layers`
    is a module; a list of branches (lists of modules) run on one input and concatenated
    along the channels (an inception module); or a tuple of modules run on the input for
    their convolutions alone, their output dropped (a projection shortcut)."""
    torch = pytest.importorskip("torch")
    runs: list[tuple[int, ...]] = []

    def run(modules: Any, x: Any) -> Any:
        for module in modules:
            if isinstance(module, tuple):
                run(module, x)
            elif isinstance(module, list):
                x = torch.cat([run(branch, x) for branch in module], dim=1)
            else:
                if isinstance(module, torch.nn.Conv2d):
                    assert module.padding[0] == module.padding[1]
                    assert module.stride[0] == module.stride[1]
                    runs.append((x.shape[1], x.shape[2], x.shape[3], module.out_channels,
                                 *module.kernel_size, module.padding[0], module.stride[0],
                                 module.groups))
                x = module(x)
        return x

    run(layers, torch.empty(1, 3, hw, hw, device="meta"))
    return sorted(runs)


def _conv(c: int, k: int, rs: int, stride: int = 1, pad: int = 0, groups: int = 1) -> Any:
    import torch

    return torch.nn.Conv2d(c, k, rs, stride, pad, groups=groups, bias=False, device="meta")


def _pool(size: int, stride: int, pad: int = 0, ceil: bool = False) -> Any:
    import torch

    return torch.nn.MaxPool2d(size, stride, pad, ceil_mode=ceil)


def _ours(name: str) -> list[tuple[int, ...]]:
    return sorted((layer.c, layer.h, layer.w, layer.k, layer.r, layer.s, layer.pad,
                   layer.stride, layer.groups)
                  for layer in network_layers(name) for _ in range(layer.count))


def _resnet50_v1() -> list[Any]:
    """torchvision's resnet50 with the stride on each stage's first 1x1 (v1, as our
    docstring says; torchvision's v1.5 strides the 3x3)."""
    layers: list[Any] = [_conv(3, 64, 7, 2, 3), _pool(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for block in range(blocks):
            s = stride if block == 0 else 1
            if block == 0:
                layers.append((_conv(cin, width * 4, 1, s),))  # the projection shortcut
            layers += [_conv(cin, width, 1, s), _conv(width, width, 3, 1, 1),
                       _conv(width, width * 4, 1)]
            cin = width * 4
    return layers


def _vgg16() -> list[Any]:
    layers: list[Any] = []
    cin = 3
    for k in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M"):
        if k == "M":
            layers.append(_pool(2, 2))
        else:
            layers.append(_conv(cin, int(k), 3, 1, 1))
            cin = int(k)
    return layers


def _alexnet() -> list[Any]:
    return [_conv(3, 64, 11, 4, 2), _pool(3, 2), _conv(64, 192, 5, 1, 2), _pool(3, 2),
            _conv(192, 384, 3, 1, 1), _conv(384, 256, 3, 1, 1), _conv(256, 256, 3, 1, 1)]


def _googlenet() -> list[Any]:
    """Table 1 of the paper (5x5 branches: torchvision's has 3x3 there), with torchvision's
    ceil-mode pools."""
    def inception(cin: int, c1: int, r3: int, c3: int, r5: int, c5: int, proj: int) -> Any:
        return [[_conv(cin, c1, 1)], [_conv(cin, r3, 1), _conv(r3, c3, 3, 1, 1)],
                [_conv(cin, r5, 1), _conv(r5, c5, 5, 1, 2)],
                [_pool(3, 1, 1, ceil=True), _conv(cin, proj, 1)]]

    return [_conv(3, 64, 7, 2, 3), _pool(3, 2, ceil=True), _conv(64, 64, 1),
            _conv(64, 192, 3, 1, 1), _pool(3, 2, ceil=True),
            inception(192, 64, 96, 128, 16, 32, 32), inception(256, 128, 128, 192, 32, 96, 64),
            _pool(3, 2, ceil=True),
            inception(480, 192, 96, 208, 16, 48, 64), inception(512, 160, 112, 224, 24, 64, 64),
            inception(512, 128, 128, 256, 24, 64, 64), inception(512, 112, 144, 288, 32, 64, 64),
            inception(528, 256, 160, 320, 32, 128, 128), _pool(2, 2, ceil=True),
            inception(832, 256, 160, 320, 32, 128, 128),
            inception(832, 384, 192, 384, 48, 128, 128)]


def _mobilenet_v2() -> list[Any]:
    layers: list[Any] = [_conv(3, 32, 3, 2, 1)]
    cin = 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            hidden = round(cin * t)
            if t != 1:
                layers.append(_conv(cin, hidden, 1))
            layers += [_conv(hidden, hidden, 3, s if i == 0 else 1, 1, groups=hidden),
                       _conv(hidden, c, 1)]
            cin = c
    return [*layers, _conv(cin, 1280, 1)]


# Mutation gap: each built-in network's convolutions, with repeats, are those torchvision's
# architecture runs at 224x224 (channels, sizes, filters, pads, strides, groups), the sizes
# computed by torch's own convolution and pooling layers: the FLOP bounds above miss a stride
# moved within a stage, a layer of AlexNet, or a channel count off in one inception module.
@pytest.mark.parametrize(("name", "build"), [
    ("resnet50", _resnet50_v1), ("vgg16", _vgg16), ("alexnet", _alexnet),
    ("googlenet", _googlenet), ("mobilenet_v2", _mobilenet_v2)])
def test_network_layers_are_the_architectures_convolutions(name: str, build: Any) -> None:
    assert _ours(name) == _convs_torch_runs(build())


# Mutation gap: a layer's problem carries its groups, pad, stride and the math asked for; a
# network's name is case-blind.
def test_a_layers_problem_carries_every_field() -> None:
    dw = next(layer for layer in network_layers("MobileNet_V2") if layer.stride == 2
              and layer.groups > 1)
    problem = dw.problem(4, "float16", "fp32")
    assert (problem.groups, problem.pad, problem.stride, problem.n, problem.dtype) == \
        (dw.groups, (1, 1), (2, 2), 4, "float16")
    assert network_layers("ResNet50") is network_layers("resnet50")
    assert {p.math for _, p in network_problems("alexnet", 2, "float32", "tf32")} == {"tf32"}


# Mutation gap: the sweep is the same list in every process and every release (stored
# results are keyed by its shapes, and it decides what the cost model learns from): its
# length and a digest of its shapes are pinned.
def test_the_sweep_is_pinned() -> None:
    import hashlib

    from tuner.networks import SWEEP

    shapes = [(layer.name, layer.c, layer.h, layer.k, layer.r, layer.pad, layer.stride,
               layer.groups, layer.count) for layer in SWEEP]
    assert len(SWEEP) == SWEEP_LENGTH
    assert hashlib.sha256(repr(shapes).encode()).hexdigest()[:16] == SWEEP_DIGEST


SWEEP_LENGTH, SWEEP_DIGEST = 124, "e22eb406966c4a13"
