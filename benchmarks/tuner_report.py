"""The tuner regret benchmark's arithmetic and report (bench_tuner.py steps 3 and 5-6)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from benchmarks.remeasure import Passes

#: Regret above this counts as a miss (issue 11's target: worst <= 5%).
MISS = 0.05


def spread(times: list[float]) -> float:
    """How far apart one configuration's passes are: slowest over fastest, minus one."""
    return max(times) / min(times) - 1


def regret_rows(tuned: list[dict[str, Any]], isolated: list[dict[str, Any]],
                on_device: Passes | None = None, on_host: Passes | None = None
                ) -> list[dict[str, Any]]:
    """Each tuned layer with its pick's isolated time, the isolated best and the regret.

    An isolated time is one number or a list of passes (their median counts); `noise` is
    the larger pass-to-pass spread of the pick and the best (0 with one pass). With
    `on_device`, each configuration's median device time too (`isolated_device_ms`); with
    `on_host`, its host's median enqueueing per run alone (`isolated_host_ms`).
    """
    rows = []
    for layer, (row, given) in enumerate(zip(tuned, isolated, strict=True)):
        passes = {name: v if isinstance(v, list) else [v] for name, v in given.items()}
        times = {name: statistics.median(v) for name, v in passes.items()}
        # A configuration that failed alone is NaN (remeasure.isolated_ms): never the best.
        best = min((name for name in times if not math.isnan(times[name])),
                   key=lambda name: times[name])
        pick_ms = times[row["pick"]]
        rows.append({**row, "pick_iso_ms": pick_ms, "best": best, "best_iso_ms": times[best],
                     "regret": pick_ms / times[best] - 1, "isolated_ms": times,
                     "isolated_passes_ms": passes,
                     "noise": max(spread(passes[row["pick"]]), spread(passes[best]))})
        for key, found in (("isolated_device_ms", on_device), ("isolated_host_ms", on_host)):
            if found and found[layer]:
                rows[-1][key] = {name: statistics.median(v)
                                 for name, v in found[layer].items() if v}
    return rows


def _model_share(meta: dict[str, Any]) -> str:
    """What the timed tuning spent fitting the cost model, and whether it loaded a fit."""
    fitting = f"fitting the cost model: {meta.get('fit_s', 0.0):.1f} s"
    if "model_fits" in meta:  # absent from results before 2026-11-25
        fitting += f" in {meta['model_fits']} fits as the store grew"
    if meta.get("model_loads"):
        fitting += (f", after loading the fit of an earlier process (which took "
                    f"{meta.get('prefit_s', 0.0):.1f} s)")
    if meta.get("built"):  # absent from results before 2026-11-29
        fitting += (f"; kernels built ahead: {meta['built']} in {meta['build_s']:.1f} s by "
                    f"{meta['build_threads']} threads")
    return fitting


