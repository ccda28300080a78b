"""Calls the library must refuse in one line, storing nothing: the faults a review of the
public API found on 2026-11-30 (CPU backend; the GPU's direct path is in
tests/test_torch_bridge.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from algorithms.reference import reference_conv, relative_error
from algorithms.runtime import _byte_span, overlaps
from tests.tuner.test_api import stored_rows
from tuner import (
    ConvProblem,
    convolve,
    convolve_backward_data,
    convolve_backward_filter,
    plan,
    problem_for,
)

ALGORITHMS = ["direct", "im2col_gemm", "implicit_gemm", "fft", "winograd"]


def _operands(rng: np.random.Generator, c: int = 4, k: int = 4) -> tuple[np.ndarray, ...]:
    x = rng.standard_normal((2, c, 9, 9)).astype(np.float32)
    w = rng.standard_normal((k, c, 3, 3)).astype(np.float32)
    return x, w


# Bug: convolve(x, w, out=x) and outs overlapping x or w ran, and direct (which zeroes its
# output first) and im2col_gemm (which writes image by image) returned wrong numbers
# without a word: relative errors of 1.0 to 4.95 against float64.
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_an_out_that_overlaps_x_or_w_is_refused(db_url: str, rng: np.random.Generator,
                                                algorithm: str) -> None:
    x, w = _operands(rng)
    with pytest.raises(ValueError, match=r"^out overlaps x in memory"):
        convolve(x, w, padding=1, device="cpu", algorithm=algorithm, out=x)
    images = np.concatenate([x, x[:1]])  # out one image further along x's own buffer
    with pytest.raises(ValueError, match=r"^out overlaps x"):
        convolve(images[:2], w, padding=1, device="cpu", algorithm=algorithm, out=images[1:])
    x2 = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)  # y has w's shape
    with pytest.raises(ValueError, match=r"^out overlaps w"):
        convolve(x2, w, padding=1, device="cpu", algorithm=algorithm, out=w)
    assert stored_rows(db_url) == 0
    # A kept plan refuses it too, after a good call; an out beside x in one buffer is fine.
    found = plan(problem_for(x.shape, w.shape, padding=1), device="cpu", algorithm=algorithm)
    with pytest.raises(ValueError, match=r"^out overlaps x"):
        found(x, w, out=x)
    both = np.empty((4, 4, 9, 9), np.float32)
    both[:2] = x
    found(both[:2], w, out=both[2:])
    expected = reference_conv(x.astype(np.float64), w.astype(np.float64), found.problem)
    assert relative_error(both[2:], expected) < 1e-5


def test_torch_outs_that_overlap_are_refused(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    x, w = (torch.from_numpy(a) for a in _operands(rng))
    with pytest.raises(ValueError, match=r"^out overlaps x"):
        convolve(x, w, padding=1, device="cpu", algorithm="direct", out=x)
    buffer = torch.empty(w.numel() + x.numel())  # w, then an out that starts inside it
    shared_w = buffer[:w.numel()].view(w.shape)
    shared_w.copy_(w)
    found = plan(problem_for(x.shape, w.shape, padding=1), device="cpu", algorithm="direct")
    with pytest.raises(ValueError, match=r"^out overlaps w"):
        found(x, shared_w, out=buffer[w.numel() - 1:-1].view(x.shape))


@pytest.mark.parametrize("view", [
    lambda a: a, lambda a: a[1:, :, ::2], lambda a: a[::-1, :, :, ::-3], lambda a: a.T,
    lambda a: a[:, :0],
])
def test_byte_spans_agree_with_numpys_bounds(view: Any) -> None:
    from numpy.lib.array_utils import byte_bounds

    array = view(np.zeros((3, 4, 5, 6), np.float32))
    spans = [_byte_span(array)]

    class Device:  # what _byte_span reads of a CuPy array
        data = type("Pointer", (), {"ptr": array.__array_interface__["data"][0]})()
        shape, strides, itemsize, size = array.shape, array.strides, array.itemsize, array.size

    spans.append(_byte_span(Device()))
    if array.size:
        assert spans == [byte_bounds(array)] * 2
    else:
        assert spans[0][0] == spans[0][1]


def test_interleaved_views_share_no_memory() -> None:
    buffer = np.zeros(16, np.float32)
    assert not overlaps(buffer[::2], buffer[1::2])  # NumPy's exact answer, not the bounds
    assert overlaps(buffer[::2], buffer[2:3])


# Bug: a bad out (shape, dtype, layout, not an array) and a backward call's dy that did not
# match its x_shape or w_shape were refused only after the problem was tuned and stored.
@pytest.mark.parametrize(("out", "message"), [
    (np.zeros((2, 6, 9, 8), np.float32), r"out has shape \(2, 6, 9, 8\); this call needs"),
    (np.zeros((2, 6, 9, 9), np.float64), "out is float64; this call needs float32"),
    (np.zeros((2, 6, 9, 9), np.float32, order="F"), "out must be C-contiguous"),
    ([1.0, 2.0], "out must be a NumPy, CuPy or torch array, got list"),
])
def test_a_bad_out_is_refused_before_tuning(db_url: str, rng: np.random.Generator,
                                            out: Any, message: str) -> None:
    x, w = _operands(rng, k=6)
    with pytest.raises(ValueError, match=message):
        convolve(x, w, padding=1, device="cpu", out=out)
    assert stored_rows(db_url) == 0


# Bug: a read-only out passed every check: the problem was tuned and stored, then NumPy
# refused the write inside an algorithm ("output array is read-only"), naming no argument.
def test_a_read_only_out_is_refused_first_and_by_a_plan(db_url: str,
                                                        rng: np.random.Generator) -> None:
    x, w = _operands(rng, k=6)
    out = np.zeros((2, 6, 9, 9), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match=r"^out is read-only; pass a writeable array$"):
        convolve(x, w, padding=1, device="cpu", out=out)
    assert stored_rows(db_url) == 0
    kept = plan(problem_for(x.shape, w.shape, padding=1), device="cpu")
    with pytest.raises(ValueError, match=r"^out is read-only; pass a writeable array$"):
        kept(x, w, out=out)
    assert not out.any()


def test_a_dy_that_does_not_match_the_given_shape_is_refused_before_tuning(
        db_url: str, rng: np.random.Generator) -> None:
    x, w = _operands(rng, k=6)
    dy = rng.standard_normal((2, 6, 9, 9)).astype(np.float32)
    with pytest.raises(ValueError, match=r"^dy has shape \(2, 6, 9, 9\); this call needs "
                                         r"\(3, 6, 9, 9\)$"):
        convolve_backward_data(dy, w, (3, 4, 9, 9), padding=1, device="cpu")
    with pytest.raises(ValueError, match=r"^dy has shape .*; this call needs \(2, 5, 9, 9\)"):
        convolve_backward_filter(x, dy, (5, 4, 3, 3), padding=1, device="cpu")
    assert stored_rows(db_url) == 0


# Bug: a call's kept plan is found by its arguments, and (1.0, 1.0) == (1, 1) and
# True == 1: after one good call, float and bool pairs and a float x_shape ran unchecked.
@pytest.mark.parametrize("bad", [
    {"padding": (1.0, 1.0)}, {"stride": (True, True)}, {"stride": (1, 1.0)},
    {"dilation": (True, 1)},
])
def test_a_kept_call_refuses_what_a_first_call_refuses(rng: np.random.Generator,
                                                       bad: dict[str, Any]) -> None:
    # Mutation gap: the first good call tunes (a write), so its plan is not served again:
    # two rounds never met a kept plan, and call keys without the pair's element types
    # (padding's, dilation's) passed. Three rounds: the last refusal follows a kept call.
    x, w = _operands(rng)
    good: dict[str, Any] = {"padding": (1, 1), "stride": (1, 1), "dilation": (1, 1)}
    for _ in range(3):  # refused first, then again after the good call is kept
        with pytest.raises(ValueError, match="must be an int or an"):
            convolve(x, w, device="cpu", **{**good, **bad})
        convolve(x, w, device="cpu", **good)
    dy = rng.standard_normal((2, 4, 9, 9)).astype(np.float32)
    for _ in range(2):
        with pytest.raises(ValueError, match=r"^x_shape must hold ints, got \(2.0, 4, 9, 9\)"):
            convolve_backward_data(dy, w, (2.0, 4, 9, 9),  # type: ignore[arg-type]
                                   padding=1, device="cpu")
        convolve_backward_data(dy, w, (2, 4, 9, 9), padding=1, device="cpu")


# Bug: these raised TypeError ('NoneType' object is not iterable, unhashable type: 'list'),
# torch's own DLPack error, or named ConvProblem's field ("pad") for convolve's padding.
@pytest.mark.parametrize(("call", "message"), [
    (lambda x, w: convolve_backward_data(x, w, None, device="cpu"),  # type: ignore[arg-type]
     "^x_shape must be a shape"),
    (lambda x, w: convolve_backward_filter(x, x, 5, device="cpu"),  # type: ignore[arg-type]
     "^w_shape must be a shape"),
    (lambda x, w: problem_for(None, w.shape), "^x_shape must be a shape"),  # type: ignore[arg-type]
    (lambda x, w: convolve(x, w, device="cpu", db=["x"]),  # type: ignore[arg-type]
     "^db must be a database URL string, got list$"),
    (lambda x, w: convolve(x, w, padding=-1, device="cpu"),
     "^padding must be non-negative, got -1$"),
    (lambda x, w: plan(problem_for(x.shape, w.shape), device="cpu")(None, w),
     "^x must be an array on cpu, got NoneType$"),
    (lambda x, w: plan(problem_for(x.shape, w.shape), device="cpu")(x.tolist(), w),
     "^x must be an array on cpu, got list$"),
])
def test_bad_arguments_are_named_in_one_line(rng: np.random.Generator, call: Any,
                                             message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(*_operands(rng))


def test_a_tensor_on_another_torch_device_is_named(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    x, w = (torch.empty(a.shape, device="meta") for a in _operands(rng))
    with pytest.raises(ValueError, match=r"^torch tensors on device 'meta' are not supported"):
        convolve(x, w, device="cpu")


# Bug: a call refused by its checks created the default SQLite database (and its schema).
def test_a_refused_call_creates_no_database(tmp_path: Path, rng: np.random.Generator,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    where = tmp_path / "fresh" / "convtune.db"
    monkeypatch.setenv("CONVTUNE_DB_URL", f"sqlite:///{where}")
    x, w = _operands(rng)
    with pytest.raises(ValueError, match="dtype 'int32'"):
        convolve(x.astype(np.int32), w.astype(np.int32), device="cpu")
    with pytest.raises(ValueError, match="overlaps"):
        convolve(x, w, padding=1, device="cpu", out=x)
    assert not where.exists() and not where.parent.exists()
    convolve(x, w, padding=1, device="cpu")
    assert where.exists()


# Bug: a problem within ConvProblem's limits but too large for memory ended in NumPy's
# MemoryError traceback from the tuner's random operands (or the float64 reference).
def test_a_problem_too_large_for_memory_is_a_one_line_error(tmp_path: Path) -> None:
    script = f"""
