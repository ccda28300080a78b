"""benchmarks/plot_gpu.py's panels, from synthetic bench_gpu results (no plotting)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.plot_gpu import small_panels, speed_panels


def _bench(folder: Path, mode: str, rows: list[tuple[str, str, float | None]]) -> None:
    (folder / f"bench_{mode}.json").write_text(json.dumps({"rows": [
        {"network": network, "layer": layer, "speed_vs_cudnn": ratio}
        for network, layer, ratio in rows]}))


def test_panels_per_mode_and_per_small_network(tmp_path: Path) -> None:
    _bench(tmp_path, "fp32", [("resnet50", "conv1", 1.2), ("vgg16", "conv1_1", 0.9),
                              ("resnet50", "res2.3x3", None)])
    _bench(tmp_path, "small", [("googlenet", "inception3b.5x5", 0.99),
                               ("mobilenet_v2", "block1.1.dw3x3", 2.0)])
    assert speed_panels(tmp_path) == {"forward, strict FP32": [("conv1", 1.2)]}
    assert small_panels(tmp_path) == {
        "GoogLeNet b32, strict FP32": [("inception3b.5x5", 0.99)],
        "MobileNet-v2 b32, strict FP32": [("block1.1.dw3x3", 2.0)],
    }
    assert small_panels(tmp_path / "nothing") == {}
