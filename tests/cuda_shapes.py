"""Convolution shapes the CUDA backend is checked on: on a GPU (tests/gpu) and, the smaller
ones, with emulated kernels on the CPU (tests/test_cuda_emulated.py)."""

from __future__ import annotations

from typing import Any

#: id -> ConvProblem keyword arguments (dtype added per test).
SHAPES: dict[str, dict[str, Any]] = {
    # ResNet-50 layers at batch 2 (one per distinct geometry).
    "r50_conv1": dict(n=2, c=3, h=224, w=224, k=64, r=7, s=7, pad=3, stride=2),
    "r50_res2_3x3": dict(n=2, c=64, h=56, w=56, k=64, r=3, s=3, pad=1),
    "r50_res2_1x1": dict(n=2, c=64, h=56, w=56, k=256, r=1, s=1),
    "r50_res3_1x1_s2": dict(n=2, c=256, h=56, w=56, k=128, r=1, s=1, stride=2),
    "r50_res4_3x3": dict(n=2, c=256, h=14, w=14, k=256, r=3, s=3, pad=1),
    "r50_res5_3x3": dict(n=2, c=512, h=7, w=7, k=512, r=3, s=3, pad=1),
    "r50_res5_1x1a": dict(n=2, c=2048, h=7, w=7, k=512, r=1, s=1),
    # VGG-16 layers at batch 1.
    "vgg_conv1_1": dict(n=1, c=3, h=224, w=224, k=64, r=3, s=3, pad=1),
    "vgg_conv3_1": dict(n=1, c=128, h=56, w=56, k=256, r=3, s=3, pad=1),
    "vgg_conv5_1": dict(n=1, c=512, h=14, w=14, k=512, r=3, s=3, pad=1),
    # Odd sizes: nothing divides a tile.
    "odd": dict(n=3, c=5, h=17, w=13, k=7, r=3, s=3, pad=1),
    "odd_k130": dict(n=1, c=33, h=9, w=11, k=130, r=3, s=3, pad=1),
    "batch_odd_pixels": dict(n=5, c=7, h=7, w=7, k=9, r=1, s=1),
    "non_square_filter": dict(n=2, c=16, h=17, w=17, k=24, r=1, s=7, pad=(0, 3)),
    "five_by_five": dict(n=2, c=12, h=27, w=27, k=20, r=5, s=5, pad=2),
    "single_pixel": dict(n=2, c=3, h=1, w=1, k=4, r=3, s=3, pad=1),
    "filter_equals_padded": dict(n=1, c=4, h=4, w=3, k=3, r=6, s=7, pad=(1, 2)),
    # Stride, padding and dilation, symmetric and not.
    "stride2": dict(n=2, c=8, h=33, w=31, k=16, r=3, s=3, pad=1, stride=2),
    "stride_pair": dict(n=2, c=6, h=20, w=21, k=10, r=3, s=3, pad=(1, 2), stride=(2, 1)),
    "pad_gt_filter": dict(n=2, c=3, h=4, w=5, k=2, r=3, s=3, pad=4),
    "dilation2": dict(n=2, c=16, h=23, w=19, k=24, r=3, s=3, pad=2, dilation=2),
    "dilation_pair": dict(n=1, c=8, h=30, w=30, k=8, r=3, s=3, pad=(2, 3), dilation=(2, 3)),
    "dilation_stride": dict(n=2, c=4, h=24, w=22, k=6, r=2, s=3, pad=1, stride=2, dilation=3),
    # Groups and depthwise.
    "groups4": dict(n=2, c=32, h=14, w=14, k=64, r=3, s=3, pad=1, groups=4),
    "groups_strided": dict(n=1, c=8, h=9, w=9, k=12, r=3, s=2, pad=(1, 2), stride=2, groups=4),
    "depthwise": dict(n=2, c=32, h=28, w=28, k=32, r=3, s=3, pad=1, groups=32),
    "depthwise_s2": dict(n=2, c=48, h=15, w=15, k=48, r=3, s=3, pad=1, stride=2, groups=48),
    "depthwise_multiplier": dict(n=1, c=8, h=12, w=12, k=16, r=5, s=5, pad=2, groups=8),
    # Tile edges: more channels or pixels than one tile, P*Q a multiple of 4 (vector stores),
    # several K-steps and channel chunks.
    "k_over_tile": dict(n=1, c=3, h=6, w=5, k=130, r=3, s=3, pad=1),
    "pixels_over_tile": dict(n=2, c=2, h=11, w=13, k=4, r=1, s=1),
    "pq_multiple_of_4": dict(n=2, c=4, h=8, w=8, k=6, r=3, s=3, pad=1),
    "many_channels": dict(n=2, c=40, h=5, w=6, k=6, r=3, s=3, pad=1),
    # Over 63 * 1024 FFT frequencies: the per-frequency GEMM batch is split across cuBLAS calls.
    "many_frequencies": dict(n=1, c=2, h=370, w=370, k=2, r=3, s=3, pad=1),
}

