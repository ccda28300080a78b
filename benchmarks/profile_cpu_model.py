"""Where a converted ResNet-50's CPU forward pass spends its time, operator by operator,
beside PyTorch's own model (issue 9: the converted model's time over its prediction).

Usage: python benchmarks/profile_cpu_model.py [--batch 1] [--passes 10] [--top 15]

Runs bench_overhead.py's ResNet-50 forward without grad, first as PyTorch's model, then
converted (`tuner.nn.convert`, tuned into a throwaway store first), each under
torch.profiler for `--passes` passes after three warm-up passes, and prints each aten
operator's self CPU time per pass, both ways, largest first. Our convolutions' GEMMs show as
aten::bmm / aten::matmul (algorithms/cpu/gemm.py routes them to torch); their NumPy work
(im2col, the layout copies) is no aten operator and appears only in the totals' difference.
The profiler's own cost inflates every row alike.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_overhead import resnet50  # noqa: E402
from tuner.nn import convert  # noqa: E402


def self_ms(model: nn.Module, image: torch.Tensor, passes: int) -> dict[str, float]:
    """Each aten operator's self CPU time per pass, in ms, and the whole pass's."""
    with torch.no_grad():
        for _ in range(3):
            model(image)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(passes):
                model(image)
    rows = {e.key: e.self_cpu_time_total / passes / 1e3 for e in prof.key_averages()}
    rows["(all operators)"] = sum(rows.values())
    return rows


def main() -> None:
    """Profile both models; print Markdown."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = resnet50().eval()
    image = torch.randn(args.batch, 3, 224, 224)
    ours_before = self_ms(model, image, args.passes)
    with tempfile.TemporaryDirectory() as tmp:
        convert(model, db=f"sqlite:///{tmp}/profile.db")
        with torch.no_grad():
            model(image)  # tunes every convolution
        ours = self_ms(model, image, args.passes)
    keys = sorted(set(ours_before) | set(ours),
                  key=lambda k: -max(ours_before.get(k, 0.0), ours.get(k, 0.0)))
    print(f"ResNet-50 b{args.batch} forward, CPU, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; self CPU ms per pass under torch.profiler\n")
    print("| operator | PyTorch's model | converted |\n|---|---|---|")
    for key in keys[:args.top]:
        print(f"| {key} | {ours_before.get(key, 0.0):.2f} | {ours.get(key, 0.0):.2f} |")


if __name__ == "__main__":
    main()
