"""The host cost of the pieces of a run, on a GPU machine (issue 9): a kernel launch by its
number of arguments (and with them packed in one structure), the same launch prepared once
(algorithms.cuda._launch), a cuBLAS call through our ctypes path (and through cuBLASLt,
_cublaslt), workspace views and CuPy wrappers of raw pointers.

    python benchmarks/bench_launch_cost.py [--calls 2000] [--out launch_cost.json]

Each piece runs back to back `--calls` times, and its host time per call is the best of five
such loops (perf_counter; nothing synchronises inside a loop). The kernels are empty and the
GEMM is 8 x 8 x 8, so the GPU keeps up and what is timed is the host's enqueueing. Why: our
plan calls and the tuner's launch-bound samples spend more host time around their kernels
than in them (BENCHMARKS.md, "Where a call's host time goes"), and whether the arguments,
the views or our own Python cost the most decides what to cut next.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.base import workspace_view  # noqa: E402
from algorithms.cuda import _cublas, _cublaslt  # noqa: E402
from algorithms.cuda._launch import POINTER, current_stream, prepare  # noqa: E402
from algorithms.cuda.runtime import cuda_available  # noqa: E402

#: Scalar arguments of the empty kernels (the tensor-core kernels take about 30).
ARG_COUNTS = (0, 8, 16, 32)


def _source(count: int) -> str:
    params = "".join(f", int a{i}" for i in range(count))
    return f'extern "C" __global__ void empty_{count}(int* p{params}) {{}}\n'


_PACKED = """
struct Packed { int a[32]; };
extern "C" __global__ void empty_packed(int* p, Packed args) {}
"""


def per_call_us(fn: Callable[[], Any], calls: int) -> float:
    """Host microseconds per call: the best of five loops of `calls` calls."""
    best = float("inf")
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - began) / calls * 1e6)
    return best


def measure(calls: int) -> dict[str, Any]:
    """Every piece's host time per call, in microseconds."""
    import cupy

    out: dict[str, Any] = {}
    buf = cupy.zeros(1 << 20, dtype=np.uint8)
    p = buf.view(np.int32)
    for count in ARG_COUNTS:
        kernel = cupy.RawKernel(_source(count), f"empty_{count}")
        args = (p, *(np.int32(i) for i in range(count)))
        kernel((1,), (32,), args)

        def launch(kernel: Any = kernel, args: tuple[Any, ...] = args) -> None:
            kernel((1,), (32,), args)

        out[f"launch, {count} int32 arguments"] = per_call_us(launch, calls)
        # The same launch prepared once (algorithms.cuda._launch): the run fills the
        # pointer and hands the buffer to cuLaunchKernel, with the stream looked up as a
        # run does.
        prepared = prepare(kernel, (1,), (32,), (POINTER, *args[1:]))
        assert prepared is not None, "a CuPy RawKernel launches from a buffer"

        def launch_prepared(prepared: Any = prepared) -> None:
            prepared(current_stream(), p.data.ptr)

        out[f"prepared launch, {count} int32 arguments"] = per_call_us(launch_prepared, calls)
    try:  # CuPy passes a NumPy structured scalar as a C structure of the same layout
        packed = cupy.RawKernel(_PACKED, "empty_packed")
        record = np.zeros((), dtype=[("a", np.int32, (32,))])[()]
        packed((1,), (32,), (p, record))
        out["launch, 32 int32 in one structure"] = per_call_us(
            lambda: packed((1,), (32,), (p, record)), calls)
    except Exception as exc:  # an older CuPy: say so and go on
        out["launch, 32 int32 in one structure"] = f"{type(exc).__name__}: {exc}"
    a = cupy.ones((8, 8), dtype=np.float32)
    c = cupy.empty_like(a)

    def gemm() -> None:
        _cublas.gemm_strided_batched("float32", _cublas.OP_N, _cublas.OP_N, 8, 8, 8,
                                     a.data.ptr, 8, 64, a.data.ptr, 8, 64, c.data.ptr, 8, 64, 1)

    gemm()
    out["cuBLAS GEMM through _cublas (ctypes)"] = per_call_us(gemm, calls)
    # The same GEMM through cuBLASLt, its algorithm chosen once (CONVTUNE_CUBLASLT=1).
    with mock.patch.dict(os.environ, {_cublaslt.ENV: "1"}):
        lt_blas = _cublas._Cublas(cupy)
        with mock.patch.object(_cublas, "_library", lambda: lt_blas):
            gemm()
            out["cuBLASLt GEMM through _cublas (algorithm kept)"] = per_call_us(gemm, calls)
    out["workspace_view (slice, view, reshape)"] = per_call_us(
        lambda: workspace_view(buf, 4096, (64, 64), "float32"), calls)
    out["uint8 slice of the workspace"] = per_call_us(lambda: buf[4096:8192], calls)
    memory = buf.data

    def wrap() -> Any:
        return cupy.ndarray((64, 64), np.float32, memptr=memory + 4096)

    out["cupy.ndarray over a MemoryPointer"] = per_call_us(wrap, calls)
    cupy.cuda.get_current_stream().synchronize()
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure and print Markdown (and JSON with --out); 2 without a GPU."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    ok, why = cuda_available()
    if not ok:
        print(f"no usable GPU: {why}", file=sys.stderr)
        return 2
    results = measure(args.calls)
    print("| piece | host us per call |\n|---|---|")
    for name, value in results.items():
        print(f"| {name} | {value if isinstance(value, str) else f'{value:.2f}'} |")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
