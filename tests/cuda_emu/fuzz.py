"""Many random problems through the emulated CUDA algorithms: a bug hunt, not a test.

Usage: python -m tests.cuda_emu.fuzz [--cases 240] [--seed 0] [--minutes 30]
           [--algorithms implicit_gemm_wgmma,implicit_gemm_tc] [--small] [--out f.json]
           [--config-has=-nchw]

tests/test_cuda_emulated_random.py runs 48 fresh small problems in every CI run; this runs as
many as asked, seeded (the same seed draws the same problems), of tests/random_problems.py's
wider sizes by default (several K-steps and tiles, 72 and 96 output channels), with x, w and y
misaligned by whole elements in one case of five. Each runs as a case of
tests/cuda_emu/cases.py: every configuration, two thread schedules (the second replayed at
moved addresses, as plans run), under the sanitizers, against the float64 reference. A
failure prints its case, to join the fixed cases once its bug is fixed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, cast

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.base import Algorithm, Support, unsupported  # noqa: E402
from algorithms.cuda import shipped_kernels  # noqa: E402
from algorithms.problem import DTYPES, ConvProblem  # noqa: E402
from tests.cuda_emu.build import build_all  # noqa: E402
from tests.cuda_emu.cases import ALGORITHMS, run_cases  # noqa: E402
from tests.random_problems import random_cases  # noqa: E402


class Offering:
    """An algorithm as random_cases sees it when only problems for which it offers a
    configuration named with `text` count as supported (a campaign on one family of tiles:
    about one wgmma draw in ten gets an NCHW tile)."""

    def __init__(self, algorithm: Algorithm, text: str) -> None:
        self.algorithm, self.text = algorithm, text

    def supports(self, problem: ConvProblem) -> Support:
        """The algorithm's answer, refused where no configuration is named with the text."""
        found = self.algorithm.supports(problem)
        if found and not any(self.text in c for c in self.algorithm.configs(problem)):
            return unsupported(f"no configuration named with {self.text!r}")
        return found


def draw(count: int, names: list[str], seed: int, wide: bool = True,
         config_has: str | None = None) -> list[dict[str, Any]]:
    """`count` cases over the named algorithms (each in every direction it serves first),
    one in five with its operands off 256-byte boundaries by 0-3 elements each; with
    `config_has`, only problems one of whose configurations is named with it."""
    rng = np.random.default_rng(seed)
    algorithms = {name: ALGORITHMS[name] if config_has is None else
                  cast(Algorithm, Offering(ALGORITHMS[name], config_has)) for name in names}
    drawn = random_cases(rng, algorithms, count, wide)
    cases = []
    for i, (name, problem) in enumerate(drawn):
        item = DTYPES[problem["dtype"]]
        offsets = ([item * int(v) for v in rng.integers(0, 4, 3)] if rng.random() < 0.2
                   else None)
        cases.append({"id": f"fuzz{seed}-{i}-{name}", "algorithm": name, "problem": problem,
                      "offsets": offsets, "inputs": None})
    return cases


def main() -> int:
    """Draw, run in chunks until the time is up, report; exit 1 when a case failed."""
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=240)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--algorithms", default=",".join(ALGORITHMS))
    p.add_argument("--small", action="store_true", help="the CI test's sizes, not the wider")
    p.add_argument("--config-has", default=None,
                   help="only problems offered a configuration named with this "
                        "(--config-has=-nchw)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--minutes", type=float, default=30.0, help="no new chunk after this")
    p.add_argument("--chunk", type=int, default=8, help="cases per run_cases call")
    p.add_argument("--out", type=Path, help="cases and verdicts as JSON")
    args = p.parse_args()
    cases = draw(args.cases, args.algorithms.split(","), args.seed, not args.small,
                 args.config_has)
    build_all(shipped_kernels())
    began, results = time.monotonic(), {}
    for first in range(0, len(cases), args.chunk):
        if time.monotonic() - began > 60 * args.minutes:
            print(f"stopped after {first} of {len(cases)} cases ({args.minutes} min)")
            break
        chunk = cases[first:first + args.chunk]
        results.update(run_cases(chunk, workers=args.workers))
        for case in chunk:
            verdict = results[case["id"]]
            line = f"{case['id']}: {verdict['status']}"
            if verdict["status"] == "failed":
                line += f"\n  case: {json.dumps(case)}\n  {verdict['message'][:2000]}"
            elif verdict["status"] == "ok":
                line += f" ({len(verdict['errors'])} configurations)"
            print(line, flush=True)
        if args.out:
            args.out.write_text(json.dumps({"cases": cases, "results": results}, indent=1))
    counts = {s: sum(v["status"] == s for v in results.values())
              for s in ("ok", "failed", "skipped")}
    configurations = sum(len(v.get("errors", {})) for v in results.values())
    print(f"{counts['ok']} ok ({configurations} configurations), {counts['failed']} failed, "
          f"{counts['skipped']} skipped; {time.monotonic() - began:.0f} s")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
