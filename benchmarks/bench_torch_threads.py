"""A converted model on the CPU: our GEMMs on torch's threads, in NumPy's BLAS, and PyTorch.

Usage: python benchmarks/bench_torch_threads.py [--batch 1] [--size 224] [--rounds 3]
                                               [--seconds 8] [--out r.json]

ResNet-50 (bench_overhead.py's, torchvision's architecture) forward passes, no grad, in four
child processes started with the environment each variant needs (OpenMP reads it once):
- `torch-gemms`: `tuner.nn.convert(model)` as shipped: the CPU plans' GEMMs go through
  torch.matmul on torch's threads (algorithms/cpu/gemm.py);
- `numpy-blas`: the same with $CONVTUNE_CPU_TORCH_GEMM=0: the GEMMs in NumPy's BLAS, whose
  threads compete with torch's spinning OpenMP threads for the cores;
- `numpy-blas-passive`: that, with $OMP_WAIT_POLICY=passive (the workaround the README
  gave before): torch's threads sleep instead of spinning;
- `pytorch`: the model unconverted.
The store is tuned first (a child of its own), so that every timed child finds its plans.
The children take turns (one `--seconds` stretch each a round, `--rounds` rounds), so that
this machine's drifting speed moves all four alike. Prints each variant's median forward
time per round and overall.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.children import LineChild

VARIANTS = {
    "torch-gemms": {},
    "numpy-blas": {"CONVTUNE_CPU_TORCH_GEMM": "0"},
    "numpy-blas-passive": {"CONVTUNE_CPU_TORCH_GEMM": "0", "OMP_WAIT_POLICY": "passive"},
    "pytorch": {},
}


def serve(variant: str, url: str, batch: int, size: int) -> None:
    """A child: builds the model (converted unless `pytorch`), warms it up, says "ready",
    then for each number of seconds read on stdin times forward passes that long and
    prints their median in ms."""
    import torch

    from benchmarks.bench_overhead import resnet50
    from tuner.nn import convert

    torch.manual_seed(0)
    model = resnet50().eval()
    image = torch.randn(batch, 3, size, size)
    with torch.no_grad():
        if variant != "pytorch":
            convert(model, db=url)
        for _ in range(3):
            model(image)
        print("ready", flush=True)
        for line in sys.stdin:
            times = []
            began = time.perf_counter()
            while time.perf_counter() - began < float(line):
                start = time.perf_counter()
                model(image)
                times.append((time.perf_counter() - start) * 1e3)
            print(json.dumps(statistics.median(times)), flush=True)


def main() -> None:
    """Tune, start the children, time them in turns, print the table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)  # child: variant
    parser.add_argument("--url", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.batch < 1 or args.size < 32 or args.rounds < 1 or args.seconds <= 0:
        parser.error("--batch, --rounds and --seconds must be positive, --size at least 32")
    shape = ["--batch", str(args.batch), "--size", str(args.size)]
    if args.serve:
        serve(args.serve, args.url, args.batch, args.size)
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/store.db"
        # Converted, tuned and warmed once it is ready: the store is filled.
        LineChild([__file__, "--serve", "torch-gemms", "--url", url, *shape],
                  "the tuning child").close()
        children: dict[str, LineChild] = {}
        try:
            for name, env in VARIANTS.items():  # one at a time: none starts while one times
                children[name] = LineChild([__file__, "--serve", name, "--url", url, *shape],
                                           f"the {name} child", env)
            rounds: dict[str, list[float]] = {name: [] for name in VARIANTS}
            for _ in range(args.rounds):
                for name, child in children.items():
                    rounds[name].append(json.loads(child.ask(str(args.seconds))))
        finally:
            for child in children.values():
                child.close()
    print(f"ResNet-50 b{args.batch} {args.size}x{args.size} forward, CPU, "
          f"{date.today().isoformat()}, commit {commit}; ms per forward pass, median\n")
    print("| variant | " + " | ".join(f"round {i + 1}" for i in range(args.rounds))
          + " | median | over pytorch |")
    print("|---|" + "---|" * (args.rounds + 2))
    base = statistics.median(rounds["pytorch"])
    for name, values in rounds.items():
        middle = statistics.median(values)
        print(f"| {name} | " + " | ".join(f"{v:.1f}" for v in values)
              + f" | {middle:.1f} | {middle / base:.2f} |")
    if args.out:
        args.out.write_text(json.dumps({"date": date.today().isoformat(), "commit": commit,
                                        "batch": args.batch, "size": args.size,
                                        "rounds": rounds}, indent=2))


if __name__ == "__main__":
    main()
