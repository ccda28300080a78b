"""Built-in networks as sources of convolution shapes (layer lists from the papers), and a
synthetic "sweep" of layers between and around them, for the cost model to learn from."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, replace

from algorithms.problem import ConvProblem


@dataclass(frozen=True)
class Layer:
    """One convolution layer of a network, independent of the batch size."""

    name: str
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    pad: int = 0
    stride: int = 1
    groups: int = 1
    dilation: int = 1
    count: int = 1  # how many times the network runs this exact layer

    def problem(self, batch: int, dtype: str = "float32", math: str = "fp32") -> ConvProblem:
        """The layer's ConvProblem at a batch size."""
        return ConvProblem(
            n=batch, c=self.c, h=self.h, w=self.w, k=self.k, r=self.r, s=self.s,
            pad=(self.pad, self.pad), stride=(self.stride, self.stride),
            dilation=(self.dilation, self.dilation), groups=self.groups, dtype=dtype,
            math=math,
        )


def _l(name: str, hw: int, c: int, k: int, rs: int, pad: int = 0, stride: int = 1,
       count: int = 1, groups: int = 1) -> Layer:
    return Layer(name, c, hw, hw, k, rs, rs, pad, stride, groups, 1, count)


# ResNet-50 v1 (stride on the first 1x1 of a stage), distinct layers with repeat counts.
RESNET50 = (
    _l("conv1", 224, 3, 64, 7, 3, 2),
    _l("res2.1x1a", 56, 64, 64, 1),
    _l("res2.3x3", 56, 64, 64, 3, 1, count=3),
    _l("res2.1x1b", 56, 64, 256, 1, count=4),  # 3 blocks + the projection shortcut
    _l("res2.1x1a.rest", 56, 256, 64, 1, count=2),
    _l("res3.1x1a.s2", 56, 256, 128, 1, 0, 2),
    _l("res3.proj", 56, 256, 512, 1, 0, 2),
    _l("res3.3x3", 28, 128, 128, 3, 1, count=4),
    _l("res3.1x1b", 28, 128, 512, 1, count=4),
    _l("res3.1x1a.rest", 28, 512, 128, 1, count=3),
    _l("res4.1x1a.s2", 28, 512, 256, 1, 0, 2),
    _l("res4.proj", 28, 512, 1024, 1, 0, 2),
    _l("res4.3x3", 14, 256, 256, 3, 1, count=6),
    _l("res4.1x1b", 14, 256, 1024, 1, count=6),
    _l("res4.1x1a.rest", 14, 1024, 256, 1, count=5),
    _l("res5.1x1a.s2", 14, 1024, 512, 1, 0, 2),
    _l("res5.proj", 14, 1024, 2048, 1, 0, 2),
    _l("res5.3x3", 7, 512, 512, 3, 1, count=3),
    _l("res5.1x1b", 7, 512, 2048, 1, count=3),
    _l("res5.1x1a.rest", 7, 2048, 512, 1, count=2),
)

# VGG-16 (configuration D): every convolution is 3x3, pad 1, stride 1.
VGG16 = (
    _l("conv1_1", 224, 3, 64, 3, 1),
    _l("conv1_2", 224, 64, 64, 3, 1),
    _l("conv2_1", 112, 64, 128, 3, 1),
    _l("conv2_2", 112, 128, 128, 3, 1),
    _l("conv3_1", 56, 128, 256, 3, 1),
    _l("conv3_2", 56, 256, 256, 3, 1, count=2),
    _l("conv4_1", 28, 256, 512, 3, 1),
    _l("conv4_2", 28, 512, 512, 3, 1, count=2),
    _l("conv5_1", 14, 512, 512, 3, 1, count=3),
)

# AlexNet (one-tower variant, as in torchvision).
ALEXNET = (
    _l("conv1", 224, 3, 64, 11, 2, 4),
    _l("conv2", 27, 64, 192, 5, 2),
    _l("conv3", 13, 192, 384, 3, 1),
    _l("conv4", 13, 384, 256, 3, 1),
    _l("conv5", 13, 256, 256, 3, 1),
)

def _shape(layer: Layer) -> tuple[int, ...]:
    """Everything of a layer but its name and count."""
    return (layer.c, layer.h, layer.w, layer.k, layer.r, layer.s, layer.pad, layer.stride,
            layer.groups, layer.dilation)


