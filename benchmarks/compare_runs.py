"""Two bench_gpu.py runs side by side, layer by layer: what a change did, and whether the
configurations that were new in the later run work and win.

Usage: python benchmarks/compare_runs.py OLD.json NEW.json [--out table.md] [--plot fig.png]
       python benchmarks/compare_runs.py --latest NEW.json [...]   (OLD: the newest stored
              run of the same mode on a GPU of the same name, under benchmarks/results)

For each layer both runs measured (same network, layer and problem): ours/cuDNN in each
run, each run's pick, cuDNN's time in the new run over the old (about 1.0 when the devices
and clocks agree; the ratios stay comparable when it does not), and the configurations
measured in the new run but not in the old one: the fastest of them over the layer's
fastest (1.00: a new configuration is the layer's best), and those that failed or gave a
wrong result. The summary counts the new configurations by family (tile sizes, stage and
split counts folded) and status, and the layers each family won. Reads stored times only:
no device needed. gpu_session.sh's `targets` step runs it on each bench_<mode>.json of a
call against the newest stored run (`--latest`), which is where the first measurements of
untried tiles show first.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.plot_gpu import TICKS  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"

#: A new pick at least this much slower against cuDNN than the old one is listed as a loss.
SLOWER = 0.05

#: Leading tile sizes ("128x128x32", "64x64", "16x16"), stage counts and split counts: what
#: a family's configurations differ in.
_TILE = re.compile(r"^\d+x\d+(x\d+)?")
_STAGES = re.compile(r"-s\d+")
_SPLIT = re.compile(r"-k\d+")

Config = tuple[str, str]  # (algorithm, configuration)


def family(algorithm: str, config: str) -> str:
    """The configuration's family: its algorithm and its options, tile and counts folded."""
    folded = _SPLIT.sub("-kS", _STAGES.sub("-sS", _TILE.sub("*", config)))
    return f"{algorithm}/{folded}"


def _key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["network"], row["layer"], json.dumps(row["problem"], sort_keys=True)


def measured(row: dict[str, Any]) -> dict[Config, dict[str, Any]]:
    """Every configuration the row measured (any status), by (algorithm, configuration)."""
    return {(name, config): entry
            for name, algorithm in row.get("algorithms", {}).items()
            for config, entry in algorithm.get("configs", {}).items()}


def _pick(row: dict[str, Any]) -> Config | None:
    tuned = row.get("tuned") or {}
    if tuned.get("algorithm") is None:
        return None
    return tuned["algorithm"], tuned.get("config", "")


def _ms(entry: dict[str, Any]) -> float | None:
    ms = entry.get("ms")
    return float(ms) if entry.get("status") == "ok" and ms else None


@dataclass(frozen=True)
class LayerChange:
    """One layer in both runs."""

    network: str
    layer: str
    describe: str
    old_ratio: float | None  # ours/cuDNN speed (above 1: ours faster)
    new_ratio: float | None
    old_pick: Config | None
    new_pick: Config | None
    cudnn_drift: float | None  # cuDNN's time, new run over old
    fresh: tuple[tuple[Config, str], ...]  # (config, status) measured in the new run only
    new_best: Config | None  # the fastest of those that ran correctly
    new_best_vs_fastest: float | None  # its time over the layer's fastest in the new run
    new_failures: tuple[tuple[Config, str, str], ...]  # (config, status, error)
    pick_is_new: bool  # the new run's pick is a configuration the old one never measured here

    @property
    def new_configs(self) -> int:
        """How many configurations the new run measured here that the old one did not."""
        return len(self.fresh)


@dataclass(frozen=True)
class Comparison:
    """Two runs' common layers, and how many of each run's layers the other lacks."""

    old: str
    new: str
    layers: tuple[LayerChange, ...]
    only_old: int
    only_new: int
    new_by_family: dict[str, Counter[str]]  # family -> its new configs' status counts
    wins_by_family: Counter[str]  # family -> layers whose pick is one of its new configs


