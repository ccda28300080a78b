"""Our weakest kernels, and what PyTorch runs for the same layers, under Nsight Compute.

Usage (on a GPU machine; `gpu_session.sh profile` runs it this way):
    ncu --profile-from-start off --clock-control none [sections] \\
        python3 benchmarks/profile_kernels.py [--cases a,b]
    python3 benchmarks/profile_kernels.py [--cases a,b]     # CUDA-event times, no ncu
    python3 benchmarks/profile_kernels.py --list

Each case runs untimed first (compilation, cuDNN's algorithm search), then once between
cudaProfilerStart and cudaProfilerStop: `ncu --profile-from-start off` profiles exactly
those launches, in case order (the script prints which case each belongs to). Without ncu
the same window is timed with CUDA events (median of 20 runs, L2 not flushed).

The cases are the layers where the H100 runs of 2026-11-23 put us furthest behind, each
with the configuration that was fastest there or the new one meant to replace it, next to
PyTorch (cuDNN, or PyTorch's own depthwise kernel) on the same layer.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from algorithms.problem import ConvProblem

VGG_CONV4_2 = dict(n=16, c=512, h=28, w=28, k=512, r=3, s=3, pad=1)
RES2_1X1B = dict(n=32, c=64, h=56, w=56, k=256, r=1, s=1)
RES3_3X3 = dict(n=32, c=128, h=28, w=28, k=128, r=3, s=3, pad=1)
VGG_CONV1_1 = dict(n=16, c=3, h=224, w=224, k=64, r=3, s=3, pad=1)
VGG_CONV1_2 = dict(n=16, c=64, h=224, w=224, k=64, r=3, s=3, pad=1)
RES3_1X1B = dict(n=32, c=128, h=28, w=28, k=512, r=1, s=1)
RES4_1X1B = dict(n=32, c=256, h=14, w=14, k=1024, r=1, s=1)
RES4_1X1A_REST = dict(n=32, c=1024, h=14, w=14, k=256, r=1, s=1)
RES5_1X1B = dict(n=32, c=512, h=7, w=7, k=2048, r=1, s=1)
INCEPTION3B_5X5 = dict(n=32, c=32, h=28, w=28, k=96, r=5, s=5, pad=2)
MBV2_DW_S2 = dict(n=32, c=96, h=112, w=112, k=96, r=3, s=3, pad=1, stride=2, groups=96)
MBV2_DW_7X7 = dict(n=32, c=960, h=7, w=7, k=960, r=3, s=3, pad=1, groups=960)


@dataclass(frozen=True)
class Case:
    """One layer and what runs it: our algorithm/config, or "torch" (F.conv2d)."""

    problem: dict[str, Any]
    algorithm: str
    config: str = ""
    options: dict[str, Any] = field(default_factory=dict)  # dtype, math

    def conv_problem(self) -> ConvProblem:
        """The ConvProblem of this case."""
        return ConvProblem(**self.problem, **self.options)


CASES: dict[str, Case] = {
    # float16 tensor cores: about 70 TFLOP/s (mma.sync, NCHW, 128x128) against cuDNN's 478
    # on this layer. (The NCHW and K-step-16 NHWC cases made way for wgmma's.)
    "fp16_conv4_2_tc_nhwc_k32": Case(VGG_CONV4_2, "implicit_gemm_tc", "128x128x32-nhwc",
                                     {"dtype": "float16"}),
    # 64x64 warp tiles, four stages in 80 KiB of opted-in dynamic shared memory.
    "fp16_conv4_2_tc_nhwc_s4": Case(VGG_CONV4_2, "implicit_gemm_tc", "128x128x32-nhwc-s4",
                                    {"dtype": "float16"}),
    # Hopper's wgmma, waiting for each K-step's wgmma and leaving one running.
    "fp16_conv4_2_wgmma": Case(VGG_CONV4_2, "implicit_gemm_wgmma", "128x128x64-s4",
                               {"dtype": "float16"}),
    "fp16_conv4_2_wgmma_f1": Case(VGG_CONV4_2, "implicit_gemm_wgmma", "128x128x64-s5-f1",
                                  {"dtype": "float16"}),
    # Warp-specialized (2026-11-28, not yet on a GPU): producers and consumers through
    # mbarriers, beside the one-role -f1 tile whose barrier and copy waits ncu measured.
    "fp16_conv4_2_wgmma_ws": Case(VGG_CONV4_2, "implicit_gemm_wgmma", "128x128x64-s5-ws",
                                  {"dtype": "float16"}),
    "fp16_conv4_2_torch": Case(VGG_CONV4_2, "torch", options={"dtype": "float16"}),
    "tf32_conv4_2_wgmma_f1": Case(VGG_CONV4_2, "implicit_gemm_wgmma", "128x128x32-s5-f1",
                                  {"math": "tf32"}),
    "tf32_conv4_2_torch": Case(VGG_CONV4_2, "torch", options={"math": "tf32"}),
    # TF32's worst layer on the H200 (2026-11-26): implicit_gemm_tc 64x64 at 0.44 of cuDNN's
    # device time, issue-bound by its SASS (benchmarks/kernel_loop_sass.py).
    "tf32_res4_1x1a_rest_tc": Case(RES4_1X1A_REST, "implicit_gemm_tc", "64x64",
                                   {"math": "tf32"}),
    "tf32_res4_1x1a_rest_torch": Case(RES4_1X1A_REST, "torch", options={"math": "tf32"}),
    # wgmma's NCHW tile (2026-11-28, not yet on a GPU): x^T from registers, no NHWC copies
    # (wgmma's NHWC tiles spent about a third of their run on them here).
    "tf32_res4_1x1a_rest_wgmma_nchw": Case(RES4_1X1A_REST, "implicit_gemm_wgmma",
                                           "128x128x32-s5-f1-nchw", {"math": "tf32"}),
    # NCHW 64x64-warp tiles for vector-B 1x1 layers (2026-11-27, not yet on a GPU): half the
    # shared-memory bytes per mma of the 32x32-warp 64x64; with and without the split that
    # fills the H100's 132 SMs (98 blocks unsplit; cuDNN ran 128).
    "tf32_res4_1x1a_rest_deep": Case(RES4_1X1A_REST, "implicit_gemm_tc", "128x128-s4",
                                     {"math": "tf32"}),
    "tf32_res4_1x1a_rest_deep_k2": Case(RES4_1X1A_REST, "implicit_gemm_tc", "128x128-s4-k2",
                                        {"math": "tf32"}),
    # On the H100 (2026-11-27) that 64x64 was shared-memory bound (L1 86%), and the 64x64-warp
    # "-sS" tile, offered on res5's 7x7 layers, no faster than the 64x32-warp 128x128: is it
    # bound the same way, or by latency at one block per SM? cuDNN there: CUTLASS 128x128_32x3.
    "tf32_res5_1x1b_deep": Case(RES5_1X1B, "implicit_gemm_tc", "128x128-nhwc-s4",
                                {"math": "tf32"}),
    "tf32_res5_1x1b_tc": Case(RES5_1X1B, "implicit_gemm_tc", "128x128", {"math": "tf32"}),
    "tf32_res5_1x1b_torch": Case(RES5_1X1B, "torch", options={"math": "tf32"}),
    "fp16_res2_1x1b_tc": Case(RES2_1X1B, "implicit_gemm_tc", "128x128", {"dtype": "float16"}),
    "fp16_res2_1x1b_torch": Case(RES2_1X1B, "torch", options={"dtype": "float16"}),
    # The pointwise layers where every one of ours ran at 0.37-0.6 of cuDNN in float16 on the
    # H200 (2026-11-26): how the time splits between the GEMM, its copies and its epilogue.
    "fp16_res3_1x1b_im2col": Case(RES3_1X1B, "im2col_gemm", "chunk=all", {"dtype": "float16"}),
    "fp16_res3_1x1b_merged": Case(RES3_1X1B, "im2col_gemm", "chunk=all-merged",
                                  {"dtype": "float16"}),
    "fp16_res3_1x1b_tc": Case(RES3_1X1B, "implicit_gemm_tc", "64x64", {"dtype": "float16"}),
    # The NCHW 64x64-warp tile on the same layer (2026-11-27, not yet on a GPU).
    "fp16_res3_1x1b_deep": Case(RES3_1X1B, "implicit_gemm_tc", "128x128-s4",
                                {"dtype": "float16"}),
    "fp16_res3_1x1b_wgmma": Case(RES3_1X1B, "implicit_gemm_wgmma", "128x128x64-s5-f1",
                                 {"dtype": "float16"}),
    "fp16_res3_1x1b_torch": Case(RES3_1X1B, "torch", options={"dtype": "float16"}),
    # 3xTF32 (FP32 accuracy) and the SIMT kernel that ResNet-50's 1x1 layers fall back on.
    "fp32_res3_3x3_tc": Case(RES3_3X3, "implicit_gemm_tc", "128x128"),
    "fp32_res4_1x1b_simt": Case(RES4_1X1B, "implicit_gemm", "128x128x8"),
    "fp32_res4_1x1b_wgmma_3x": Case(RES4_1X1B, "implicit_gemm_wgmma", "128x128x32-s3"),
    "fp32_res4_1x1b_wgmma_nchw_3x": Case(RES4_1X1B, "implicit_gemm_wgmma",
                                         "128x128x32-s3-nchw"),
    # 3xTF32 with a group in flight (2026-11-28, not yet on a GPU) beside its wait-0 twin.
    "fp32_conv4_2_wgmma_3x": Case(VGG_CONV4_2, "implicit_gemm_wgmma", "64x128x32-s4"),
    "fp32_conv4_2_wgmma_3x_f1": Case(VGG_CONV4_2, "implicit_gemm_wgmma", "64x128x32-s4-f1"),
    "fp32_conv4_2_wgmma_3x_ws": Case(VGG_CONV4_2, "implicit_gemm_wgmma", "128x128x32-s3-ws"),
    # 3xFP16 (float32 as two scaled float16 parts, 2026-11-28, not yet on a GPU).
    "fp32_conv4_2_wgmma_3xfp16": Case(VGG_CONV4_2, "implicit_gemm_wgmma",
                                      "128x128x64-s3-f1-3xfp16"),
    # wgmma from NCHW on a 3x3 layer (2026-11-28, not yet on a GPU): w transposed, x read
    # element by element at each tap, beside the NHWC tiles, whose copies of x are half of
    # VGG-16's early layers' bytes at TF32 and two thirds at 3xTF32.
    "tf32_conv1_2_wgmma_nchw": Case(VGG_CONV1_2, "implicit_gemm_wgmma", "64x128x32-s5-f1-nchw",
                                    {"math": "tf32"}),
    "tf32_conv1_2_wgmma_f1": Case(VGG_CONV1_2, "implicit_gemm_wgmma", "64x128x32-s6-f1",
                                  {"math": "tf32"}),
    "tf32_conv1_2_torch": Case(VGG_CONV1_2, "torch", options={"math": "tf32"}),
    "fp32_conv4_2_wgmma_nchw": Case(VGG_CONV4_2, "implicit_gemm_wgmma",
                                    "128x128x32-s3-f1-nchw"),
    # A first layer on wgmma through channel-padded NHWC copies (2026-11-28, not yet on a
    # GPU): cuDNN's TF32 time there was 0.17 ms (H100, 2026-11-27).
    "tf32_conv1_1_wgmma_padded": Case(VGG_CONV1_1, "implicit_gemm_wgmma", "64x128x32-s6-f1",
                                      {"math": "tf32"}),
    "tf32_conv1_1_torch": Case(VGG_CONV1_1, "torch", options={"math": "tf32"}),
    "fp32_res4_1x1b_torch": Case(RES4_1X1B, "torch"),
    # FP32's last layer under 0.7x cuDNN (H100, 2026-11-27): GoogLeNet's inception3b.5x5, where
    # cuDNN runs an FFT in 0.052 ms and our best was wgmma 3xTF32 at 0.088 (fft "default":
    # 0.149 ms of device time). fft "fused": its own 32x32 transforms, frequency-major, 56 us
    # of device time on an H200 (2026-11-27, cuDNN 50); since then both forward transforms
    # in one launch.
    "fp32_inception3b_5x5_fft": Case(INCEPTION3B_5X5, "fft", "default"),
    "fp32_inception3b_5x5_fused": Case(INCEPTION3B_5X5, "fft", "fused"),
    "fp32_inception3b_5x5_torch": Case(INCEPTION3B_5X5, "torch"),
    # The same layer on the 96-row NCHW wgmma tile (K = 96: no rows past K; 2026-11-28, not
    # yet on a GPU) beside its 128-row twin, tap by tap at 3xTF32.
    "fp32_inception3b_5x5_wgmma_nchw96": Case(INCEPTION3B_5X5, "implicit_gemm_wgmma",
                                              "96x128x32-s4-f1-nchw"),
    "fp32_inception3b_5x5_wgmma_nchw128": Case(INCEPTION3B_5X5, "implicit_gemm_wgmma",
                                               "128x128x32-s3-f1-nchw"),
    # Depthwise: stride 2, and 7x7 planes, where the tile kernel ran at 0.33-0.73x PyTorch.
    "dw_s2_tile": Case(MBV2_DW_S2, "depthwise", "32x16p2_3x3"),
    "dw_s2_flat": Case(MBV2_DW_S2, "depthwise", "flat_q1_3x3"),
    "dw_s2_torch": Case(MBV2_DW_S2, "torch"),
    "dw_7x7_tile": Case(MBV2_DW_7X7, "depthwise", "8x8p1"),
    "dw_7x7_flat": Case(MBV2_DW_7X7, "depthwise", "flat_q4_3x3_s1"),
    "dw_7x7_torch": Case(MBV2_DW_7X7, "torch"),
}


def ours(case: Case) -> Callable[[], Any]:
    """A call that enqueues our algorithm on fresh random operands of the case."""
    from algorithms.registry import get_algorithm
    from algorithms.runtime import random_operands
    from tuner.devices import get_runtime

    problem = case.conv_problem()
    runtime = get_runtime("cuda:0")
    algorithm = get_algorithm("cuda", case.algorithm)
    x, w, y = random_operands(runtime, problem, np.random.default_rng(0))
    workspace = runtime.workspace(algorithm.workspace_bytes(problem, case.config))
    return lambda: algorithm.run(x, w, y, workspace, problem, case.config)


def torch_call(case: Case) -> Callable[[], Any]:
    """F.conv2d on the case's layer (cuDNN benchmark mode; TF32 only for math "tf32")."""
    import torch
    import torch.nn.functional as F

    problem = case.conv_problem()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = problem.math == "tf32"
    dtype = getattr(torch, problem.dtype)
    x = torch.randn(problem.input_shape, device="cuda", dtype=dtype)
    w = torch.randn(problem.filter_shape, device="cuda", dtype=dtype)
    return lambda: F.conv2d(x, w, None, problem.stride, problem.pad, problem.dilation,
                            problem.groups)