def _merged(layers: list[Layer]) -> tuple[Layer, ...]:
    """Layers with identical shapes folded into the first one, their counts added."""
    out: dict[tuple[int, ...], Layer] = {}
    for layer in layers:
        shape = _shape(layer)
        first = out.get(shape)
        out[shape] = layer if first is None else replace(first, count=first.count + layer.count)
    return tuple(out.values())


def _googlenet() -> tuple[Layer, ...]:
    """GoogLeNet (Inception v1, Szegedy et al. 2014, table 1), inference path only.

    Each inception module runs 1x1, 1x1 -> 3x3 (pad 1), 1x1 -> 5x5 (pad 2) and a 1x1
    projection after the 3x3 max pool; the auxiliary classifiers (training only) are left out.
    """
    layers = [
        _l("conv1.7x7.s2", 224, 3, 64, 7, 3, 2),
        _l("conv2.3x3reduce", 56, 64, 64, 1),
        _l("conv2.3x3", 56, 64, 192, 3, 1),
    ]
    # name, input size, in channels, #1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool proj
    modules = (
        ("3a", 28, 192, 64, 96, 128, 16, 32, 32),
        ("3b", 28, 256, 128, 128, 192, 32, 96, 64),
        ("4a", 14, 480, 192, 96, 208, 16, 48, 64),
        ("4b", 14, 512, 160, 112, 224, 24, 64, 64),
        ("4c", 14, 512, 128, 128, 256, 24, 64, 64),
        ("4d", 14, 512, 112, 144, 288, 32, 64, 64),
        ("4e", 14, 528, 256, 160, 320, 32, 128, 128),
        ("5a", 7, 832, 256, 160, 320, 32, 128, 128),
        ("5b", 7, 832, 384, 192, 384, 48, 128, 128),
    )
    for name, hw, cin, c1, r3, c3, r5, c5, proj in modules:
        layers += [
            _l(f"inception{name}.1x1", hw, cin, c1, 1),
            _l(f"inception{name}.3x3reduce", hw, cin, r3, 1),
            _l(f"inception{name}.3x3", hw, r3, c3, 3, 1),
            _l(f"inception{name}.5x5reduce", hw, cin, r5, 1),
            _l(f"inception{name}.5x5", hw, r5, c5, 5, 2),
            _l(f"inception{name}.poolproj", hw, cin, proj, 1),
        ]
    return _merged(layers)


def _mobilenet_v2() -> tuple[Layer, ...]:
    """MobileNet-v2 (Sandler et al. 2018, table 2) at 224x224, width multiplier 1.0.

    Each inverted residual block expands with a 1x1 (t times the channels; skipped when
    t == 1), filters with a depthwise 3x3 (groups == channels, pad 1, the block's stride)
    and projects with a 1x1.
    """
    layers = [_l("conv1.3x3.s2", 224, 3, 32, 3, 1, 2)]
    hw, cin = 112, 32
    # t (expansion), c (output channels), n (repeats), s (stride of the first block)
    for stage, (t, c, n, s) in enumerate(
        ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
         (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)),
        start=1,
    ):
        for block in range(n):
            stride = s if block == 0 else 1
            hidden = cin * t
            name = f"block{stage}.{block + 1}"
            if t != 1:
                layers.append(_l(f"{name}.expand", hw, cin, hidden, 1))
            layers.append(_l(f"{name}.dw3x3", hw, hidden, hidden, 3, 1, stride, groups=hidden))
            hw = (hw + 2 - 3) // stride + 1
            layers.append(_l(f"{name}.project", hw, hidden, c, 1))
            cin = c
    layers.append(_l("conv_last.1x1", hw, cin, 1280, 1))
    return _merged(layers)


#: Channel counts of the sweep: those the built-in networks use (16-2048, some not powers of
#: two, as MobileNet-v2's 24, 144 and 960 are).
_SWEEP_WIDTHS = (16, 24, 32, 48, 64, 96, 128, 144, 160, 192, 256, 320, 384, 512, 576, 768,
                 960, 1024, 1280, 2048)
