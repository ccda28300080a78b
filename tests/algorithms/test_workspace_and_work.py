"""Exact workspace sizes and work counts of the CPU algorithms, against the formulas their
module docstrings state, evaluated by hand for small problems (nothing large is run).

A workspace larger than needed is no wrong result, which is why the float64-reference tests
cannot see one; but the tuner skips candidates over a caller's workspace limit, and the
sizes are what a plan allocates. Mutation testing found every size below unpinned.
"""

from __future__ import annotations

from typing import Any

import pytest

from algorithms.base import DEFAULT_CONFIG, AlgorithmBase, Work
from algorithms.by_forward import forward_problem
from algorithms.cpu.winograd import images_per_pass
from algorithms.problem import ConvProblem
from algorithms.registry import get_algorithm
from algorithms.winograd import tiling


def _al(nbytes: int) -> int:
    """nbytes rounded up to 256 (every buffer of a layout starts aligned)."""
    return (nbytes + 255) // 256 * 256


def _base(name: str) -> AlgorithmBase:
    """The CPU algorithm `name`, as the base class that declares `work`."""
    algorithm = get_algorithm("cpu", name)
    assert isinstance(algorithm, AlgorithmBase)
    return algorithm


def _bytes(name: str, config: str, **kw: Any) -> int:
    return get_algorithm("cpu", name).workspace_bytes(ConvProblem(**kw), config)


_IG: dict[str, Any] = dict(n=3, c=8, h=6, w=6, k=4, r=3, s=3, pad=1)


# Mutation gap: implicit_gemm's tile sizes (BN capped by the batch, BK capped by K), the
# partial-product buffer only when K > BK, and a boolean padding mask.
@pytest.mark.parametrize(("config", "dtype", "expected"), [
    # 36 pixels an image: BN = 3 images * 36 = 108; BK = 63 (64 rounded down to 9s) < K = 72.
    # tile 63*108*4, offsets 63*108*8, mask 9*108, acc 4*108*4, partial 4*108*4.
    ("bn1024_bk64", "float32", _al(27216) + _al(54432) + _al(972) + 2 * _al(1728)),
    # BK = min(252, K = 72) = 72: one K-step, no partial product.
    ("bn4096_bk256", "float32", _al(31104) + _al(62208) + _al(972) + _al(1728)),
    # float16: float32 tile and acc, plus the gathered float16 tile and the float32 filter.
    ("bn1024_bk64", "float16",
     _al(27216) + _al(54432) + _al(972) + 2 * _al(1728) + _al(63 * 108 * 2) + _al(4 * 72 * 4)),
])
def test_implicit_gemm_workspace(config: str, dtype: str, expected: int) -> None:
    assert _bytes("implicit_gemm", config, **_IG, dtype=dtype) == expected


# Mutation gap: implicit_gemm's config names are stored in databases (stable strings).
def test_implicit_gemm_config_names() -> None:
    algorithm = get_algorithm("cpu", "implicit_gemm")
    assert algorithm.configs(ConvProblem(**_IG)) == ("bn4096_bk256", "bn1024_bk64")


# Mutation gap: fft's FFT sizes (5-smooth over the rows and columns any output reads), its
# buffers sized by the larger of input and output, and no twiddles for a 1x1 filter.
def test_fft_workspace() -> None:
    # out 5x6; used 11x7 -> FFT 12x8, F = 12*5 = 60; planes max(6, 8) = 8; taps 3*2.
    strided = dict(n=2, c=3, h=9, w=7, k=4, r=3, s=2, pad=(1, 0), stride=(2, 1))
    assert _bytes("fft", DEFAULT_CONFIG, **strided) == (
        _al(max(2 * 3 * 12, 2 * 4 * 5) * 8 * 4) + 2 * _al(8 * 60 * 8) + _al(6 * 12 * 8)
        + _al(12 * 60 * 8) + _al(60 * 6 * 8))
    # 1x1: 5x6 is already 5-smooth; F = 5*4 = 20; no filter spectrum or twiddles.
    pointwise = dict(n=2, c=3, h=5, w=6, k=4, r=1, s=1)
    assert _bytes("fft", DEFAULT_CONFIG, **pointwise) == (
        _al(max(2 * 3 * 5, 2 * 4 * 5) * 6 * 4) + 2 * _al(8 * 20 * 8) + _al(12 * 8))
    assert _bytes("fft", DEFAULT_CONFIG, **pointwise, dtype="float64") == (
        _al(max(2 * 3 * 5, 2 * 4 * 5) * 6 * 8) + 2 * _al(8 * 20 * 16) + _al(12 * 16))