def report(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The Markdown table and summary."""
    lines = [
        f"{meta['model']} batch {meta['batch']} on {meta['device']} ({meta['device_name']}), "
        f"{meta['date']}, commit {meta['commit']}", "",
        "| layer | problem | tuner's pick | tuned ms | pick alone ms | best alone | "
        "best alone ms | regret | noise |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['layer']} | {r['problem']} | {r['pick']} | {r['tuned_ms']:.3f} | "
            f"{r['pick_iso_ms']:.3f} | {r['best']} | {r['best_iso_ms']:.3f} | "
            f"{100 * r['regret']:.1f}% | {100 * r.get('noise', 0.0):.1f}% |"
        )
    regrets = [r["regret"] for r in rows]
    misses = sum(r > MISS for r in regrets)
    # A miss smaller than the re-measurement's own pass-to-pass spread is not evidence.
    beyond = sum(r["regret"] > max(MISS, r.get("noise", 0.0)) for r in rows)
    spreads = [spread(v) for r in rows for v in r.get("isolated_passes_ms", {}).values()
               if len(v) > 1]
    lines += [
        "",
        f"regret over {len(rows)} layers: median {100 * statistics.median(regrets):.1f}%, "
        f"worst {100 * max(regrets):.1f}%, {misses} above {100 * MISS:.0f}%, "
        f"{beyond} above both {100 * MISS:.0f}% and their noise",
        f"tuning wall time ({meta.get('mode', 'exhaustive')}): {meta['tune_s']:.1f} s "
        f"({_model_share(meta)}); isolated re-measurement: {meta['remeasure_s']:.1f} s",
    ]
    for r in rows:
        if r["regret"] > MISS:
            tuned = r.get("tuned_all_ms", {})
            seen = (f"the tuner measured it at {tuned[r['best']]:.3f} ms"
                    if tuned.get(r["best"]) is not None else "the tuner did not measure it")
            device = r.get("isolated_device_ms", {})
            on_device = (f"; on the device alone the pick takes {device[r['pick']]:.3f} ms, "
                         f"the best {device[r['best']]:.3f}"
                         if r["pick"] in device and r["best"] in device else "")
            lines.append(f"miss {r['layer']}: best alone {r['best']}; {seen}, its pick at "
                         f"{r['tuned_ms']:.3f} ms ({r['tuned_ms'] / r['pick_iso_ms']:.2f}x its "
                         f"time alone){on_device}{_sampled(r, r['pick'], 'pick')}"
                         f"{_sampled(r, r['best'], 'best')}")
    missed = [r for r in rows if r["regret"] > MISS]
    if missed:
        # A pick the tuner timed far from its time alone was timed on another machine state
        # or process (a drifting CPU VM, a host-bound GPU run): its miss says little of how
        # the tuner ranks.
        steady = sum(abs(r["tuned_ms"] / r["pick_iso_ms"] - 1) <= 0.1 for r in missed)
        lines.append(f"misses whose pick the tuner timed within 10% of its time alone: "
                     f"{steady} of {len(missed)}")
    lines += _host_bound_lines(rows)
    if meta.get("train_on"):
        lines.append(f"store first filled with {meta['train_on']} (exhaustive, untimed: "
                     f"{meta['train_s']:.1f} s)")
    if spreads:
        middle = 100 * statistics.median(spreads)
        lines.append(f"re-measurement noise (pass-to-pass spread of one configuration, "
                     f"{len(spreads)} configurations): median {middle:.1f}%, "
                     f"worst {100 * max(spreads):.1f}%")
    ratios = [ms / r["isolated_ms"][name] for r in rows
              for name, ms in r.get("tuned_all_ms", {}).items()
              if ms and r["isolated_ms"].get(name)]
    if len(ratios) >= 4:
        # Far from 1, the tuner times a configuration otherwise than it runs alone (order,
        # caches, clocks): its picks can then be wrong however quiet the machine.
        q = statistics.quantiles(ratios, n=4)
        lines.append(f"tuner's time over the isolated time ({len(ratios)} configurations): "
                     f"median {q[1]:.2f}, quartiles {q[0]:.2f}-{q[2]:.2f}")
    lines += _here_lines(rows)
    return "\n".join(lines)


def _sampled(row: dict[str, Any], name: str, label: str) -> str:
    """How the tuner sampled configuration `name` of a layer: runs per sample and its host's
    enqueueing per run (where the tuner logged them): a host-bound pick timed below its time
    alone was either sampled with its host hidden or ran on a faster host."""
    batch = row.get("tuned_batch", {}).get(name)
    if batch is None:
        return ""
    host = row.get("tuned_host_ms", {}).get(name)
    enqueue = f", the host {host:.3f} ms per run" if host is not None else ""
    alone = row.get("isolated_host_ms", {}).get(name)
    enqueue += f" ({alone:.3f} alone)" if alone is not None else ""
    return f"; the tuner sampled the {label} {batch} run(s) at a time{enqueue}"


#: Alone, a configuration whose wall time is at least this times its device time is
#: host-bound: the device waits for the host to enqueue its runs.
HOST_BOUND = 1.1


def _host_bound_lines(rows: list[dict[str, Any]]) -> list[str]:
    """With --iso-device: how many configurations were host-bound alone, and the layers
    whose pick or best was (where the wall times of two processes can disagree)."""
    timed = [(r, name, r["isolated_ms"][name] / device)
             for r in rows for name, device in r.get("isolated_device_ms", {}).items()
             if device and r["isolated_ms"].get(name)]
    if not timed:
        return []
    bound = [(r, name) for r, name, ratio in timed if ratio >= HOST_BOUND]
    layers = sorted({r["layer"] for r, name in bound if name in (r["pick"], r["best"])})
    return [f"host-bound alone (wall >= {HOST_BOUND}x device time): {len(bound)} of "
            f"{len(timed)} configurations; the pick or the best of "
            f"{', '.join(layers) or 'no layer'}"]


def _here_lines(rows: list[dict[str, Any]]) -> list[str]:
    """With --iso-here: the in-process isolated times over the child's, for every
    configuration and for those the tuner timed 10% faster than the child."""
    pairs = [(r["tuned_all_ms"].get(name), r["isolated_ms"][name], here)
             for r in rows for name, here in r.get("isolated_here_ms", {}).items()
             if here and r["isolated_ms"].get(name)]
    lines = []
    for label, chosen in (("all", pairs),
                          ("the tuner 10% faster", [p for p in pairs
                                                    if p[0] and p[0] < 0.9 * p[1]])):
        if len(chosen) < 4:
            continue
        child = statistics.quantiles([here / iso for _, iso, here in chosen], n=4)
        lines.append(f"in-process isolated time over the child's, {label} "
                     f"({len(chosen)} configurations): median {child[1]:.2f}, quartiles "
                     f"{child[0]:.2f}-{child[2]:.2f}")
    return lines
