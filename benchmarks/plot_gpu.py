"""Plots of one GPU session's results: per-layer speed against cuDNN, and tuner regret.

Usage: python benchmarks/plot_gpu.py RESULTS_DIR

RESULTS_DIR holds what benchmarks/gpu_session.sh wrote: bench_<mode>.json files from
bench_gpu.py, tuner.json, tuner_unbatched.json, tuner_fast.json, tuner_vgg16.json and
tuner_mobilenet_v2.json from bench_tuner.py (any may be missing). Writes into the same
folder speed_vs_cudnn.png (ours/cuDNN per ResNet-50 layer, one panel per mode, log scale),
speed_vs_cudnn_small.png (the same for GoogLeNet and MobileNet-v2 from bench_small*.json,
one panel per network and mode), regret.png (the tuner's pick against the best
configuration re-measured alone, ResNet-50's runs together), regret_<network>.png for
the other networks, and compare_<mode>.png for each bench_<mode>.json: ours/cuDNN per layer
beside the newest earlier stored run of that mode on the same GPU (compare_runs.py). Needs
matplotlib (not a project dependency: `pip install matplotlib`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: bench_gpu modes in the order they are drawn, with their panel titles.
MODES = {
    "fp32": "forward, strict FP32",
    "tf32": "forward, TF32 allowed",
    "fp16": "forward, float16",
    "bwd_data": "backward_data, FP32",
    "bwd_filter": "backward_filter, FP32",
}


#: The networks gpu_session.sh's tuner_more step tunes besides ResNet-50.
OTHER_TUNED = ("vgg16", "mobilenet_v2")


#: Speed-ratio ticks on the log axis.
TICKS = (0.1, 0.25, 0.5, 1, 2, 4)


def _load(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


#: The small networks' bench_gpu modes (GoogLeNet b32 and MobileNet-v2 b32).
SMALL_MODES = {"small": "strict FP32", "small_tf32": "TF32 allowed", "small_fp16": "float16"}
SMALL_NETWORKS = {"googlenet": "GoogLeNet b32", "mobilenet_v2": "MobileNet-v2 b32"}


def speed_panels(folder: Path, network: str = "resnet50") -> dict[str, list[tuple[str, float]]]:
    """Per mode, (layer, ours/cuDNN) for each layer of `network` that has both times."""
    panels: dict[str, list[tuple[str, float]]] = {}
    for mode, title in MODES.items():
        rows = _speeds(folder, mode, network)
        if rows is not None:
            panels[title] = rows
    return panels


def small_panels(folder: Path) -> dict[str, list[tuple[str, float]]]:
    """Per small network and mode, (layer, ours/cuDNN) as `speed_panels` gives them."""
    panels: dict[str, list[tuple[str, float]]] = {}
    for network, name in SMALL_NETWORKS.items():
        for mode, title in SMALL_MODES.items():
            rows = _speeds(folder, mode, network)
            if rows:
                panels[f"{name}, {title}"] = rows
    return panels


def _speeds(folder: Path, mode: str, network: str) -> list[tuple[str, float]] | None:
    data = _load(folder / f"bench_{mode}.json")
    if data is None:
        return None
    return [(row["layer"], row["speed_vs_cudnn"]) for row in data["rows"]
            if row["network"] == network and row.get("speed_vs_cudnn")]


def draw_speeds(panels: dict[str, list[tuple[str, float]]], title: str, path: Path) -> None:
    """One horizontal bar panel per entry of `panels`, ours/cuDNN on a log axis."""
    import matplotlib.pyplot as plt

    tallest = max(len(rows) for rows in panels.values())
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 1.5 + 0.23 * tallest),
                             sharex=True)
    axes = [axes] if len(panels) == 1 else list(axes)
    for ax, (name, rows) in zip(axes, panels.items(), strict=True):
        ratios = [ratio for _, ratio in rows]
        ax.barh(range(len(rows)), ratios,
                color=["tab:green" if r >= 1 else "tab:red" for r in ratios])
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlim(0.05, 5)
        ax.set_xticks(TICKS, [f"{t:g}" for t in TICKS])
        ax.minorticks_off()
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("ours / cuDNN speed")
        ax.set_yticks(range(len(rows)), [layer for layer, _ in rows], fontsize=6)
        ax.invert_yaxis()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    """Draw the figures for the folder named on the command line."""
    import matplotlib

    matplotlib.use("Agg")  # files only, whatever display there is
    folder = Path(sys.argv[1])
    panels = speed_panels(folder)
    if panels:
        draw_speeds(panels, f"ResNet-50 b32 per layer, {folder.name}",
                    folder / "speed_vs_cudnn.png")
    small = small_panels(folder)
    if small:
        draw_speeds(small, f"GoogLeNet and MobileNet-v2 per layer, {folder.name}",
                    folder / "speed_vs_cudnn_small.png")
    runs = {name: data for name in ("tuner", "tuner_unbatched", "tuner_fast")
            if (data := _load(folder / f"{name}.json")) is not None}
    if runs:
        draw_regret(runs, folder / "regret.png")
    for network in OTHER_TUNED:  # bench_tuner's other networks (gpu_session.sh tuner_more)
        if (data := _load(folder / f"tuner_{network}.json")) is not None:
            draw_regret({f"tuner_{network}": data}, folder / f"regret_{network}.png")
    draw_comparisons(folder)


def draw_comparisons(folder: Path, results: Path | None = None) -> None:
    """compare_<mode>.png for each bench_<mode>.json with an earlier stored run (under
    `results`, default benchmarks/results) to face."""
    from benchmarks import compare_runs

    for new in sorted(folder.glob("bench_*.json")):
        old = compare_runs.latest(new, results or compare_runs.RESULTS)
        if old is not None:
            compare_runs.draw(compare_runs.compare_files(old, new),
                              folder / f"compare_{new.stem.removeprefix('bench_')}.png")


def draw_regret(runs: dict[str, Any], path: Path) -> None:
    """Per layer, each run's regret (its pick re-measured alone against the best alone),
    as bars beside the 5% target; the layers are the first run's."""
    import matplotlib.pyplot as plt

    first = next(iter(runs.values()))
    layers = [row["layer"] for row in first["rows"]]
    fig, ax = plt.subplots(figsize=(6.5, max(3.0, 0.19 * len(layers) + 1.5)))
    height = 0.8 / len(runs)
    for slot, (name, data) in enumerate(runs.items()):
        regrets = {row["layer"]: 100 * row["regret"] for row in data["rows"]}
        ax.barh([i + slot * height for i in range(len(layers))],
                [regrets.get(layer, 0.0) for layer in layers], height=height,
                label=f"{name}: tuning {data['tune_s']:.1f} s")
    ax.axvline(5, color="black", linewidth=0.8, linestyle="--")
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(layers))], layers, fontsize=7)
    ax.invert_yaxis()
    ax.legend(fontsize=8)
    ax.set_xlabel("regret, % (pick re-measured alone vs best alone); dashed: 5% target")
    ax.set_title(f"tuner regret, {first['model']} b{first['batch']}, "
                 f"{first['device_name']}, {first['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
