"""What compiling kernels costs a tuning on a machine that has compiled none yet (issue 11):
the kernel instances each network's CUDA candidates need, and how long NVRTC takes to build
them one after another and with threads, as the tuner now does (algorithms.cuda._ahead).

Usage: python benchmarks/bench_compile.py [--networks resnet50:32,vgg16:16] [--dtype float32]
           [--math fp32] [--threads 1,2] [--rounds 1] [--arch sm_90] [--out compile.json]

NVRTC is CPU work: the times are this machine's, and no GPU is involved (CuPy's NVRTC where
CuPy imports, else the nvidia-cuda-nvrtc wheel's through ctypes). Every instance is compiled
alone, one name expression per program, as get_kernel has NVRTC compile it, for `--arch`
(wgmma's files for sm_90a: _loader.FEATURE_ARCH), with the loader's options
(_loader.nvrtc_options); nothing is cached between compiles. A GPU machine adds its own
steps (the disk cache, loading the module), not timed here.

Per network: its distinct layers, their CUDA candidates, the candidates whose kernels a dry
run cannot list (fft: compiled at first use, as before; not counted), the distinct
instances the rest need, and the dry runs' seconds (what listing adds to a tuning; the
first network's include building the launches its runs then reuse). Then all networks'
instances together, each once (as one process tuning them all compiles them), timed with
each thread count in turn (`--rounds` 2 runs the counts A B B A, so that a change of this
machine's speed moves both alike), and the serial run's seconds per kernel file.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.cuda import _ahead, _binaries  # noqa: E402
from algorithms.cuda._binaries import nvrtc_compile  # noqa: E402
from algorithms.cuda._loader import kernel_source, nvrtc_options  # noqa: E402
from algorithms.registry import algorithms_for  # noqa: E402
from benchmarks.nvrtc_ctypes import load_nvrtc  # noqa: E402
from tuner.candidates import enumerate_candidates  # noqa: E402
from tuner.networks import network_problems  # noqa: E402


@dataclass(frozen=True)
class NetworkKernels:
    """What one network's tuning would compile."""

    network: str
    batch: int
    layers: int
    candidates: int
    unlisted: int  # candidates whose kernels a dry run cannot list (fft)
    instances: tuple[_ahead.Instance, ...]
    listing_s: float = 0.0  # the dry runs' seconds (the first listing in this process)


def network_kernels(network: str, batch: int, dtype: str, math: str) -> NetworkKernels:
    """The distinct kernel instances the CUDA candidates of a network's layers run."""
    algorithms = tuple(algorithms_for("cuda"))
    found: dict[_ahead.Instance, None] = {}
    layers = candidates = unlisted = 0
    listing = 0.0
    for _layer, problem in network_problems(network, batch, dtype, math):
        layers += 1
        offered, _ = enumerate_candidates(algorithms, problem, "cuda")
        for cand in offered:
            candidates += 1
            began = time.perf_counter()
            listed = _ahead.instances(cand.algorithm, problem, cand.config)
            listing += time.perf_counter() - began
            if listed is None:
                unlisted += 1
                continue
            found.update(dict.fromkeys(listed))
    return NetworkKernels(network, batch, layers, candidates, unlisted, tuple(found), listing)


class Compiler:
    """Compiles one instance with NVRTC for an architecture, keeping each one's seconds."""

    def __init__(self, nvrtc: Any, arch: str) -> None:
        self.nvrtc, self.arch = nvrtc, arch
        self.seconds: dict[_ahead.Instance, float] = {}
        self.binaries: dict[_ahead.Instance, tuple[str, bytes]] = {}
        self._sources: dict[str, str] = {}

    def source(self, filename: str) -> str:
        """kernels/`filename` as the loader compiles it (read once)."""
        found = self._sources.get(filename)
        if found is None:
            found = self._sources[filename] = kernel_source(filename)
        return found

    def __call__(self, filename: str, name_expression: str) -> None:
        """Compile `name_expression` of kernels/`filename` alone (RuntimeError if refused)."""
        source = self.source(filename)
        began = time.perf_counter()
        self.binaries[(filename, name_expression)] = nvrtc_compile(
            source, filename, name_expression, nvrtc_options(filename, self.arch), self.nvrtc)
        self.seconds[(filename, name_expression)] = time.perf_counter() - began


def cache_read(compiler: Compiler) -> dict[str, Any]:
    """Every binary `compiler` built, stored in a fresh disk cache as get_kernel stores it
    (algorithms.cuda._binaries), then read back one after another as a later process reads
    them: the seconds and bytes of that read."""
    def keep(source: str, filename: str, name: str, options: tuple[str, ...]
             ) -> tuple[str, bytes]:
        return compiler.binaries[(filename, name)]

    def refuse(*_: Any) -> tuple[str, bytes]:
        raise RuntimeError("bench_compile: a binary was not read back from the cache")

    def each(compile_: _binaries.Compiler, folder: Path) -> None:
        for filename, name in compiler.binaries:
            _binaries.binary(compiler.source(filename), filename, name,
                             nvrtc_options(filename, compiler.arch), "nvrtc", compile_, folder)

    with tempfile.TemporaryDirectory() as tmp:
        each(keep, Path(tmp))
        began = time.perf_counter()
        each(refuse, Path(tmp))
        seconds = time.perf_counter() - began
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
    return {"instances": len(compiler.binaries), "seconds": round(seconds, 4), "bytes": size}


