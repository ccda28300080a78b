"""The CPU depthwise algorithm: every direction and dtype against the float64 reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms.base import DEFAULT_CONFIG
from algorithms.cpu import depthwise
from algorithms.problem import ConvProblem
from algorithms.reference import reference, relative_error, tolerance
from algorithms.registry import get_algorithm
from tuner import find_algorithms

DEPTHWISE = get_algorithm("cpu", "depthwise")
DTYPES = ("float32", "float64", "float16", "bfloat16")
DIRECTIONS = ("forward", "backward_data", "backward_filter")

#: id -> ConvProblem keyword arguments, every one with groups == c.
SHAPES: dict[str, dict[str, Any]] = {
    "m1_3x3_s1": dict(n=2, c=6, h=9, w=9, k=6, r=3, s=3, pad=1, groups=6),
    "m2_3x3_s1": dict(n=3, c=4, h=8, w=10, k=8, r=3, s=3, pad=1, groups=4),
    "m1_3x3_s2_odd": dict(n=2, c=5, h=15, w=13, k=5, r=3, s=3, pad=1, stride=2, groups=5),
    "m2_5x5_s2": dict(n=2, c=3, h=11, w=12, k=6, r=5, s=5, pad=2, stride=2, groups=3),
    "m1_5x5_no_pad": dict(n=1, c=7, h=9, w=7, k=7, r=5, s=5, groups=7),
    "m1_dilation2": dict(n=2, c=4, h=10, w=11, k=4, r=3, s=3, pad=2, dilation=2, groups=4),
    "m3_dilation2_s2": dict(n=3, c=2, h=13, w=9, k=6, r=3, s=3, pad=2, stride=2, dilation=2,
                            groups=2),
    "m1_pad_gt_filter": dict(n=2, c=3, h=4, w=5, k=3, r=3, s=3, pad=4, groups=3),
    "m2_asymmetric": dict(n=1, c=3, h=7, w=12, k=6, r=2, s=5, pad=(0, 2), stride=(1, 3),
                          dilation=(2, 1), groups=3),
    "m1_1x1": dict(n=2, c=8, h=5, w=5, k=8, r=1, s=1, groups=8),
    "single_channel": dict(n=4, c=1, h=6, w=6, k=1, r=3, s=3, pad=1),
}


def _operands(problem: ConvProblem) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng()  # fresh inputs every run
    a_shape, b_shape, _ = problem.operand_shapes
    return (rng.standard_normal(a_shape).astype(problem.dtype),
            rng.standard_normal(b_shape).astype(problem.dtype))


def _check(problem: ConvProblem) -> float:
    """Run on a NaN-poisoned result and a 0xFF workspace; the relative error."""
    a, b = _operands(problem)
    ref = reference(a, b, problem)
    nbytes = DEPTHWISE.workspace_bytes(problem, DEFAULT_CONFIG)
    workspace = np.full(nbytes, 0xFF, np.uint8) if nbytes else None
    out = np.full(problem.operand_shapes[2], np.nan, problem.dtype)
    DEPTHWISE.run(a, b, out, workspace, problem, DEFAULT_CONFIG)
    assert np.isfinite(out).all(), "unwritten elements, or NaN read from the workspace"
    return relative_error(out, ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_matches_reference(shape: str, direction: str, dtype: str) -> None:
    problem = ConvProblem(**SHAPES[shape], dtype=dtype, direction=direction)
    assert DEPTHWISE.supports(problem)
    assert _check(problem) <= tolerance(dtype, "depthwise")


@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_several_chunks_of_images(monkeypatch: pytest.MonkeyPatch, direction: str,
                                  dtype: str) -> None:
    # A chunk cap below one image's size: one image per chunk; every chunk must start where
    # the last ended and (backward_filter) the chunks' sums must add up.
    monkeypatch.setattr(depthwise, "CHUNK_BYTES", 1)
    problem = ConvProblem(**SHAPES["m3_dilation2_s2"], dtype=dtype, direction=direction)
    assert _check(problem) <= tolerance(dtype, "depthwise")
    # Two images per chunk over n = 3: the last chunk is short.
    monkeypatch.setattr(depthwise, "CHUNK_BYTES", 2 * depthwise._plan(problem).per_image)
    assert depthwise._plan(problem).images == 2
    assert _check(problem) <= tolerance(dtype, "depthwise")


@pytest.mark.parametrize("groups", (1, 2))
def test_refuses_groups_other_than_c_with_the_reason(groups: int) -> None:
    problem = ConvProblem(n=1, c=4, h=6, w=6, k=4, r=3, s=3, pad=1, groups=groups)
    support = DEPTHWISE.supports(problem)
    assert not support
    assert "groups == c" in support.reason and f"groups={groups}" in support.reason


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_workspace_does_not_grow_with_the_batch(direction: str) -> None:
    # MobileNet-v2 depthwise layers: one chunk of images, whatever the batch; 16-bit storage
    # computes in float32 buffers and stages its conversions, so it needs more than float32.
    def nbytes(n: int, h: int, dtype: str = "float32") -> int:
        problem = ConvProblem(n=n, c=96, h=h, w=h, k=96, r=3, s=3, pad=1, stride=2, groups=96,
                              dtype=dtype, direction=direction)
        return DEPTHWISE.workspace_bytes(problem, DEFAULT_CONFIG)

    assert nbytes(32, 112) == nbytes(256, 112) < nbytes(32, 112, "float16")
    # Small images: as many per chunk as CHUNK_BYTES holds (fewer when the batch is smaller).
    assert nbytes(8, 14) <= nbytes(256, 14) == nbytes(1024, 14) <= depthwise.CHUNK_BYTES + 4096


def test_tuner_lists_depthwise_for_a_mobilenet_layer(db_url: str) -> None:
    # MobileNet-v2's block2 depthwise 3x3 stride 2, scaled down to batch 2 and 28x28.
    problem = ConvProblem(n=2, c=16, h=28, w=28, k=16, r=3, s=3, pad=1, stride=2, groups=16)
    found = {r.algorithm: r for r in find_algorithms(problem, device="cpu", db=db_url)}
    row = found["depthwise"]
    assert row.usable and row.time_ms is not None and row.time_ms > 0
    assert row.rel_error is not None and row.rel_error <= tolerance("float32", "depthwise")
    dense = ConvProblem(n=2, c=16, h=28, w=28, k=16, r=3, s=3, pad=1)
    refused = {r.algorithm: r for r in find_algorithms(dense, device="cpu", db=db_url)}
    assert not refused["depthwise"].usable


# Mutation gap: a phase can hold more rows than the last tap reaches: an even filter at
# stride 2 over an odd padded height (7 rows: phases of 4 and 3 rows, a 2-tap reach of 3).
# Every phase row must fit in the flat buffer, not only the taps' slices.
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_phases_longer_than_the_taps_reach(direction: str) -> None:
    problem = ConvProblem(n=2, c=3, h=7, w=9, k=6, r=2, s=2, stride=2, groups=3,
                          direction=direction)
    assert DEPTHWISE.supports(problem)
    assert _check(problem) <= tolerance("float32", "depthwise")
