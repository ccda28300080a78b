"""The GEMM survey's shape mapping (benchmarks/bench_gemm_algos.py), on the host, no GPU."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.problem import ConvProblem
from algorithms.reference import reference
from benchmarks.bench_gemm_algos import column_major_gemm, parse_args, pointwise_gemm


@pytest.mark.parametrize("n, c, h, w, k", [(3, 5, 4, 6, 7), (1, 8, 1, 1, 2), (2, 16, 7, 7, 4)])
def test_the_gemm_is_the_layer(n: int, c: int, h: int, w: int, k: int) -> None:
    # The survey times cuBLAS on this mapping: column-major, one GEMM per image, the
    # filter shared (batch stride 0). Read back as NCHW, it must be the convolution.
    problem = ConvProblem(n=n, c=c, h=h, w=w, k=k, r=1, s=1, dtype="float64")
    rng = np.random.default_rng()
    x = rng.standard_normal(problem.input_shape)
    f = rng.standard_normal(problem.filter_shape)
    got = column_major_gemm(pointwise_gemm(problem), x.reshape(-1), f.reshape(-1))
    np.testing.assert_allclose(got.reshape(problem.output_shape), reference(x, f, problem),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("geometry", [dict(r=3, s=3, pad=1), dict(r=1, s=1, stride=2),
                                      dict(r=1, s=1, groups=2)])
def test_other_layers_are_refused(geometry: dict[str, int]) -> None:
    problem = ConvProblem(n=1, c=4, h=6, w=6, k=4, **geometry)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a dense stride-1 1x1 layer"):
        pointwise_gemm(problem)


def test_options() -> None:
    args = parse_args(["--layers", "res4.1x1a.rest", "--algos", "4", "--dtype", "float16"])
    assert (args.layers, args.algos, args.dtype, args.math) == ("res4.1x1a.rest", 4,
                                                               "float16", "fp32")
    assert parse_args([]).math == "tf32"
