"""Host cost of our path to cuBLAS (algorithms/cuda/_cublas.py), without a GPU (issue 9).

Usage: python benchmarks/cublas_call_cost.py [--calls 20000]

Builds a stand-in libcublas with gcc whose cublasGemmStridedBatchedEx records its arguments
and returns, points _cublas at it, and times `gemm_strided_batched` on one ResNet-50 GEMM
shape: what is left is our Python and ctypes' argument passing, the part of a cuBLAS call
we control. On an H200 (bench_launch_cost.py, 2026-11-26) the whole call took 17.8 us of
host time. tests/test_cuda_host_checks.py uses the same stand-in to check what arrives.
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.cuda import _cublas  # noqa: E402

#: A libcublas stand-in: the entry points _Cublas calls, the GEMM recording its arguments
#: (`last_values`: every integer, strides included, in order; `last_pointers`: handle,
#: alpha, A, B, beta, C).
STANDIN_SOURCE = r"""
#include <string.h>
static long long seen[32];
static void* seen_pointers[8];
int cublasGemmStridedBatchedEx(void* h, int ta, int tb, int m, int n, int k,
        const void* alpha, const void* a, int at, int lda, long long sa, const void* b,
        int bt, int ldb, long long sb, const void* beta, void* c, int ct, int ldc,
        long long sc, int batch, int compute, int algo) {
    long long v[] = {ta, tb, m, n, k, at, lda, sa, bt, ldb, sb, ct, ldc, sc, batch, compute,
                     algo};
    memcpy(seen, v, sizeof v);
    void* p[] = {h, (void*)alpha, (void*)a, (void*)b, (void*)beta, c};
    memcpy(seen_pointers, p, sizeof p);
    return 0;
}
int cublasCreate_v2(void** h) { *h = (void*)0x7f00123456; return 0; }
int cublasSetPointerMode_v2(void* h, int m) { return 0; }
int cublasSetMathMode(void* h, int m) { return 0; }
int cublasSetStream_v2(void* h, void* s) { return 0; }
int cublasSetWorkspace_v2(void* h, void* w, unsigned long n) { return 0; }
long long* last_values(void) { return seen; }
void** last_pointers(void) { return seen_pointers; }
"""

#: The handle the stand-in's cublasCreate_v2 hands out.
STANDIN_HANDLE = 0x7F00123456


def build_standin(folder: Path) -> Path:
    """Compile STANDIN_SOURCE into a shared library in `folder`."""
    source = folder / "cublas_standin.c"
    source.write_text(STANDIN_SOURCE)
    library = folder / "libcublas_standin.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(library), str(source)],
                   check=True)
    return library


def standin_cublas(library: Path) -> Any:
    """A _Cublas bound to the stand-in, with a stand-in CuPy (device 0, stream 0)."""
    stream = SimpleNamespace(ptr=0)
    cupy = SimpleNamespace(cuda=SimpleNamespace(
        runtime=SimpleNamespace(getDevice=lambda: 0), get_current_stream=lambda: stream,
        alloc=lambda nbytes: SimpleNamespace(ptr=1 << 41)))
    loader = _cublas._load_libcublas
    _cublas._load_libcublas = lambda _cupy: ctypes.CDLL(str(library))  # type: ignore
    try:
        return _cublas._Cublas(cupy)
    finally:
        _cublas._load_libcublas = loader  # type: ignore[assignment]


def main() -> None:
    """Print the host microseconds per call, best of five loops."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        blas = standin_cublas(build_standin(Path(folder)))
        _cublas._library = lambda: blas  # type: ignore[assignment]

        def call() -> None:  # res4.1x1a.rest's pointwise GEMM, batched over 32 images
            _cublas.gemm_strided_batched("float32", _cublas.OP_N, _cublas.OP_N, 196, 256,
                                         1024, 1 << 40, 196, 200704, 1 << 41, 1024, 0,
                                         1 << 42, 196, 50176, 32)

        for _ in range(1000):
            call()
        best = float("inf")
        for _ in range(5):
            began = time.perf_counter()
            for _ in range(args.calls):
                call()
            best = min(best, (time.perf_counter() - began) / args.calls * 1e6)
    print(f"our path to cublasGemmStridedBatchedEx (a recording stand-in): {best:.2f} us "
          "per call")


if __name__ == "__main__":
    main()
