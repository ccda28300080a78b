"""Every cuBLASLt algorithm its heuristic offers for a pointwise layer's GEMM, against cuBLAS's
own choice and cuDNN, on a GPU machine (issue 10: the TF32 1x1 layers).

    python benchmarks/bench_gemm_algos.py [--layers res4.1x1a.rest,...] [--algos 8]
                                          [--dtype float32] [--math tf32] [--out gemm.json]

Why: on the H100 of 2026-11-27 ResNet-50's stride-1 1x1 layers in TF32 ran at 0.52-0.83 of
cuDNN. On res4.1x1a.rest every kernel of ours took 52-62 us, `im2col_gemm` (one
cublasGemmStridedBatchedEx over the images) 52, and cuDNN 27, with a plain CUTLASS GEMM
batched per image (`s1688gemm_128x128_32x3`). The same GEMM is within cuBLAS's reach; the
question is whether its heuristic's first choice is the fast one. If another of the
algorithms cublasLtMatmulAlgoGetHeuristic lists is, exposing them as im2col_gemm
configurations for the tuner to measure is the fix (PyTorch's TunableOp does this for GEMMs).

Per layer (batch 32, NCHW), the GEMM y_n (K x P*Q) = w (K x C) @ x_n (C x P*Q) for each image
n, column-major as cuBLAS sees it: m = P*Q, n = K, k = C, A = x_n, B = w (batch stride 0),
C = y_n. Each candidate's device time is taken as bench_gpu.py takes its device column
(CudaRuntime.device_ms: runs queued behind a spin, the L2 flushed), after a warm-up run; its
result is checked against float64 (relative error printed). cuDNN runs F.conv2d in the same
mode (allow_tf32 for "tf32").
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, astuple
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.cuda import _cublas, _cublaslt  # noqa: E402  (no CuPy needed to import)
from algorithms.cuda._cublaslt import OP_N, Shape  # noqa: E402
from algorithms.cuda.runtime import CudaRuntime, cuda_available  # noqa: E402
from algorithms.problem import ConvProblem  # noqa: E402
from benchmarks.bench_layers import layer_problems  # noqa: E402

#: ResNet-50's stride-1 1x1 layers below 0.9 of cuDNN in TF32 on the H100 (2026-11-27).
DEFAULT_LAYERS = ("res2.1x1b", "res3.1x1b", "res3.1x1a.rest", "res4.1x1b", "res4.1x1a.rest",
                  "res5.1x1b", "res5.1x1a.rest")


def pointwise_gemm(problem: ConvProblem) -> Shape:
    """The per-image GEMM of a stride-1, unpadded 1x1 layer, in the problem's dtype and math
    (TF32 compute at math "tf32"); ValueError for another layer."""
    if not problem.pointwise or problem.groups != 1:
        raise ValueError(f"not a dense stride-1 1x1 layer: {problem.describe()}")
    pixels = problem.h * problem.w
    data = _cublas._DATA_TYPE[problem.dtype]
    compute = (_cublas._COMPUTE_FAST_TF32 if problem.math == "tf32"
               else _cublas._COMPUTE[problem.dtype])
    return Shape(a_type=data, c_type=data, compute=compute, scale=_cublas._SCALE[problem.dtype],
                 transa=OP_N, transb=OP_N, m=pixels, n=problem.k, k=problem.c, lda=pixels,
                 stride_a=problem.c * pixels, ldb=problem.c, stride_b=0, ldc=pixels,
                 stride_c=problem.k * pixels, batch=problem.n)


def column_major_gemm(shape: Shape, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """What cuBLAS computes for `shape` on flat arrays a, b (the layout, on the host)."""
    c = np.zeros(shape.batch * shape.stride_c, a.dtype)
    for i in range(shape.batch):
        a_i = np.lib.stride_tricks.as_strided(
            a[i * shape.stride_a:], (shape.m, shape.k), (a.itemsize, shape.lda * a.itemsize))
        b_i = np.lib.stride_tricks.as_strided(
            b[i * shape.stride_b:], (shape.k, shape.n), (b.itemsize, shape.ldb * b.itemsize))
        c_i = a_i @ b_i  # m x n
        c[i * shape.stride_c:i * shape.stride_c + shape.ldc * shape.n] = c_i.T.reshape(-1)
    return c


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", default=",".join(DEFAULT_LAYERS),
                   help="comma-separated ResNet-50 layer names (stride-1 1x1 ones)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--algos", type=int, default=8, help="heuristic results asked for")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    p.add_argument("--math", default="tf32", choices=["fp32", "tf32"],
                   help="float32 only: a 16-bit GEMM has no TF32 to allow")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.dtype != "float32":
        args.math = "fp32"  # what a 16-bit problem's math is (algorithms.problem.MATHS)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the survey; 2 when no GPU is usable."""
    args = parse_args(argv)
    ok, why = cuda_available()
    if not ok:
        print(f"no usable GPU: {why}", file=sys.stderr)
        return 2
    import cupy
    import torch

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = args.math == "tf32"
    wanted = args.layers.split(",")
    layers = dict(layer_problems("resnet50", args.batch, args.dtype, args.math, "forward"))
    unknown = [name for name in wanted if name not in layers]
    if unknown:
        print(f"unknown layers: {', '.join(unknown)}", file=sys.stderr)
        return 2
    lt = _cublaslt.Lt(_cublas.load_library(cupy, "libcublasLt"), _cublas.WORKSPACE_BYTES)
    rt = CudaRuntime(0)
    report: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()},
                              "device": cupy.cuda.runtime.getDeviceProperties(
                                  cupy.cuda.runtime.getDevice())["name"].decode(), "rows": []}
    print("| layer | GEMM m x n x k, batch | candidate | us | rel. error |")
    print("|---|---|---|---|---|")
    for name in wanted:
        survey(report, name, layers[name], lt, rt, args)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


