"""Built-in networks as sources of convolution shapes (layer lists from the papers)."""

from __future__ import annotations

from dataclasses import dataclass

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

    def problem(self, batch: int, dtype: str = "float32") -> ConvProblem:
        """The layer's ConvProblem at a batch size."""
        return ConvProblem(
            n=batch, c=self.c, h=self.h, w=self.w, k=self.k, r=self.r, s=self.s,
            pad=(self.pad, self.pad), stride=(self.stride, self.stride),
            dilation=(self.dilation, self.dilation), groups=self.groups, dtype=dtype,
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

NETWORKS: dict[str, tuple[Layer, ...]] = {
    "resnet50": RESNET50,
    "vgg16": VGG16,
    "alexnet": ALEXNET,
}


def network_layers(name: str) -> tuple[Layer, ...]:
    """The layers of a built-in network; ValueError lists the known names."""
    try:
        return NETWORKS[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown network {name!r}; built-in networks: {', '.join(sorted(NETWORKS))}"
        ) from None


def network_problems(
    name: str, batch: int, dtype: str = "float32"
) -> list[tuple[Layer, ConvProblem]]:
    """Each distinct convolution of a network at a batch size, in network order."""
    seen: set[ConvProblem] = set()
    out = []
    for layer in network_layers(name):
        problem = layer.problem(batch, dtype)
        if problem not in seen:
            seen.add(problem)
            out.append((layer, problem))
    return out