def flops(problem: ConvProblem) -> float:
    """Multiply-adds times two."""
    out_h, out_w = problem.out_hw
    return (2.0 * problem.n * problem.k * out_h * out_w * (problem.c // problem.groups)
            * problem.r * problem.s)


def main() -> None:
    """Run the cases: inside the profiler window under ncu, or timed with CUDA events."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="", help="comma-separated names (default: all)")
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    args = parser.parse_args()
    names = [n for n in args.cases.split(",") if n] or list(CASES)
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    if args.list:
        for name in names:
            case = CASES[name]
            print(f"{name}: {case.conv_problem().describe()} {case.algorithm}/{case.config}")
        return
    import cupy

    for index, name in enumerate(names):
        case = CASES[name]
        run = torch_call(case) if case.algorithm == "torch" else ours(case)
        for _ in range(3):  # compile, load, search: outside the window
            run()
        cupy.cuda.runtime.deviceSynchronize()
        cupy.cuda.runtime.profilerStart()
        run()
        cupy.cuda.runtime.deviceSynchronize()
        cupy.cuda.runtime.profilerStop()
        times = []
        for _ in range(20):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, end))
        problem = case.conv_problem()
        ms = statistics.median(times)
        print(f"case {index}: {name}: {problem.describe()} {case.algorithm}/{case.config}: "
              f"{ms:.4f} ms, {flops(problem) / ms / 1e9:.1f} TFLOP/s, "
              f"{problem.buffer_bytes / ms / 1e6:.0f} GB/s (x, w, y once)", flush=True)


if __name__ == "__main__":
    main()
