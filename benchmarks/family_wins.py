"""Which algorithm family wins each layer, from bench_gpu.py's per-configuration times: what
a cost model fitted on some networks can learn about another's layers.

Usage: python benchmarks/family_wins.py --results bench_tf32.json [...] [--math tf32]
                                        [--filter 1] [--families implicit_gemm_tc,...]
Per layer of the chosen math mode and filter size: the GEMM's M, N and K (tuner.features.
gemm_sizes), the stride, each family's best time over the layer's best (1.00: that family
wins), and each family's best configuration; per network, how many layers each family won.
Reads stored times only: no device needed.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.problem import ConvProblem  # noqa: E402
from benchmarks.bench_model import from_results  # noqa: E402
from tuner.features import gemm_sizes  # noqa: E402


def main() -> None:
    """Print the per-layer table and the wins per network."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", type=Path, nargs="+", required=True)
    parser.add_argument("--math", default="tf32")
    parser.add_argument("--filter", type=int, default=1, help="filter size r (0: any)")
    parser.add_argument("--families", default="implicit_gemm_tc,implicit_gemm_wgmma,im2col_gemm",
                        help="families to show side by side")
    args = parser.parse_args()
    families = args.families.split(",")
    samples, problems, _ = from_results(args.results)
    network = {p: name for name, ps in problems.items() for p in ps}
    best: dict[ConvProblem, dict[str, tuple[float, str]]] = defaultdict(dict)
    for s in samples:
        found = best[s.problem].get(s.algorithm)
        if s.time_ms and (found is None or s.time_ms < found[0]):
            best[s.problem][s.algorithm] = (s.time_ms, s.config)
    print("| network | M | N | K | stride | " + " | ".join(families) + " | winner |")
    print("|---|---|---|---|---|" + "---|" * len(families) + "---|")
    wins: dict[str, Counter[str]] = defaultdict(Counter)
    layers = [p for p in best if p.math == args.math and args.filter in (0, p.r)]
    for p in sorted(layers, key=lambda p: (network[p], gemm_sizes(p)[2], gemm_sizes(p)[1])):
        times = best[p]
        fastest = min(t for t, _ in times.values())
        winner = min(times, key=lambda a: times[a][0])
        wins[network[p]][winner] += 1
        m, n, k = gemm_sizes(p)
        cells = [f"{times[a][0] / fastest:.2f} ({times[a][1]})" if a in times else "-"
                 for a in families]
        print(f"| {network[p]} | {m} | {n} | {k} | {p.stride[0]} | " + " | ".join(cells)
              + f" | {winner} |")
    print()
    for name, counted in sorted(wins.items()):
        print(f"{name}: " + ", ".join(f"{a} {c}" for a, c in counted.most_common()))


if __name__ == "__main__":
    main()
