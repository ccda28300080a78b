"""Host-side checks of the CUDA fft algorithm that need no GPU: its transform sizes, its
workspace layout (regions apart and aligned for every dtype), and where the fused
configuration is offered and what workspace it takes.
"""

from __future__ import annotations

import itertools
from typing import Any

from algorithms.cuda import _fft_fused, fft
from algorithms.problem import ConvProblem
from tests.cuda_shapes import ALIGN_SHAPES, SHAPES


def test_fft_workspace_regions_do_not_overlap() -> None:
    problem = ConvProblem(**SHAPES["groups4"])
    spans = sorted(fft.workspace_layout(problem).values())
    for (o1, n1), (o2, _n2) in itertools.pairwise(spans):
        assert o1 + n1 <= o2 and o2 % 256 == 0


def test_fft_sizes_are_never_1() -> None:
    """cuFFT is never asked for a transform side of 1 (W = 1 for 1-D convolutions)."""
    for kw in (ALIGN_SHAPES["one_pixel"], ALIGN_SHAPES["conv1d_hx1"]):
        fh, fw = fft.fft_size(ConvProblem(**kw))
        assert fh >= 2 and fw >= 2


def test_fft_workspace_regions_are_aligned_for_every_dtype() -> None:
    for dtype in ("float16", "float32", "float64"):
        for kw in (*SHAPES.values(), *ALIGN_SHAPES.values()):
            problem = ConvProblem(**kw, dtype=dtype)
            layout = fft.workspace_layout(problem)
            total = fft.FftCuda().workspace_bytes(problem, "default")
            spans = sorted(layout.values())
            assert all(offset % 256 == 0 for offset, _ in spans)
            assert spans[-1][0] + spans[-1][1] <= total
            for (o1, n1), (o2, _n2) in itertools.pairwise(spans):
                assert o1 + n1 <= o2


def test_fused_fft_is_offered_where_its_kernels_fit() -> None:
    """fft's "fused" configuration: 16- and 32-bit planes within 32 x 32, filters of more than
    one tap, at most FUSED_MAX_GEMMS GEMM calls; the smallest power of two N covering
    H + pad, the last output row's start and the filter's reach."""
    def offered(**kw: Any) -> bool:
        return "fused" in fft.FftCuda().configs(ConvProblem(**kw))

    inception: dict[str, Any] = dict(n=32, c=32, h=28, w=28, k=96, r=5, s=5, pad=(2, 2))
    assert offered(**inception)
    assert _fft_fused.size(ConvProblem(**inception)) == 32  # 28 + 2, not 28 + 4
    assert _fft_fused.size(ConvProblem(**{**inception, "h": 14, "w": 14})) == 16  # 14 + 2
    assert not offered(**{**inception, "dtype": "float64"})  # cuFFT keeps float64
    assert not offered(**{**inception, "r": 1, "s": 1, "pad": (0, 0)})  # one tap
    assert not offered(**{**inception, "h": 31, "w": 31})  # 31 + 2 > 32
    # A depthwise layer: 96 groups are 96 GEMM calls at n = 32, one call at n = 1.
    depthwise: dict[str, Any] = dict(c=96, h=14, w=14, k=96, r=3, s=3, pad=(1, 1), groups=96)
    assert not offered(n=32, **depthwise)
    assert offered(n=1, **depthwise)


def test_fused_fft_workspace_holds_the_three_spectra() -> None:
    problem = ConvProblem(n=2, c=6, h=14, w=14, k=4, r=3, s=3, pad=(1, 1), groups=2)
    f = 16 * 9  # N = 16 (14 + 1 -> 16): 16 x 9 frequencies
    sizes = [f * 2 * 6 * 8, f * 4 * 3 * 8, f * 2 * 4 * 8]  # xt, wt (k x c/groups), yt
    assert fft.FftCuda().workspace_bytes(problem, "fused") == sum(-(-s // 256) * 256
                                                                  for s in sizes)