def survey(report: dict[str, Any], name: str, problem: ConvProblem, lt: Any, rt: CudaRuntime,
           args: argparse.Namespace) -> None:
    """Time cuBLAS's choice, each cuBLASLt heuristic result and cuDNN on one layer's GEMM."""
    import cupy
    import torch

    shape = pointwise_gemm(problem)
    device = cupy.cuda.runtime.getDevice()
    tf32 = args.math == "tf32" and args.dtype == "float32"
    workspace = cupy.empty(_cublas.WORKSPACE_BYTES, cupy.uint8)
    rng = np.random.default_rng(0)
    x = cupy.asarray(rng.standard_normal(problem.input_shape).astype(args.dtype))
    w = cupy.asarray(rng.standard_normal(problem.filter_shape).astype(args.dtype))
    y = cupy.zeros(problem.output_shape, args.dtype)
    want = (cupy.asnumpy(w).reshape(problem.k, problem.c).astype(np.float64)
            @ cupy.asnumpy(x).reshape(problem.n, problem.c, -1).astype(np.float64))

    def error() -> float:
        got = cupy.asnumpy(y).reshape(want.shape).astype(np.float64)
        return float(np.linalg.norm(got - want) / np.linalg.norm(want))

    matmul = lt.matmul(device, *astuple(shape))
    results = lt.algorithms(device, matmul, args.algos) if matmul.found else []
    candidates: list[tuple[str, Callable[[], Any]]] = [(
        "cublasGemmStridedBatchedEx", lambda: _cublas.gemm_strided_batched(
            args.dtype, 0, 0, shape.m, shape.n, shape.k, x.data.ptr, shape.lda,
            shape.stride_a, w.data.ptr, shape.ldb, shape.stride_b, y.data.ptr, shape.ldc,
            shape.stride_c, shape.batch, tf32=tf32))]
    stream = cupy.cuda.get_current_stream().ptr
    for i, result in enumerate(results):
        candidates.append((f"cuBLASLt heuristic #{i}", functools.partial(
            lt.run, device, matmul, _cublas._ONE[args.dtype], x.data.ptr, w.data.ptr,
            _cublas._ZERO[args.dtype], y.data.ptr, workspace.data.ptr, stream,
            algorithm=result)))
    for label, run in candidates:
        y.fill(0)
        try:
            us: float | None = _device_us(rt, run)
            err: float | None = error()
        except RuntimeError as exc:  # a cuBLAS status: the candidate is data
            us, err = None, None
            label += f" ({exc})"
        _row(report, name, shape, label, us, err)
    xt, wt = torch.from_dlpack(x), torch.from_dlpack(w)
    us = _device_us(rt, lambda: torch.nn.functional.conv2d(xt, wt))
    y[...] = cupy.from_dlpack(torch.nn.functional.conv2d(xt, wt))
    _row(report, name, shape, "cuDNN (F.conv2d)", us, error())


def _device_us(rt: CudaRuntime, run: Callable[[], Any], runs: int = 10) -> float:
    """`run`'s device time in microseconds, as bench_gpu.py's device column (the runtime's
    device_ms), after one warm-up run."""
    run()
    return rt.device_ms(run, runs) * 1e3


def _row(report: dict[str, Any], name: str, shape: Shape, label: str, us: float | None,
         err: float | None) -> None:
    report["rows"].append({"layer": name, "shape": asdict(shape), "candidate": label,
                           "us": us, "rel_error": err})
    size = f"{shape.m} x {shape.n} x {shape.k}, {shape.batch}"
    print(f"| {name} | {size} | {label} | {'-' if us is None else f'{us:.1f}'} | "
          f"{'-' if err is None else f'{err:.1e}'} |", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