def layer_change(old: dict[str, Any], new: dict[str, Any]) -> LayerChange:
    """What changed on one layer between two runs' rows of it."""
    before = measured(old)
    after = measured(new)
    fresh = {c: e for c, e in after.items() if c not in before}
    times = {c: t for c, e in after.items() if (t := _ms(e)) is not None}
    fastest = min(times.values(), default=None)
    fresh_times = {c: times[c] for c in fresh if c in times}
    best = min(fresh_times, key=fresh_times.__getitem__, default=None)
    old_cudnn = (old.get("cudnn") or {}).get("ms")
    new_cudnn = (new.get("cudnn") or {}).get("ms")
    failures = tuple((c, str(e.get("status")), str(e.get("error") or e.get("rel_error") or ""))
                     for c, e in sorted(fresh.items()) if e.get("status") != "ok")
    return LayerChange(
        network=new["network"], layer=new["layer"], describe=new.get("describe", ""),
        old_ratio=old.get("speed_vs_cudnn"), new_ratio=new.get("speed_vs_cudnn"),
        old_pick=_pick(old), new_pick=_pick(new),
        cudnn_drift=new_cudnn / old_cudnn if old_cudnn and new_cudnn else None,
        fresh=tuple((c, str(e.get("status"))) for c, e in sorted(fresh.items())),
        new_best=best,
        new_best_vs_fastest=(fresh_times[best] / fastest
                             if best is not None and fastest else None),
        new_failures=failures, pick_is_new=_pick(new) in fresh)