def thread_order(threads: Sequence[int], rounds: int) -> list[int]:
    """The thread counts to time, in turn: A B, then B A, ... for `rounds`."""
    order: list[int] = []
    for r in range(rounds):
        order += list(threads) if r % 2 == 0 else list(reversed(threads))
    return order


def per_file(seconds: dict[_ahead.Instance, float]) -> list[dict[str, Any]]:
    """Instances and compile seconds per kernel file, the most seconds first."""
    total: dict[str, float] = defaultdict(float)
    count: Counter[str] = Counter()
    for (filename, _), s in seconds.items():
        total[filename] += s
        count[filename] += 1
    return [{"file": f, "instances": count[f], "seconds": round(total[f], 2),
             "mean_s": round(total[f] / count[f], 3)}
            for f in sorted(total, key=lambda f: -total[f])]


def main() -> None:
    """Count each network's instances, compile them all per thread count, print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", default="resnet50:32,vgg16:16,googlenet:32,mobilenet_v2:32")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--math", default="fp32")
    parser.add_argument("--threads", default="1,2", help="comma list of thread counts")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    try:
        threads = [int(t) for t in args.threads.split(",")]
        nets = [(name, int(batch)) for name, _, batch in
                (item.partition(":") for item in args.networks.split(","))]
    except ValueError:
        parser.error("--threads takes whole numbers, --networks name:batch pairs")
    if min(threads) < 1 or args.rounds < 1:
        parser.error("--threads and --rounds must be at least 1")
    nvrtc = load_nvrtc()
    if nvrtc is None:
        sys.exit("bench_compile: no NVRTC (install the test extra: nvidia-cuda-nvrtc)")
    found = [network_kernels(name, batch, args.dtype, args.math) for name, batch in nets]
    union = tuple(dict.fromkeys(i for net in found for i in net.instances))
    timings: list[dict[str, Any]] = []
    serial: dict[_ahead.Instance, float] = {}
    read: dict[str, Any] = {}
    for count in thread_order(threads, args.rounds):
        compiler = Compiler(nvrtc, args.arch)
        done = _ahead.compile_ahead(union, compiler, count)
        if done.failed:
            sys.exit(f"bench_compile: NVRTC refused {done.failed[0]}")
        timings.append({"threads": count, "used": done.threads,
                        "seconds": round(done.seconds, 2),
                        "compile_s": round(sum(compiler.seconds.values()), 2)})
        if not serial:
            serial, read = compiler.seconds, cache_read(compiler)
        print(f"{count} thread(s): {done.seconds:.1f} s", file=sys.stderr, flush=True)
    report = {
        "date": date.today().isoformat(), "dtype": args.dtype, "math": args.math,
        "arch": args.arch, "networks": [
            {"network": n.network, "batch": n.batch, "layers": n.layers,
             "candidates": n.candidates, "unlisted": n.unlisted,
             "instances": len(n.instances), "listing_s": round(n.listing_s, 3)}
            for n in found],
        "instances": len(union), "timings": timings, "per_file": per_file(serial),
        "serial_threads": timings[0]["threads"], "cache_read": read,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    print_report(report)


def print_report(report: dict[str, Any]) -> None:
    """The report as Markdown tables."""
    print(f"\n{report['dtype']} {report['math']}, NVRTC for {report['arch']}, "
          f"{report['date']}\n")
    print("| network | layers | CUDA candidates | not listed (fft) | kernel instances "
          "| listing s |")
    print("|---|---|---|---|---|---|")
    for n in report["networks"]:
        print(f"| {n['network']} b{n['batch']} | {n['layers']} | {n['candidates']} | "
              f"{n['unlisted']} | {n['instances']} | {n.get('listing_s', '')} |")
    print(f"\nAll together, each once: {report['instances']} instances\n")
    print("| threads | wall s | summed compile s |")
    print("|---|---|---|")
    for t in report["timings"]:
        print(f"| {t['threads']} | {t['seconds']} | {t['compile_s']} |")
    if report["per_file"]:
        print(f"\n| kernel file ({report.get('serial_threads', 1)} thread(s)) | instances "
              "| seconds | mean s |")
        print("|---|---|---|---|")
        for f in report["per_file"]:
            print(f"| {f['file']} | {f['instances']} | {f['seconds']} | {f['mean_s']} |")
    read = report.get("cache_read")
    if read:
        print(f"\nRead back from the disk cache, one after another: {read['instances']} "
              f"instances, {read['bytes'] / 2**20:.1f} MiB, {read['seconds']:.3f} s")


if __name__ == "__main__":
    main()