# Mutation gap: winograd's images per pass (at least PASS_TILES = 256 tiles, at most the
# batch) and the workspace it sizes.
@pytest.mark.parametrize(("config", "images", "expected"), [
    # 10x10 tiles an image: ceil(256/100) = 3 images; alpha 4, P 16, Ht = Wt = 22, T = 300.
    ("f2x2", 3, _al(3 * 2 * 22 * 22 * 4) + _al(16 * 3 * 2 * 4) + _al(16 * 3 * 300 * 4)
     + _al(16 * 2 * 300 * 4) + _al(3 * 3 * 20 * 20 * 4)),
    # 5x5 tiles an image: ceil(256/25) = 11, but only 5 images; alpha 6, P 36, T = 125.
    ("f4x4", 5, _al(5 * 2 * 22 * 22 * 4) + _al(36 * 3 * 2 * 4) + _al(36 * 3 * 125 * 4)
     + _al(36 * 2 * 125 * 4) + _al(5 * 3 * 20 * 20 * 4)),
])
def test_winograd_passes_and_workspace(config: str, images: int, expected: int) -> None:
    problem = ConvProblem(n=5, c=2, h=20, w=20, k=3, r=3, s=3, pad=1)
    assert images_per_pass(problem, tiling(problem, config)) == images
    assert get_algorithm("cpu", "winograd").workspace_bytes(problem, config) == expected


_DW: dict[str, Any] = dict(n=3, c=4, h=9, w=8, k=8, r=3, s=3, pad=1, stride=2, groups=4)


# Mutation gap: depthwise's chunk is at most the batch (3 images here, far under
# CHUNK_BYTES), and its buffers per direction.
@pytest.mark.parametrize(("direction", "dtype", "expected"), [
    # Phases 6x5 (hq x wq), wide 5*5 = 25, the last tap at 1*5 + 1: flat 31, 4 phases.
    ("forward", "float32", _al(3 * 4 * 4 * 31 * 4) + 2 * _al(3 * 4 * 25 * 4)),
    ("backward_filter", "float32",
     _al(3 * 4 * 4 * 31 * 4) + _al(3 * 4 * 2 * 25 * 4) + _al(8 * 9 * 4)),
    ("backward_data", "bfloat16", _al(3 * 4 * 4 * 31 * 4) + _al(3 * 4 * 2 * 25 * 4)
     + _al(3 * 4 * 25 * 4) + _al(3 * 4 * 72 * 4) + _al(8 * 9 * 4)),
])
def test_depthwise_workspace(direction: str, dtype: str, expected: int) -> None:
    assert _bytes("depthwise", DEFAULT_CONFIG, **_DW, direction=direction,
                  dtype=dtype) == expected


# Mutation gap: im2col_gemm's staging for 16-bit storage, and no column matrix for a
# pointwise float32 layer.
@pytest.mark.parametrize(("kw", "expected"), [
    (dict(r=1, s=1), 0),
    (dict(r=1, s=1, dtype="float16"),  # col, then the float32 filter and one image's y
     _al(4 * 42 * 4) + _al(6 * 2 * 4) + _al(6 * 42 * 4)),
    (dict(dtype="bfloat16", direction="backward_data"),  # col, dy, filter, one image's dx
     _al(4 * 9 * 42 * 4) + _al(6 * 42 * 4) + _al(6 * 2 * 9 * 4) + _al(4 * 42 * 4)),
    (dict(dtype="float16", direction="backward_filter"),  # col, dy, the dW accumulator
     _al(4 * 9 * 42 * 4) + _al(6 * 42 * 4) + _al(6 * 2 * 9 * 4)),
])
def test_im2col_gemm_workspace(kw: dict[str, Any], expected: int) -> None:
    args: dict[str, Any] = dict(n=2, c=4, h=7, w=6, k=6, r=3, s=3, pad=1, groups=2)
    if (args | kw)["r"] == 1:
        args["pad"] = 0
    assert _bytes("im2col_gemm", DEFAULT_CONFIG, **(args | kw)) == expected


