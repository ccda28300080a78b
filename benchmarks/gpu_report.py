"""bench_gpu's report: per-layer Markdown tables, geometric means, depthwise bandwidth.

Pure functions of the rows bench_gpu.py measures (so tests check them on synthetic rows).
Run as a script on stored bench_gpu.py JSON files, it prints their summaries again (with
whatever this code now sums up, such as the means by kind of layer):

    python benchmarks/gpu_report.py bench_fp32.json [bench_tf32.json ...]
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from algorithms.registry import algorithms_for

#: An H100's HBM copy rate, measured with a device-to-device copy (issue 10), in GB/s.
HBM_COPY_GBPS = 3000.0


def write_json(data: dict[str, Any], out: Path, indent: int = 1) -> None:
    """`data` as JSON at `out`, written whole, then moved over the last: a step's time limit
    that ends the process mid-write leaves the previous report, not a truncated file that
    the targets table then fails to read."""
    partial = out.with_name(out.name + ".partial")
    partial.write_text(json.dumps(data, indent=indent, default=str))
    os.replace(partial, out)


def alternating(time: Callable[[Callable[[], Any]], float], ours: Callable[[], Any],
                theirs: Callable[[], Any], rounds: int) -> dict[str, Any]:
    """Our pick and cuDNN timed in alternating rounds, A B B A A B ... (`time` gives one
    round's ms of a call), and each side's median over its rounds.

    A pick's time from selection is the least of some thirty candidates' medians, low by
    their noise (the winner of many noisy draws), and cuDNN was timed once, seconds later,
    on clocks that had moved on: both biased a ratio whose bars (1.0, 0.9) are a few
    percent away. Rounds in ABBA order put both sides on the same clocks, each first as
    often as second."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    times: dict[str, list[float]] = {"ours": [], "cudnn": []}
    for i in range(rounds):
        order = (("ours", ours), ("cudnn", theirs))
        for side, call in order if i % 2 == 0 else order[::-1]:
            times[side].append(time(call))
    return {"rounds": rounds, **{f"{side}_ms": statistics.median(t) for side, t in
                                 times.items()},
            **{f"{side}_rounds_ms": t for side, t in times.items()}}


def _gbps(nbytes: int, ms: float | None) -> float | None:
    return nbytes / (ms * 1e-3) / 1e9 if ms else None


def bandwidth(row: dict[str, Any], nbytes: int, hbm_gbps: float) -> dict[str, Any]:
    """A depthwise layer's effective GB/s: our pick, the depthwise algorithm and cuDNN.

    `nbytes` is what the layer must move at least (x, w and y once each); each rate is
    that over the measured time, and each `_vs_hbm` its fraction of the HBM copy rate.
    """
    rates = {
        "tuned_gbps": _gbps(nbytes, row["tuned"].get("ms")),
        "depthwise_gbps": _gbps(nbytes, row["algorithms"].get("depthwise", {}).get("ms")),
        "cudnn_gbps": _gbps(nbytes, row["cudnn"].get("ms")),
    }
    out: dict[str, Any] = {"bytes": nbytes, "hbm_gbps": hbm_gbps, **rates}
    for key, rate in rates.items():
        out[key.replace("_gbps", "_vs_hbm")] = rate / hbm_gbps if rate else None
    return out


def device_summary(row: dict[str, Any]) -> dict[str, Any]:
    """A layer's device times, the host's enqueueing left out (bench_gpu's `device_ms`):
    the tuned pick's (its algorithm's best configuration, when that is the pick), the
    fastest algorithm's, cuDNN's, and ours/cuDNN speed from them. `tuned_host_share` is
    how much longer the pick took with the host than without: near 1 device-bound, above 1
    the GPU waited on our Python between runs."""
    algorithms = row["algorithms"]
    device = {name: e["device_ms"] for name, e in algorithms.items() if e.get("device_ms")}
    tuned = row["tuned"]
    pick = algorithms.get(tuned.get("algorithm"), {})
    tuned_ms = pick.get("device_ms") if pick.get("best_config") == tuned.get("config") else None
    best = min(device, key=device.__getitem__, default=None)
    cudnn_ms = row["cudnn"].get("device_ms")
    out: dict[str, Any] = {"tuned_ms": tuned_ms, "best_algorithm": best,
                           "best_ms": device.get(best) if best else None, "cudnn_ms": cudnn_ms}
    out["tuned_vs_cudnn"] = cudnn_ms / tuned_ms if cudnn_ms and tuned_ms else None
    out["best_vs_cudnn"] = cudnn_ms / out["best_ms"] if cudnn_ms and out["best_ms"] else None
    out["tuned_host_share"] = tuned["ms"] / tuned_ms if tuned.get("ms") and tuned_ms else None
    return out


def _geomean(values: list[float]) -> float | None:
    good = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else None


def fmt(v: float | None, spec: str = ".3f") -> str:
    """`v` formatted, or "-" when missing."""
    return "-" if v is None else format(v, spec)


def markdown(report: dict[str, Any]) -> str:
    """The per-layer table, the GEMM table and the geometric means."""
    names = [a.name for a in algorithms_for("cuda")]
    head = ["network", "layer", "problem", *[f"{n} ms" for n in names], "tuned",
            "tuned ms", "tuned TFLOP/s", "tuned rel. err", "cuDNN ms", "cuDNN TFLOP/s",
            "cuDNN rel. err", "ours/cuDNN"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in report["rows"]:
        algs = row["algorithms"]
        tuned, cudnn = row["tuned"], row["cudnn"]
        cells = [row["network"], row["layer"], row["describe"],
                 *[fmt(algs.get(n, {}).get("ms")) for n in names],
                 f"{tuned.get('algorithm', '-')}/{tuned.get('config', '-')}",
                 fmt(tuned.get("ms")), fmt(tuned.get("tflops"), ".1f"),
                 fmt(tuned.get("rel_error"), ".1e"),
                 fmt(cudnn.get("ms")), fmt(cudnn.get("tflops"), ".1f"),
                 fmt(cudnn.get("rel_error"), ".1e"),
                 fmt(row.get("speed_vs_cudnn"), ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
    gemm_rows = [r for r in report["rows"] if "gemm" in r]
    if gemm_rows:
        lines += ["", "| layer | M x N x K | cupy.matmul TFLOP/s | implicit_gemm TFLOP/s | ratio |",
                  "|---|---|---|---|---|"]
        for r in gemm_rows:
            g = r["gemm"]
            lines.append(f"| {r['network']}/{r['layer']} | {g['m']} x {g['n']} x {g['k']} | "
                         f"{fmt(g['matmul_tflops'], '.1f')} | "
                         f"{fmt(g['implicit_gemm_tflops'], '.1f')} | "
                         f"{fmt(g['implicit_vs_matmul'], '.2f')} |")
    dw_rows = [r for r in report["rows"] if "bandwidth" in r]
    if dw_rows:
        lines += ["", "| depthwise layer | MB moved | tuned | tuned GB/s | depthwise GB/s | "
                  "cuDNN GB/s | depthwise / HBM copy |", "|---|---|---|---|---|---|---|"]
        for r in dw_rows:
            b, tuned = r["bandwidth"], r["tuned"]
            lines.append(f"| {r['network']}/{r['layer']} | {b['bytes'] / 1e6:.1f} | "
                         f"{tuned.get('algorithm', '-')}/{tuned.get('config', '-')} | "
                         f"{fmt(b['tuned_gbps'], '.0f')} | {fmt(b['depthwise_gbps'], '.0f')} | "
                         f"{fmt(b['cudnn_gbps'], '.0f')} | {fmt(b['depthwise_vs_hbm'], '.2f')} |")
    device_rows = [r for r in report["rows"] if r.get("device", {}).get("cudnn_ms")]
    if device_rows:
        lines += ["", "| layer, device time alone | tuned ms | wall / device | fastest | "
                  "fastest ms | cuDNN ms | tuned / cuDNN | fastest / cuDNN |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in device_rows:
            d = r["device"]
            lines.append(f"| {r['network']}/{r['layer']} | {fmt(d['tuned_ms'])} | "
                         f"{fmt(d['tuned_host_share'], '.2f')} | {d['best_algorithm'] or '-'} | "
                         f"{fmt(d['best_ms'])} | {fmt(d['cudnn_ms'])} | "
                         f"{fmt(d['tuned_vs_cudnn'], '.2f')} | {fmt(d['best_vs_cudnn'], '.2f')} |")
    return "\n".join([*lines, "", *summary_lines(report["summary"])])


def summary_lines(summary: dict[str, float | None]) -> list[str]:
    """The summary as a Markdown table, one line per entry."""
    return ["| summary | geometric mean or count |", "|---|---|",
            *(f"| {key} | {fmt(value, '.0f' if key.startswith('layers') else '.3f')} |"
              for key, value in summary.items())]


def layer_kind(key: dict[str, Any]) -> str:
    """A layer's kind for the summary, from its problem key: its filter ("3x3"), "dw" first
    when depthwise, " sN" after when strided."""
    kind = f"{key['r']}x{key['s']}"
    if key.get("groups", 1) > 1 and key["groups"] == key["c"] == key["k"]:
        kind = f"dw {kind}"
    stride = max(key.get("stride_h", 1), key.get("stride_w", 1))
    return f"{kind} s{stride}" if stride > 1 else kind


def summarize(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Geometric means of ours/cuDNN speed, of GEMM ratios and of depthwise GB/s vs HBM.

    A layer without both timings (ours failed, cuDNN skipped) is left out of a mean, and the
    `layers counted` entries say how many layers each mean covers, so a gap cannot hide.
    """
    out: dict[str, float | None] = {}
    groups = {network: [r for r in rows if r["network"] == network]
              for network in sorted({r["network"] for r in rows})}
    groups["all"] = rows
    # By kind of layer too (the synthetic sweep is one "network" of every kind).
    kinds: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if "problem" in r:
            kinds.setdefault(layer_kind(r["problem"]), []).append(r)
    groups.update((f"kind {kind}", kinds[kind]) for kind in sorted(kinds))
    for label, group in groups.items():
        speeds = [r["speed_vs_cudnn"] for r in group if r.get("speed_vs_cudnn")]
        out[f"ours/cuDNN speed, {label}"] = _geomean(speeds)
        out[f"layers counted, {label}"] = float(len(speeds))
        out[f"layers, {label}"] = float(len(group))
        # The issue's "no layer below" bars read this one.
        out[f"slowest layer, ours/cuDNN, {label}"] = min(speeds) if speeds else None
        for key, wording in (("tuned_vs_cudnn", "tuned"), ("best_vs_cudnn", "fastest")):
            device = [r["device"][key] for r in group if r.get("device", {}).get(key)]
            if device:
                out[f"ours/cuDNN device time, {wording}, {label}"] = _geomean(device)
                out[f"layers counted, device {wording}, {label}"] = float(len(device))
    ratios = [r["gemm"]["implicit_vs_matmul"] for r in rows
              if r.get("gemm", {}).get("implicit_vs_matmul")]
    out["implicit_gemm/cupy.matmul, 3x3"] = _geomean(ratios)
    out["layers counted, 3x3 GEMM"] = float(len(ratios))
    # The tensor-core kernels on the same GEMM shapes, in the run's own math against FP32
    # cupy.matmul (issue 10 bars 3xTF32 implicit_gemm_tc at 2x that rate); wgmma's tiles of
    # 16-bit parts (3xFP16) apart from its 3xTF32 ones.
    for label, name, parts in (("implicit_gemm_tc", "implicit_gemm_tc", ""),
                               ("implicit_gemm_wgmma", "implicit_gemm_wgmma", ""),
                               ("implicit_gemm_wgmma 3xFP16", "implicit_gemm_wgmma", "3xfp16")):
        rates = [tflops / r["gemm"]["matmul_tflops"] for r in rows
                 if r.get("gemm", {}).get("matmul_tflops")
                 and (tflops := _best_tflops(r.get("algorithms", {}).get(name, {}), parts))]
        out[f"{label}/cupy.matmul FP32, 3x3"] = _geomean(rates)
        out[f"layers counted, 3x3 GEMM, {label}"] = float(len(rates))
    fractions = [r["bandwidth"]["depthwise_vs_hbm"] for r in rows
                 if r.get("bandwidth", {}).get("depthwise_vs_hbm")]
    out["depthwise GB/s / HBM copy, depthwise layers"] = _geomean(fractions)
    out["layers counted, depthwise GB/s"] = float(len(fractions))
    return out


#: The name parts of configurations that run float32 as 16-bit parts (wgmma's "-3xfp16"; its
#: "-3xbf16", withdrawn, ran only in emulation).
PART_TAGS = ("3xfp16",)


def _best_tflops(entry: dict[str, Any], parts: str) -> float | None:
    """An algorithm's best TFLOP/s over its configurations of 16-bit `parts` (a PART_TAGS
    tag), or with "" over those of none; a file without per-configuration rows gives the
    algorithm's own, as the configurations of none."""
    configs = entry.get("configs")
    if not configs:
        return None if parts else entry.get("tflops")
    found = [c["tflops"] for name, c in configs.items() if c.get("tflops")
             and (parts in name if parts else not any(tag in name for tag in PART_TAGS))]
    return max(found) if found else None


def main(paths: list[str]) -> None:
    """Each file's summary, recomputed from its rows, as a Markdown table."""
    for path in paths:
        report = json.loads(Path(path).read_text())
        device = report.get("device", {}).get("name", "?")
        print(f"\n{path} ({device})\n")
        print("\n".join(summary_lines(summarize(report["rows"]))))


if __name__ == "__main__":
    if str(Path(__file__).resolve().parents[1]) not in sys.path:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main(sys.argv[1:])
