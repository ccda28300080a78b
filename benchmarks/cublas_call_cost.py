"""Host cost of our path to cuBLAS (algorithms/cuda/_cublas.py), without a GPU (issue 9).

Usage: python benchmarks/cublas_call_cost.py [--calls 20000]

Builds a stand-in libcublas with gcc whose cublasGemmStridedBatchedEx records its arguments
and returns, points _cublas at it, and times `gemm_strided_batched` on one ResNet-50 GEMM
shape: what is left is our Python and ctypes' argument passing, the part of a cuBLAS call
we control. Then the same through the cuBLASLt path (CONVTUNE_CUBLASLT=1, _cublaslt.py)
against a stand-in libcublasLt. On an H200 (bench_launch_cost.py, 2026-11-26) the whole
cublasGemmStridedBatchedEx call took 17.8 us of host time. tests/test_cublas_calls.py
uses the same stand-ins to check what arrives.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.cuda import _cublas, _cublaslt  # noqa: E402
from benchmarks.bench_launch_cost import per_call_us  # noqa: E402

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

#: A libcublasLt stand-in: descriptors are host structs recording what they were made and
#: set with, the heuristic hands out an algorithm marked ALGO_MARK (or none while
#: `lt_no_algorithm(1)`), and the matmul records its arguments. `lt_last()`: compute and
#: scale type, transa, transb; for A, B, C: type, rows, cols, ld, batch, stride; then
#: whether D's layout is C's, the preference's workspace limit, the algorithm's first word,
#: A, B, C, D, the workspace, its size, the stream, and how many heuristics ran.
LT_STANDIN_SOURCE = r"""
#include <stdlib.h>
#include <string.h>
typedef struct { long long v[6]; } Layout;
typedef struct { long long compute, scale, ta, tb; } Desc;
static long long last[40];
static long long heuristics = 0;
static int none = 0;
int cublasLtCreate(void** h) { *h = (void*)0x7f00abcdef; return 0; }
int cublasLtMatmulDescCreate(Desc** d, int compute, int scale) {
    *d = calloc(1, sizeof(Desc)); (*d)->compute = compute; (*d)->scale = scale; return 0; }
int cublasLtMatmulDescSetAttribute(Desc* d, int attr, const void* buf, size_t size) {
    if (size != 4) return 7;
    if (attr == 3) d->ta = *(const int*)buf; else if (attr == 4) d->tb = *(const int*)buf;
    else return 7;
    return 0; }
int cublasLtMatmulDescDestroy(Desc* d) { free(d); return 0; }
int cublasLtMatrixLayoutCreate(Layout** l, int type, unsigned long long rows,
                               unsigned long long cols, long long ld) {
    *l = calloc(1, sizeof(Layout)); (*l)->v[0] = type; (*l)->v[1] = rows; (*l)->v[2] = cols;
    (*l)->v[3] = ld; (*l)->v[4] = 1; return 0; }
int cublasLtMatrixLayoutSetAttribute(Layout* l, int attr, const void* buf, size_t size) {
    if (attr == 5 && size == 4) l->v[4] = *(const int*)buf;
    else if (attr == 6 && size == 8) l->v[5] = *(const long long*)buf;
    else return 7;
    return 0; }
int cublasLtMatrixLayoutDestroy(Layout* l) { free(l); return 0; }
static unsigned long long limit = 0;
int cublasLtMatmulPreferenceCreate(void** p) { *p = (void*)0x1; return 0; }
int cublasLtMatmulPreferenceSetAttribute(void* p, int attr, const void* buf, size_t size) {
    if (attr != 1 || size != 8) return 7;
    limit = *(const unsigned long long*)buf; return 0; }
int cublasLtMatmulPreferenceDestroy(void* p) { return 0; }
int cublasLtMatmulAlgoGetHeuristic(void* h, Desc* d, Layout* a, Layout* b, Layout* c,
                                   Layout* dd, void* pref, int requested,
                                   unsigned char* results, int* returned) {
    heuristics++;
    if (none || requested < 1) { *returned = 0; return 0; }
    memset(results, 0, 96); *(long long*)results = 0xA1A1; *returned = 1; return 0; }