#: Depthwise shapes (groups == c) beyond those of SHAPES, for the depthwise kernel alone:
#: several tiles in both directions, odd sizes, multipliers, dilation with stride, 5x5.
DEPTHWISE_SHAPES: dict[str, dict[str, Any]] = {
    # 37 wide and 19 tall at stride 2: 19x10 outputs, dilation 2, multiplier 2.
    "dw_dilated_m2": dict(n=2, c=3, h=19, w=37, k=6, r=3, s=3, pad=2, stride=2, dilation=2,
                          groups=3),
    # 35 rows: more than one 32-row tile; a 5x5 halo of 2 on every side.
    "dw_5x5_tall": dict(n=1, c=2, h=35, w=9, k=2, r=5, s=5, pad=2, groups=2),
    # Every pair asymmetric; 2x1 filter taps of a 3x2 filter read padding only at the edges.
    "dw_asymmetric": dict(n=3, c=4, h=9, w=20, k=4, r=3, s=2, pad=(1, 0), stride=(1, 2),
                          dilation=(2, 1), groups=4),
    # MobileNet-v2's 7x7 block (c=960 scaled down): a tile larger than the image, multiplier 3.
    "dw_7x7_m3": dict(n=2, c=5, h=7, w=7, k=15, r=3, s=3, pad=1, groups=5),
    # Stride 2 in both directions, 9 output columns (groups of 4 leave 3 phantom ones),
    # multiplier 2; and stride 2 along the width only: flat_q4_3x3_s2's shared rows.
    "dw_s2_m2": dict(n=2, c=3, h=15, w=17, k=6, r=3, s=3, pad=1, stride=2, groups=3),
    "dw_stride_1x2": dict(n=1, c=4, h=9, w=21, k=4, r=3, s=3, pad=1, stride=(1, 2), groups=4),
}

#: The network layers of SHAPES (too big to emulate on a CPU at these batch sizes).
NETWORK_SHAPES = tuple(name for name in SHAPES if name.startswith(("r50_", "vgg_")))

#: Shapes also checked in float16 and float64 (small enough for every algorithm).
OTHER_DTYPE_SHAPES = ("odd", "stride_pair", "dilation_stride", "groups4", "depthwise",
                      "r50_res5_3x3", "batch_odd_pixels")


#: Shapes where nothing is a multiple of 4 (or 2): P*Q, k, c, c/groups, filter taps; run with
#: x, w and y one element past a 256-byte boundary, as a slice of a caller's tensor is.
ALIGN_SHAPES: dict[str, dict[str, Any]] = {
    "pq_odd_k_odd": dict(n=3, c=3, h=5, w=7, k=5, r=3, s=3, pad=1),  # P*Q = 35
    "pq_odd_stride": dict(n=2, c=6, h=9, w=9, k=7, r=3, s=1, stride=(2, 3)),  # Q = 3, P*Q = 12
    "pq_2": dict(n=3, c=5, h=1, w=2, k=3, r=1, s=1),  # P*Q = 2: vectors would straddle images
    "pq_6_groups": dict(n=2, c=6, h=2, w=3, k=9, r=1, s=1, groups=3),  # kg = 3
    "one_pixel": dict(n=5, c=7, h=1, w=1, k=3, r=1, s=1),  # 1x1 spatial, FFT side 1 -> 2
    "conv1d_hx1": dict(n=2, c=3, h=11, w=1, k=5, r=3, s=1, pad=(1, 0)),  # W = 1
}
