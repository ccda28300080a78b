"""benchmarks/plot_gpu.py's panels, from synthetic bench_gpu results, and its comparisons."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.plot_gpu import draw_comparisons, small_panels, speed_panels


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


def test_each_bench_file_is_drawn_beside_the_run_stored_before_it(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")

    def run(folder: str, mode: str, ratio: float, gpu: str = "GPU") -> Path:
        path = tmp_path / folder / f"bench_{mode}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"device": {"name": gpu}, "rows": [
            {"network": "resnet50", "layer": "conv1", "problem": {"n": 1},
             "speed_vs_cudnn": ratio, "algorithms": {}, "tuned": {}, "cudnn": {}}]}))
        return path

    run("2026-11-27-a", "fp32", 1.0)
    run("2026-11-27-a", "tf32", 0.9, gpu="other GPU")
    new = run("2026-11-28-b", "fp32", 1.2)
    run("2026-11-28-b", "tf32", 1.1)
    draw_comparisons(new.parent, tmp_path)
    # fp32 has an earlier run on the same GPU; tf32's earlier run is another GPU's.
    assert (new.parent / "compare_fp32.png").stat().st_size > 1000
    assert not (new.parent / "compare_tf32.png").exists()
