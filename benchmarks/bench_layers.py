"""The layers a GPU benchmark run covers: each network's distinct convolutions as problems,
from tuner.networks, or from a list of its own where the tuner cannot be imported (a GPU
image without SQLAlchemy: bench_gpu then still measures ResNet-50 and VGG-16)."""

from __future__ import annotations

from dataclasses import replace

from algorithms.problem import ConvProblem

# (name, h=w, c, k, filter, pad, stride) from shared/ANCHORS.md; used only when
# tuner.networks (the project's own layer lists) cannot be imported.
_FALLBACK_LAYERS: dict[str, list[tuple[str, int, int, int, int, int, int]]] = {
    "resnet50": [
        ("conv1", 224, 3, 64, 7, 3, 2), ("res2.1x1a", 56, 64, 64, 1, 0, 1),
        ("res2.3x3", 56, 64, 64, 3, 1, 1), ("res2.1x1b", 56, 64, 256, 1, 0, 1),
        ("res2.1x1a.rest", 56, 256, 64, 1, 0, 1), ("res3.1x1a.s2", 56, 256, 128, 1, 0, 2),
        ("res3.proj", 56, 256, 512, 1, 0, 2), ("res3.3x3", 28, 128, 128, 3, 1, 1),
        ("res3.1x1b", 28, 128, 512, 1, 0, 1), ("res3.1x1a.rest", 28, 512, 128, 1, 0, 1),
        ("res4.1x1a.s2", 28, 512, 256, 1, 0, 2), ("res4.proj", 28, 512, 1024, 1, 0, 2),
        ("res4.3x3", 14, 256, 256, 3, 1, 1), ("res4.1x1b", 14, 256, 1024, 1, 0, 1),
        ("res4.1x1a.rest", 14, 1024, 256, 1, 0, 1), ("res5.1x1a.s2", 14, 1024, 512, 1, 0, 2),
        ("res5.proj", 14, 1024, 2048, 1, 0, 2), ("res5.3x3", 7, 512, 512, 3, 1, 1),
        ("res5.1x1b", 7, 512, 2048, 1, 0, 1), ("res5.1x1a.rest", 7, 2048, 512, 1, 0, 1),
    ],
    "vgg16": [
        ("conv1_1", 224, 3, 64, 3, 1, 1), ("conv1_2", 224, 64, 64, 3, 1, 1),
        ("conv2_1", 112, 64, 128, 3, 1, 1), ("conv2_2", 112, 128, 128, 3, 1, 1),
        ("conv3_1", 56, 128, 256, 3, 1, 1), ("conv3_2", 56, 256, 256, 3, 1, 1),
        ("conv4_1", 28, 256, 512, 3, 1, 1), ("conv4_2", 28, 512, 512, 3, 1, 1),
        ("conv5_1", 14, 512, 512, 3, 1, 1),
    ],
}


def layer_problems(network: str, batch: int, dtype: str, math: str = "fp32",
                   direction: str = "forward") -> list[tuple[str, ConvProblem]]:
    """(layer name, problem) for each distinct convolution of a network."""
    try:
        from tuner.networks import network_problems
    except ImportError:
        return [
            (name, ConvProblem(n=batch, c=c, h=hw, w=hw, k=k, r=f, s=f, pad=p, stride=s,
                               dtype=dtype, math=math, direction=direction))
            for name, hw, c, k, f, p, s in _FALLBACK_LAYERS[network]
        ]
    return [(layer.name, replace(problem, direction=direction))
            for layer, problem in network_problems(network, batch, dtype, math)]