import os, resource
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # nothing huge can be allocated
os.environ["CONVTUNE_DB_URL"] = "sqlite:///{tmp_path / 'store.db'}"
from tuner import ConvProblem, find_best_algorithm
try:
    find_best_algorithm(ConvProblem(n=4096, c=1024, h=64, w=64, k=64, r=3, s=3, pad=1),
                        device="cpu")
except ValueError as exc:
    print(type(exc).__name__, exc)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ValueError n4096 c1024 64x64 -> k64 3x3 p1 s1 float32 does "
                                  "not fit in this machine's memory for tuning: "), done.stdout
    assert done.stdout.count("\n") == 1
    assert ConvProblem(n=4096, c=1024, h=64, w=64, k=64, r=3, s=3).n == 4096  # a valid problem


# Bug: torch tensors were told apart by their class's module, so a user's subclass of
# torch.Tensor (torchvision's tv_tensors, say) was taken for NumPy: convolve returned a NumPy
# array and the torch module failed on it.
def test_a_subclass_of_torch_tensor_is_a_torch_tensor(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")

    class Image(torch.Tensor):  # type: ignore[name-defined,misc]
        pass

    x, w = (torch.from_numpy(a) for a in _operands(rng))
    y = convolve(x.as_subclass(Image), w, padding=1, device="cpu")
    assert isinstance(y, torch.Tensor)
    expected = reference_conv(x.double().numpy(), w.double().numpy(),
                              problem_for(x.shape, w.shape, padding=1))
    assert relative_error(y.numpy(), expected) < 1e-5