# Mutation gap: by_forward's rearranged operands, exactly as its docstring sizes them
# (plus F, the forward algorithm's workspace for the rearranged problem).
@pytest.mark.parametrize("name", ["implicit_gemm", "fft"])
def test_backward_workspace_is_the_rearranged_operands_plus_the_forward_one(name: str) -> None:
    algorithm = get_algorithm("cpu", name)

    def check(problem: ConvProblem, operands: int, inner: ConvProblem) -> None:
        assert forward_problem(problem) == inner
        for config in algorithm.configs(problem):
            assert algorithm.workspace_bytes(problem, config) == (
                operands + algorithm.workspace_bytes(inner, config))

    # Phases (stride 2, 3x3, pad 1, dx 9x8): A = 2, J = 2, q0 = 0, Q = 5 on both axes.
    phases = ConvProblem(n=2, c=3, h=9, w=8, k=4, r=3, s=3, pad=1, stride=2,
                         direction="backward_data")
    check(phases, _al(2 * 4 * 6 * 6 * 4) + _al(4 * 3 * 4 * 2 * 2 * 4) + _al(2 * 4 * 3 * 25 * 4),
          ConvProblem(n=2, c=4, h=6, w=6, k=12, r=2, s=2))
    # Spread (stride 1, dilation (1, 2)): dy framed to 9x8, the flipped filter; no copy back.
    spread = ConvProblem(n=2, c=3, h=7, w=6, k=4, r=3, s=2, pad=1, dilation=(1, 2),
                         direction="backward_data")
    check(spread, _al(2 * 4 * 9 * 8 * 4) + _al(3 * 4 * 3 * 2 * 4),
          ConvProblem(n=2, c=4, h=9, w=8, k=3, r=3, s=2, dilation=(1, 2)))
    # backward_filter (out 4x4, stride 2): x^T 9x8, dy^T, dw^T.
    filt = ConvProblem(n=2, c=3, h=7, w=6, k=4, r=3, s=2, pad=1, stride=2,
                       direction="backward_filter")
    check(filt, _al(3 * 2 * 9 * 8 * 4) + _al(4 * 2 * 16 * 4) + _al(3 * 4 * 3 * 2 * 4),
          ConvProblem(n=3, c=2, h=9, w=8, k=4, r=4, s=4, dilation=2))


# Mutation gap: the work counts the cost model reads (Python-level steps on the CPU).
def test_cpu_work_counts() -> None:
    def launches(name: str, config: str = DEFAULT_CONFIG, **kw: Any) -> int:
        return _base(name).work(ConvProblem(**kw), config).launches

    geometry: dict[str, Any] = dict(n=3, c=4, h=6, w=7, k=5, r=3, s=2, pad=1)
    # direct: one step per tap and image; backward_filter sums the batch in each step.
    assert launches("direct", **geometry) == 3 * 6
    assert launches("direct", **geometry, direction="backward_data") == 3 * 6
    assert launches("direct", **geometry, direction="backward_filter") == 6
    # im2col_gemm: per image, a copy per tap and one GEMM.
    assert launches("im2col_gemm", **geometry) == 3 * (6 + 1)
    # implicit_gemm: 1600 pixels an image over BN = 1024: 2 tiles an image, 2 images,
    # 2 groups, one K-step (K = 27 <= BK = 63).
    big = dict(n=2, c=6, h=40, w=40, k=4, r=3, s=3, pad=1, groups=2)
    assert launches("implicit_gemm", "bn1024_bk64", **big) == 2 * 2 * 2 * 1
    # By the forward algorithm: its run plus a launch per copy (2 without a copy back).
    implicit = _base("implicit_gemm")
    for direction, copies in (("backward_data", 2), ("backward_filter", 3)):
        problem = ConvProblem(**geometry, direction=direction)
        for config in implicit.configs(problem):
            inner = implicit.work(forward_problem(problem), config)
            assert implicit.work(problem, config) == Work(inner.blocks, inner.fill,
                                                          inner.launches + copies)
