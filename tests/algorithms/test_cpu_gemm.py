"""The CPU algorithms' GEMMs on torch's threads for torch tensors (algorithms/cpu/gemm.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from algorithms.cpu import gemm
from algorithms.cpu.runtime import CpuRuntime
from algorithms.problem import ConvProblem
from algorithms.reference import reference, relative_error, tolerance
from algorithms.registry import get_algorithm

torch = pytest.importorskip("torch", reason="torch is not installed: the routing serves it")
#: gemm's own floor, before route_small_products lowers it.
SIZE_FLOOR = gemm.ROUTE_FROM_MNK

#: Every CPU algorithm with a GEMM, a direction it runs and a problem it takes.
CASES: list[tuple[str, str, str, dict[str, Any]]] = [
    ("im2col_gemm", "default", "forward", dict(n=2, c=5, h=7, w=6, k=4, r=3, s=3, pad=1)),
    ("im2col_gemm", "default", "backward_data", dict(n=2, c=5, h=7, w=6, k=4, r=3, s=3, pad=1)),
    ("im2col_gemm", "default", "backward_filter",
     dict(n=2, c=5, h=7, w=6, k=4, r=3, s=3, pad=1)),
    ("im2col_gemm", "default", "forward", dict(n=3, c=8, h=4, w=5, k=6, r=1, s=1)),
    ("direct", "default", "forward", dict(n=2, c=4, h=8, w=8, k=6, r=3, s=3, pad=1, stride=2)),
    ("implicit_gemm", "bn1024_bk64", "forward", dict(n=2, c=6, h=9, w=7, k=5, r=3, s=3, pad=1)),
    ("winograd", "f2x2", "forward", dict(n=2, c=4, h=8, w=8, k=3, r=3, s=3, pad=1)),
    ("winograd", "f4x4", "forward", dict(n=2, c=4, h=9, w=7, k=3, r=3, s=3, pad=1)),
    ("fft", "default", "forward", dict(n=1, c=3, h=9, w=9, k=4, r=5, s=5, pad=2)),
]


@pytest.fixture(autouse=True)
def route_small_products(monkeypatch: pytest.MonkeyPatch) -> None:
    """Route these tests' small products too: they check the routing, not its size floor
    (test_products_too_small_to_thread_stay_with_numpy checks that)."""
    monkeypatch.setattr(gemm, "ROUTE_FROM_MNK", 1)


@pytest.fixture
def torch_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, ...]]]:
    """The shapes of the first operand of every torch.matmul call made meanwhile."""
    calls: list[tuple[int, ...]] = []
    real = torch.matmul

    def spy(a: Any, b: Any, **kw: Any) -> Any:
        calls.append(tuple(a.shape))
        return real(a, b, **kw)

    monkeypatch.setattr(torch, "matmul", spy)
    yield calls


def _run(name: str, config: str, problem: ConvProblem,
         wrap: Callable[[np.ndarray], Any]) -> tuple[np.ndarray, np.ndarray]:
    """(result, float64 reference) of `name` on fresh random operands, run inside the CPU
    runtime's caller_stream of `wrap(first operand)`, as a plan runs it."""
    rng = np.random.default_rng()
    runtime = CpuRuntime()
    a_shape, b_shape, out_shape = problem.operand_shapes
    a = rng.standard_normal(a_shape).astype(problem.dtype)
    b = rng.standard_normal(b_shape).astype(problem.dtype)
    out = np.full(out_shape, np.nan, dtype=problem.dtype)
    algorithm = get_algorithm("cpu", name)
    workspace = runtime.workspace(algorithm.workspace_bytes(problem, config))
    with runtime.caller_stream(wrap(a)):
        algorithm.run(a, b, out, workspace, problem, config)
    return out, reference(a, b, problem)


@pytest.mark.parametrize("name,config,direction,shape", CASES)
def test_torch_tensors_run_their_gemms_on_torch_threads(
    name: str, config: str, direction: str, shape: dict[str, Any],
    torch_calls: list[tuple[int, ...]],
) -> None:
    # Bug pinned: a converted ResNet-50 on the CPU ran its forward pass 5.2x slower than
    # with the GEMMs on torch's threads (bench_torch_threads.py, AMD EPYC, 2 cores,
    # 2026-11-27): they ran in NumPy's BLAS, whose threads fought torch's spinning OpenMP
    # threads for the cores. Work for torch tensors now runs its GEMMs through torch.matmul.
    problem = ConvProblem(**shape, direction=direction)
    out, ref = _run(name, config, problem, torch.from_numpy)
    assert torch_calls, f"{name} ran no GEMM through torch"
    assert relative_error(out, ref) <= tolerance(problem.dtype, name, problem.math)


