"""Compile every shipped CUDA kernel instance for this GPU, in parallel, into the disk cache.

Usage: python benchmarks/warm_kernels.py [--jobs N] [--device INDEX]

`get_kernel` builds one template instance per NVRTC call, on first use, in the process
that needs it, and keeps the binary in a folder of CuPy's kernel cache directory
(algorithms/cuda/_binaries.py, keyed by the source, the options and the instance), where
later processes read it. On a fresh GPU machine every instance is compiled once. This
fills that cache first, one process per CPU core, so that `gpu_session.sh`'s later steps
spend their time limits on tests and measurements instead of compilation. Prints how many
instances it compiled and how long that took (the cost a fresh machine pays once).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ProcessPoolExecutor
from functools import partial
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.cuda import shipped_kernels  # noqa: E402

Instance = tuple[str, str]  # (kernel file, name expression)


def instances() -> list[Instance]:
    """Every (file, name expression) the CUDA algorithms can launch."""
    return [(filename, name) for filename, names in shipped_kernels().items()
            for name in names]


def compile_instance(instance: Instance, device: int = 0) -> float:
    """Compile (or load from the disk cache) one instance on GPU `device`; seconds taken."""
    import cupy

    from algorithms.cuda._loader import get_kernel

    started = time.perf_counter()
    with cupy.cuda.Device(device):
        get_kernel(*instance)
    return time.perf_counter() - started


def warm(todo: Iterable[Instance], pool: Executor,
         compile_one: Callable[[Instance], float]) -> tuple[int, float, list[str]]:
    """Compile `todo` on `pool`: (instances compiled, summed seconds, failures)."""
    todo = list(todo)
    futures = {pool.submit(compile_one, item): item for item in todo}
    seconds, failures = 0.0, []
    for future, (filename, name) in futures.items():
        try:
            seconds += future.result()
        except Exception as exc:  # a kernel that fails to compile is reported, not fatal
            failures.append(f"{filename} {name}: {type(exc).__name__}: {exc}")
    return len(todo) - len(failures), seconds, failures


def main() -> None:
    """Warm the cache; exit 1 if any instance failed to compile."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes compiling at once (default: one per CPU)")
    parser.add_argument("--device", type=int, default=0, help="GPU index (default 0)")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    started = time.perf_counter()
    # spawn: a forked child cannot use the CUDA context of its parent.
    with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:
        done, seconds, failures = warm(
            instances(), pool, partial(compile_instance, device=args.device))
    wall = time.perf_counter() - started
    print(f"compiled {done} kernel instances in {wall:.1f} s with {args.jobs} processes "
          f"({seconds:.1f} s of compilation in all)")
    for failure in failures:
        print(f"FAILED {failure}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