def compare(old: dict[str, Any], new: dict[str, Any], old_name: str = "old",
            new_name: str = "new") -> Comparison:
    """Two bench_gpu.py results (their JSON, loaded) compared on the layers both hold."""
    old_rows = {_key(r): r for r in old["rows"]}
    new_rows = {_key(r): r for r in new["rows"]}
    common = [k for k in new_rows if k in old_rows]
    layers = tuple(layer_change(old_rows[k], new_rows[k]) for k in common)
    by_family: dict[str, Counter[str]] = {}
    wins: Counter[str] = Counter()
    for change in layers:
        for config, status in change.fresh:
            by_family.setdefault(family(*config), Counter())[status] += 1
        if change.pick_is_new and change.new_pick is not None:
            wins[family(*change.new_pick)] += 1
    return Comparison(old=old_name, new=new_name, layers=layers,
                      only_old=len(old_rows) - len(common),
                      only_new=len(new_rows) - len(common),
                      new_by_family=by_family, wins_by_family=wins)


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _f(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _name(config: Config | None) -> str:
    return "-" if config is None else f"{config[0]}/{config[1]}"


def markdown(cmp: Comparison) -> str:
    """The comparison as Markdown: a summary, the families, then one row per layer."""
    both = [c for c in cmp.layers if c.old_ratio and c.new_ratio]
    old_mean = _geomean([c.old_ratio for c in both if c.old_ratio])
    new_mean = _geomean([c.new_ratio for c in both if c.new_ratio])
    drifts = [c.cudnn_drift for c in cmp.layers if c.cudnn_drift]
    slower = [c for c in both if c.new_ratio and c.old_ratio
              and c.new_ratio < c.old_ratio * (1 - SLOWER)]
    lines = [
        f"old: {cmp.old}", f"new: {cmp.new}", "",
        f"- layers in both runs: {len(cmp.layers)} (only in the old: {cmp.only_old}, only in "
        f"the new: {cmp.only_new})",
        f"- ours/cuDNN geomean over {len(both)} layers: {_f(old_mean)} -> {_f(new_mean)}",
        f"- cuDNN's time, new over old: median {_f(statistics.median(drifts) if drifts else None)}"
        f" (range {_f(min(drifts, default=None))}-{_f(max(drifts, default=None))})",
        f"- layers picked by a configuration new in this run: "
        f"{sum(c.pick_is_new for c in cmp.layers)}",
        f"- layers more than {SLOWER:.0%} slower against cuDNN: {len(slower)}"
        + (" (" + ", ".join(f"{c.network}:{c.layer}" for c in slower) + ")" if slower else ""),
        "",
    ]
    if cmp.new_by_family:
        lines += ["| new family | measured | ok | wrong | error | layers won |",
                  "|---|---|---|---|---|---|"]
        for name, counts in sorted(cmp.new_by_family.items()):
            lines.append(f"| {name} | {sum(counts.values())} | {counts['ok']} | "
                         f"{counts['wrong']} | {counts['error']} | "
                         f"{cmp.wins_by_family[name]} |")
        lines.append("")
    lines += ["| network | layer | ours/cuDNN old | new | pick old | pick new | cuDNN new/old "
              "| new configs | fastest new config (over the layer's fastest) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for c in cmp.layers:
        best = "-" if c.new_best is None else \
            f"{_name(c.new_best)} ({_f(c.new_best_vs_fastest, '.2f')})"
        lines.append(f"| {c.network} | {c.layer} | {_f(c.old_ratio)} | {_f(c.new_ratio)} | "
                     f"{_name(c.old_pick)} | {_name(c.new_pick)} | {_f(c.cudnn_drift, '.2f')} "
                     f"| {c.new_configs} | {best} |")
    failures = [(c, f) for c in cmp.layers for f in c.new_failures]
    if failures:
        lines += ["", "| network | layer | new configuration that did not pass | status | error |",
                  "|---|---|---|---|---|"]
        for c, (config, status, error) in failures:
            lines.append(f"| {c.network} | {c.layer} | {_name(config)} | {status} | "
                         f"{error.replace('|', '/')[:120]} |")
    return "\n".join(lines) + "\n"


def draw(cmp: Comparison, path: Path) -> None:
    """ours/cuDNN per layer in both runs, log scale (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = [c for c in cmp.layers if c.old_ratio and c.new_ratio]
    olds = [c.old_ratio or 0.0 for c in layers]
    news = [c.new_ratio or 0.0 for c in layers]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.28 * len(layers)), 4.0))
    xs = range(len(layers))
    ax.scatter(xs, olds, marker="o", facecolors="none", edgecolors="tab:gray",
               label=f"old: {Path(cmp.old).parent.name}")
    ax.scatter(xs, news, marker="o", color="tab:blue", label=f"new: {Path(cmp.new).parent.name}")
    for x, c, ratio in zip(xs, layers, news, strict=True):
        if c.pick_is_new:  # picked by a configuration the old run did not have
            ax.annotate("new", (x, ratio), fontsize=6, ha="center", xytext=(0, 4),
                        textcoords="offset points")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_yticks(TICKS, [f"{t:g}" for t in TICKS])
    ax.minorticks_off()
    ax.set_ylabel("ours / cuDNN speed")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{c.network[:3]}:{c.layer}" for c in layers], rotation=90, fontsize=6)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def latest(new: Path, results: Path = RESULTS) -> Path | None:
    """The newest stored run of `new`'s mode (its file name) on a GPU of the same name,
    before `new` where `new` is stored there too: folders are named by date first, so the
    last in order, and the search stops at the first that matches."""
    device = json.loads(new.read_text())["device"].get("name")
    stored = new.resolve().parent.parent == results.resolve()
    for path in sorted(results.glob(f"*/{new.name}"), reverse=True):
        if path.resolve() == new.resolve() or (stored and path.parent.name > new.parent.name):
            continue
        try:
            if json.loads(path.read_text())["device"].get("name") == device:
                return path
        except (ValueError, KeyError, AttributeError):
            continue
    return None


def compare_files(old: Path, new: Path) -> Comparison:
    """`compare` on two bench_gpu.py JSON files, named by their paths."""
    return compare(json.loads(old.read_text()), json.loads(new.read_text()), str(old), str(new))


def main(argv: list[str] | None = None) -> int:
    """Print (and optionally write and draw) the comparison; 2 on bad arguments."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="OLD.json NEW.json, or NEW.json "
                        "with --latest")
    parser.add_argument("--latest", action="store_true",
                        help="compare NEW.json with the newest stored run like it")
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    parser.add_argument("--plot", type=Path, help="draw ours/cuDNN per layer here (PNG)")
    args = parser.parse_args(argv)
    if len(args.runs) != (1 if args.latest else 2):
        parser.error("give OLD.json NEW.json, or one NEW.json with --latest")
    for path in args.runs:
        if not path.is_file():
            parser.error(f"no such file: {path}")
    if args.latest:
        new = args.runs[0]
        old = latest(new)
        if old is None:
            print(f"compare_runs: no stored {new.name} from the same GPU to compare with")
            return 0
    else:
        old, new = args.runs
    cmp = compare_files(old, new)
    text = markdown(cmp)
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    if args.plot:
        draw(cmp, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
