"""The float64 oracle against independent naive implementations on tiny shapes."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import correlate2d

from algorithms.problem import ConvProblem
from algorithms.reference import max_abs_error, reference_conv, relative_error, tolerance

PROBLEMS: dict[str, ConvProblem] = {
    "plain": ConvProblem(n=1, c=2, h=5, w=5, k=3, r=3, s=3),
    "pad": ConvProblem(n=2, c=2, h=4, w=5, k=2, r=3, s=2, pad=(1, 2)),
    "pad_gt_filter": ConvProblem(n=1, c=1, h=3, w=3, k=2, r=2, s=2, pad=3),
    "stride": ConvProblem(n=1, c=3, h=7, w=8, k=2, r=3, s=3, pad=1, stride=(2, 3)),
    "dilation": ConvProblem(n=1, c=2, h=7, w=7, k=2, r=3, s=2, pad=1, dilation=(2, 3)),
    "groups": ConvProblem(n=2, c=4, h=5, w=5, k=6, r=3, s=3, pad=1, groups=2),
    "depthwise": ConvProblem(n=1, c=3, h=6, w=5, k=3, r=3, s=3, pad=1, stride=2, groups=3),
    "everything": ConvProblem(
        n=2, c=6, h=9, w=8, k=4, r=2, s=3, pad=(2, 1), stride=(2, 1), dilation=(2, 2), groups=2
    ),
    "full_footprint": ConvProblem(n=1, c=2, h=3, w=4, k=2, r=5, s=6, pad=1),
}


def _naive(x: np.ndarray, w: np.ndarray, p: ConvProblem) -> np.ndarray:
    """Cross-correlation by the definition: explicit loops over every output and every tap."""
    (ph, pw), (sh, sw), (dh, dw) = p.pad, p.stride, p.dilation
    cg, kg = p.c // p.groups, p.k // p.groups
    out_h, out_w = p.out_hw
    y = np.zeros(p.output_shape, dtype=np.float64)
    for b in range(p.n):
        for k in range(p.k):
            group = k // kg
            for oh in range(out_h):
                for ow in range(out_w):
                    total = 0.0
                    for cl in range(cg):
                        for r in range(p.r):
                            for s in range(p.s):
                                ih = oh * sh - ph + r * dh
                                iw = ow * sw - pw + s * dw
                                if 0 <= ih < p.h and 0 <= iw < p.w:
                                    total += float(x[b, group * cg + cl, ih, iw]) * float(
                                        w[k, cl, r, s]
                                    )
                    y[b, k, oh, ow] = total
    return y


def _random(p: ConvProblem) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng()
    return rng.standard_normal(p.input_shape), rng.standard_normal(p.filter_shape)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_reference_matches_naive_loops(name: str) -> None:
    problem = PROBLEMS[name]
    x, w = _random(problem)
    y = reference_conv(x, w, problem)
    assert y.shape == problem.output_shape and y.dtype == np.float64
    np.testing.assert_allclose(y, _naive(x, w, problem), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("pad", "stride", "dilation"),
    [(0, 1, 1), (2, 1, 1), ((1, 3), 1, 1), (1, (2, 3), 1), (2, 1, (2, 1)), (3, 2, 2)],
)
def test_reference_matches_scipy_single_channel(
    pad: int | tuple[int, int],
    stride: int | tuple[int, int],
    dilation: int | tuple[int, int],
) -> None:
    problem = ConvProblem(
        n=1, c=1, h=9, w=11, k=1, r=3, s=4, pad=pad, stride=stride, dilation=dilation
    )
    x, w = _random(problem)
    (ph, pw), (sh, sw), (dh, dw) = problem.pad, problem.stride, problem.dilation
    padded = np.pad(x[0, 0], ((ph, ph), (pw, pw)))
    # Dilation by spreading the taps over a zero filter; stride by subsampling.
    spread = np.zeros((problem.dilated_r, problem.dilated_s))
    spread[::dh, ::dw] = w[0, 0]
    expected = correlate2d(padded, spread, mode="valid")[::sh, ::sw]
    y = reference_conv(x, w, problem)
    assert y[0, 0].shape == expected.shape == problem.out_hw
    np.testing.assert_allclose(y[0, 0], expected, rtol=1e-12, atol=1e-12)


def test_reference_accepts_low_precision_inputs() -> None:
    problem = ConvProblem(n=1, c=2, h=4, w=4, k=2, r=3, s=3, pad=1, dtype="float16")
    x, w = _random(problem)
    x16, w16 = x.astype(np.float16), w.astype(np.float16)
    y = reference_conv(x16, w16, problem)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, _naive(x16, w16, problem), rtol=1e-12, atol=1e-12)


def test_reference_rejects_mismatched_shapes() -> None:
    problem = PROBLEMS["plain"]
    x, w = _random(problem)
    with pytest.raises(ValueError, match="do not match"):
        reference_conv(x[:, :1], w, problem)


def test_error_measures() -> None:
    ref = np.array([3.0, 4.0])
    assert relative_error(ref, ref) == 0.0
    assert relative_error(np.array([3.0, 4.5]), ref) == pytest.approx(0.1)
    assert relative_error(np.zeros(2), np.zeros(2)) == 0.0
    assert max_abs_error(np.array([3.0, 4.5]), ref) == pytest.approx(0.5)
    assert tolerance("float32", "fft") > tolerance("float32", "direct")
    assert tolerance("float16", "implicit_gemm") > tolerance("float32", "implicit_gemm")


def test_batch_chunking_gives_the_same_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    # Large problems are computed a few images at a time; force one image per chunk.
    from algorithms import reference

    p = ConvProblem(n=5, c=4, h=7, w=6, k=6, r=3, s=3, pad=1, groups=2)
    rng = np.random.default_rng()
    x, w = rng.standard_normal(p.input_shape), rng.standard_normal(p.filter_shape)
    whole = reference.reference_conv(x, w, p)
    monkeypatch.setattr(reference, "CHUNK_BYTES", 1)
    np.testing.assert_allclose(reference.reference_conv(x, w, p), whole, rtol=1e-12, atol=1e-12)


BACKWARD_SHAPES = [
    dict(n=2, c=4, h=9, w=8, k=6, r=3, s=3, pad=1),
    dict(n=2, c=4, h=10, w=9, k=6, r=3, s=2, pad=(2, 1), stride=(2, 3), dilation=(2, 1),
         groups=2),
    dict(n=1, c=3, h=4, w=5, k=2, r=3, s=3, pad=4, stride=3),  # stride holes in dx
    dict(n=3, c=6, h=7, w=7, k=6, r=3, s=3, pad=1, stride=2, groups=6),  # depthwise
]


@pytest.mark.parametrize("shape", range(len(BACKWARD_SHAPES)))
def test_backward_references_are_the_adjoints_of_forward(shape: int) -> None:
    # <conv(x, w), dy> = <x, backward_data(dy, w)> = <w, backward_filter(x, dy)>: the
    # definition of both gradients, checked without any other implementation.
    from dataclasses import replace

    from algorithms.reference import reference

    problem = ConvProblem(**BACKWARD_SHAPES[shape])  # type: ignore[arg-type]
    rng = np.random.default_rng()
    x = rng.standard_normal(problem.input_shape)
    w = rng.standard_normal(problem.filter_shape)
    dy = rng.standard_normal(problem.output_shape)
    y = reference(x, w, problem)
    dx = reference(dy, w, replace(problem, direction="backward_data"))
    dw = reference(x, dy, replace(problem, direction="backward_filter"))
    assert dx.shape == x.shape and dw.shape == w.shape
    inner = float(np.vdot(y, dy))
    assert np.isclose(np.vdot(x, dx), inner, rtol=1e-10)
    assert np.isclose(np.vdot(w, dw), inner, rtol=1e-10)


@pytest.mark.parametrize("shape", range(len(BACKWARD_SHAPES)))
def test_backward_references_match_torch(shape: int) -> None:
    torch = pytest.importorskip("torch")
    from dataclasses import replace

    from algorithms.reference import reference

    problem = ConvProblem(**BACKWARD_SHAPES[shape])  # type: ignore[arg-type]
    rng = np.random.default_rng()
    x = rng.standard_normal(problem.input_shape)
    w = rng.standard_normal(problem.filter_shape)
    dy = rng.standard_normal(problem.output_shape)
    geometry = (problem.stride, problem.pad, problem.dilation, problem.groups)
    t = torch.from_numpy
    dx = torch.nn.grad.conv2d_input(x.shape, t(w), t(dy), *geometry).numpy()
    dw = torch.nn.grad.conv2d_weight(t(x), w.shape, t(dy), *geometry).numpy()
    np.testing.assert_allclose(reference(dy, w, replace(problem, direction="backward_data")),
                               dx, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(reference(x, dy, replace(problem, direction="backward_filter")),
                               dw, rtol=1e-10, atol=1e-10)