int cublasLtMatmul(void* h, Desc* d, const void* alpha, const void* a, Layout* la,
                   const void* b, Layout* lb, const void* beta, const void* c, Layout* lc,
                   void* dd, Layout* ld, const long long* algo, void* ws, size_t wsSize,
                   void* stream) {
    long long* o = last;
    *o++ = d->compute; *o++ = d->scale; *o++ = d->ta; *o++ = d->tb;
    memcpy(o, la->v, 48); o += 6; memcpy(o, lb->v, 48); o += 6; memcpy(o, lc->v, 48); o += 6;
    *o++ = ld == lc; *o++ = (long long)limit; *o++ = algo[0];
    *o++ = (long long)a; *o++ = (long long)b; *o++ = (long long)c; *o++ = (long long)dd;
    *o++ = (long long)ws; *o++ = (long long)wsSize; *o++ = (long long)stream;
    *o++ = heuristics;
    return 0; }
long long* lt_last(void) { return last; }
void lt_no_algorithm(int flag) { none = flag; }
"""
#: The algorithm word the Lt stand-in's heuristic hands out.
ALGO_MARK = 0xA1A1


def build_standin(folder: Path, source_text: str = STANDIN_SOURCE,
                  name: str = "cublas_standin") -> Path:
    """Compile a stand-in (STANDIN_SOURCE, or LT_STANDIN_SOURCE) into `folder`."""
    source = folder / f"{name}.c"
    source.write_text(source_text)
    library = folder / f"lib{name}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(library), str(source)],
                   check=True)
    return library


#: The stream and workspace addresses the stand-in CuPy hands out.
STANDIN_STREAM, STANDIN_WORKSPACE = 0x5000, 1 << 41


def standin_cublas(library: Path, lt: Path | None = None) -> Any:
    """A _Cublas bound to the stand-in (and, with `lt`, to the cuBLASLt one: then
    CONVTUNE_CUBLASLT must be 1), with a stand-in CuPy (device 0)."""
    stream = SimpleNamespace(ptr=STANDIN_STREAM)
    cupy = SimpleNamespace(cuda=SimpleNamespace(
        runtime=SimpleNamespace(getDevice=lambda: 0, streamIsCapturing=lambda ptr: 0),
        get_current_stream=lambda: stream,
        alloc=lambda nbytes: SimpleNamespace(ptr=STANDIN_WORKSPACE)))
    return _cublas._Cublas(cupy, lib=ctypes.CDLL(str(library)),
                           lt=None if lt is None else ctypes.CDLL(str(lt)),
                           make_current=lambda: None)  # no CUDA context to make current


def main() -> None:
    """Print the host microseconds per call, best of five loops."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for lt in (False, True):
            os.environ[_cublaslt.ENV] = "1" if lt else "0"
            blas = standin_cublas(build_standin(Path(folder)), build_standin(
                Path(folder), LT_STANDIN_SOURCE, "cublaslt_standin") if lt else None)
            _cublas._library = lambda blas=blas: blas  # type: ignore[misc, assignment]
            best = gemm_us(args.calls)
            entry = "cublasLtMatmul, its algorithm kept" if lt else "cublasGemmStridedBatchedEx"
            print(f"our path to {entry} (a recording stand-in): {best:.2f} us per call")


def gemm_us(calls: int) -> float:
    """Host microseconds per gemm_strided_batched call (bench_launch_cost's timing loop)."""
    def call() -> None:  # res4.1x1a.rest's pointwise GEMM, batched over 32 images
        _cublas.gemm_strided_batched("float32", _cublas.OP_N, _cublas.OP_N, 196, 256, 1024,
                                     1 << 40, 196, 200704, 1 << 41, 1024, 0, 1 << 42, 196,
                                     50176, 32)

    for _ in range(1000):
        call()
    return per_call_us(call, calls)


if __name__ == "__main__":
    main()
