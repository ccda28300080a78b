"""How this machine's speed drifts over time: the same small work, timed again and again.

Usage: python benchmarks/cpu_drift.py [--seconds 60] [--out r.json]

Times, in turns for `--seconds`, a float32 512 x 512 matmul (compute-bound) and a strided
copy of a n8 c512 28x28 tensor's stride-2 view (memory-bound), 20 calls each per sample,
and prints per 5-second window the median of each, relative to the first window's, and the
whole run's quantiles. Why it matters: a reference that times one configuration's whole
budget in one stretch lets such a drift decide close calls (bench_tuner.py's configurations
take turns since 2026-11-27), and a tuning and its re-measurement minutes apart may see the
machine at different speeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import date
from pathlib import Path

import numpy as np

WINDOW_S = 5.0


def drift(seconds: float) -> list[tuple[float, float, float]]:
    """(seconds since start, matmul ms, copy ms) per sample."""
    rng = np.random.default_rng()
    a = rng.standard_normal((512, 512), dtype=np.float32)
    b = rng.standard_normal((512, 512), dtype=np.float32)
    x = rng.standard_normal((8, 512, 28, 28), dtype=np.float32)
    samples = []
    began = time.perf_counter()
    while (now := time.perf_counter()) - began < seconds:
        t = time.perf_counter()
        for _ in range(20):
            np.matmul(a, b)
        matmul = (time.perf_counter() - t) * 1e3 / 20
        t = time.perf_counter()
        for _ in range(20):
            np.ascontiguousarray(x[:, :, ::2, ::2])
        copy = (time.perf_counter() - t) * 1e3 / 20
        samples.append((now - began, matmul, copy))
    return samples


def main() -> None:
    """Measure, print the windows and quantiles (and write JSON with --out)."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.seconds < WINDOW_S:
        parser.error(f"--seconds must be at least {WINDOW_S:g}")
    samples = drift(args.seconds)
    windows: dict[int, list[tuple[float, float, float]]] = {}
    for sample in samples:
        windows.setdefault(int(sample[0] // WINDOW_S), []).append(sample)
    first = windows[0]
    base = (statistics.median(s[1] for s in first), statistics.median(s[2] for s in first))
    print(f"{date.today().isoformat()}, {len(samples)} samples\n")
    print("| window, s | matmul ms | over the first | copy ms | over the first |")
    print("|---|---|---|---|---|")
    for index, chunk in sorted(windows.items()):
        m = statistics.median(s[1] for s in chunk)
        c = statistics.median(s[2] for s in chunk)
        print(f"| {index * WINDOW_S:.0f}-{(index + 1) * WINDOW_S:.0f} | {m:.3f} | "
              f"{m / base[0]:.2f} | {c:.3f} | {c / base[1]:.2f} |")
    for label, column in (("matmul", 1), ("copy", 2)):
        q = statistics.quantiles([s[column] for s in samples], n=20)
        print(f"{label}: 5th / 50th / 95th percentile {q[0]:.3f} / {q[9]:.3f} / {q[18]:.3f} ms")
    if args.out:
        args.out.write_text(json.dumps({"date": date.today().isoformat(),
                                        "samples": samples}, indent=2))


if __name__ == "__main__":
    main()