#: (weight, filter size, stride, depthwise) of the sweep's layer kinds: mostly pointwise and
#: 3x3, as in the networks, with strided, depthwise and 5x5 ones among them.
_SWEEP_KINDS = ((36, 1, 1, False), (8, 1, 2, False), (26, 3, 1, False), (8, 3, 2, False),
                (8, 3, 1, True), (4, 3, 2, True), (6, 5, 1, False), (4, 7, 2, False))
_SWEEP_SIZES = ((112, 1), (56, 2), (28, 3), (14, 3), (7, 2))  # (height = width, weight)
#: Multiply-accumulates per image a sweep layer stays within: ResNet-50's largest are 1.2e8
#: and MobileNet-v2's smallest 1e6; above this bound a batch-32 layer's slowest
#: configurations would cost a benchmark seconds each.
_SWEEP_MACS = (1e6, 2.5e8)


def _sweep(networks: Iterable[tuple[Layer, ...]], count: int = 128, seed: int = 2026
           ) -> tuple[Layer, ...]:
    """Up to `count` network-like layers drawn (with a fixed seed, so the same list each
    time) over the widths, sizes and kinds above, none of the same shape as a layer of
    `networks` (so that a network held out has nothing of its own in the sweep).

    Why: the cost model learns from the networks measured, and four networks leave gaps
    that an unseen one falls into: with ResNet-50 held out, no TF32 training layer is a
    pointwise one with 512-2048 outputs, and the model carried what 3x3 layers taught it
    there (BENCHMARKS.md, "A sweep for the cost model"). Tuning the sweep once per device
    kind fills those gaps, as MIOpen's and TVM's models learn from many shapes, not a few
    networks.
    """
    rng = random.Random(seed)
    taken = {_shape(layer) for layers in networks for layer in layers}
    kinds = [kind for kind in _SWEEP_KINDS for _ in range(kind[0])]
    sizes = [hw for hw, weight in _SWEEP_SIZES for _ in range(weight)]
    layers: list[Layer] = []
    while len(layers) < count:
        _, rs, stride, depthwise = rng.choice(kinds)
        hw, c = rng.choice(sizes), rng.choice(_SWEEP_WIDTHS)
        k = c if depthwise else rng.choice(_SWEEP_WIDTHS)
        if rs == 7:  # a stem: few input channels on a large image
            hw, c = 224, 3
        macs = (c if not depthwise else 1) * k * rs * rs * (hw // stride) ** 2
        if not _SWEEP_MACS[0] <= macs <= _SWEEP_MACS[1]:
            continue
        name = f"sweep{len(layers)}.{'dw' if depthwise else ''}{rs}x{rs}" + \
            (f".s{stride}" if stride > 1 else "")
        layer = _l(name, hw, c, k, rs, rs // 2, stride, groups=c if depthwise else 1)
        if _shape(layer) not in taken:
            layers.append(layer)
    return _merged(layers)


GOOGLENET = _googlenet()
MOBILENET_V2 = _mobilenet_v2()

NETWORKS: dict[str, tuple[Layer, ...]] = {
    "resnet50": RESNET50,
    "vgg16": VGG16,
    "alexnet": ALEXNET,
    "googlenet": GOOGLENET,
    "mobilenet_v2": MOBILENET_V2,
}
#: Shape sources that are not networks: tuned like one (`convtune tune --model sweep`) to
#: give the cost model more to learn from; never held out or scored as a network.
SWEEP = _sweep(NETWORKS.values())
SYNTHETIC: dict[str, tuple[Layer, ...]] = {"sweep": SWEEP}


def network_layers(name: str) -> tuple[Layer, ...]:
    """The layers of a built-in network (or the sweep); ValueError lists the known names."""
    found = NETWORKS.get(name.lower()) or SYNTHETIC.get(name.lower())
    if found is None:
        raise ValueError(f"unknown network {name!r}; built-in networks: "
                         f"{', '.join(sorted(NETWORKS))}, and the synthetic "
                         f"{', '.join(sorted(SYNTHETIC))}")
    return found


def network_problems(
    name: str, batch: int, dtype: str = "float32", math: str = "fp32"
) -> list[tuple[Layer, ConvProblem]]:
    """Each distinct convolution of a network at a batch size, in network order."""
    seen: set[ConvProblem] = set()
    out = []
    for layer in network_layers(name):
        problem = layer.problem(batch, dtype, math)
        if problem not in seen:
            seen.add(problem)
            out.append((layer, problem))
    return out