@pytest.mark.parametrize("name,config,direction,shape", CASES[:1] + CASES[4:5])
def test_numpy_arrays_keep_numpys_blas(
    name: str, config: str, direction: str, shape: dict[str, Any],
    torch_calls: list[tuple[int, ...]],
) -> None:
    problem = ConvProblem(**shape, direction=direction)
    out, ref = _run(name, config, problem, lambda a: a)
    assert not torch_calls
    assert relative_error(out, ref) <= tolerance(problem.dtype, name, problem.math)


def test_the_switch_and_a_lower_matmul_precision_keep_numpys_blas(
    monkeypatch: pytest.MonkeyPatch, torch_calls: list[tuple[int, ...]]
) -> None:
    problem = ConvProblem(**CASES[0][3])
    monkeypatch.setenv("CONVTUNE_CPU_TORCH_GEMM", "0")
    _run("im2col_gemm", "default", problem, torch.from_numpy)
    assert not torch_calls
    monkeypatch.delenv("CONVTUNE_CPU_TORCH_GEMM")
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")  # may mean bfloat16 GEMMs: not FP32
    try:
        out, ref = _run("im2col_gemm", "default", problem, torch.from_numpy)
    finally:
        torch.set_float32_matmul_precision(before)
    assert not torch_calls
    assert relative_error(out, ref) <= tolerance(problem.dtype, "im2col_gemm", problem.math)


def _operands(kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Operands torch cannot take as they are, of each `kind`."""
    rng = np.random.default_rng()
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((2, 4, 5)).astype(np.float32)
    if kind == "negative_strides":
        return a[:, ::-1], b, np.empty((2, 3, 5), np.float32)
    if kind == "read_only":
        a.flags.writeable = False
        return a, b, None
    if kind == "mixed_dtypes":
        return a.astype(np.float64), b, None
    if kind == "byte_swapped":
        return a.astype(">f4"), b.astype(">f4"), None
    if kind == "strided_out":
        return a, b, np.empty((2, 5, 3), np.float32).transpose(0, 2, 1)
    return a.astype(np.float16), b.astype(np.float16), None  # float16: not routed


@pytest.mark.parametrize("kind", ["negative_strides", "read_only", "mixed_dtypes",
                                  "byte_swapped", "strided_out", "float16"])
def test_what_torch_cannot_take_stays_with_numpy(
    kind: str, torch_calls: list[tuple[int, ...]]
) -> None:
    a, b, out = _operands(kind)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    with gemm.torch_gemms(torch):
        got = gemm.matmul(a, b, out)
    assert not torch_calls
    assert got is out or out is None
    np.testing.assert_allclose(got, expected, rtol=1e-2 if kind == "float16" else 1e-5,
                               atol=1e-2 if kind == "float16" else 1e-5)


def test_a_routed_gemm_broadcasts_and_writes_out_as_numpy_does(
    torch_calls: list[tuple[int, ...]]
) -> None:
    rng = np.random.default_rng()
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((2, 4, 5)).astype(np.float32)[:, :, ::2]  # strided, positive
    out = np.empty((2, 3, 3), np.float32)
    with gemm.torch_gemms(torch):
        assert gemm.matmul(a, b, out) is out
        fresh = gemm.matmul(a, b)
    assert len(torch_calls) == 2 and gemm.routed() is None
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fresh, expected, rtol=1e-5, atol=1e-5)


# Regression: every product inside torch_gemms went to torch.matmul, whose call costs more
# than a product OpenBLAS computes on the calling thread alone (a tiny layer's plan call
# 47 us against 34 on this CPU).
def test_products_too_small_to_thread_stay_with_numpy(
    monkeypatch: pytest.MonkeyPatch, torch_calls: list[tuple[int, ...]]
) -> None:
    monkeypatch.setattr(gemm, "ROUTE_FROM_MNK", SIZE_FLOOR)
    rng = np.random.default_rng()
    small = (rng.standard_normal((64, 64)).astype(np.float32),
             rng.standard_normal((64, 64)).astype(np.float32))  # 64**3 multiply-adds
    large = (rng.standard_normal((3, 64, 80)).astype(np.float32),
             rng.standard_normal((80, 64)).astype(np.float32))  # 64 * 80 * 64 per product
    assert 64**3 < gemm.ROUTE_FROM_MNK <= 64 * 80 * 64
    with gemm.torch_gemms(torch):
        for a, b in (small, large):
            np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b,
                                       rtol=1e-4, atol=1e-4)
    assert torch_calls == [(3, 64, 80)]
