"""The in-process call path of issue 9: what a call is checked for, first and when kept
(operands' places, dtypes and groups, `check_finite`, the caller's `out`, the device).

Each test pins a gap that a mutation review of tuner/calls.py and tuner/plans.py found
(2026-12: a mutant of the code that the suite before these tests let pass); its first
comment names the gap."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.tuner.test_api import stored_rows
from tests.tuner.test_call_plans import _close, _Foreign, _operands
from tuner import (
    convolve,
    problem_for,
    run_convolution,
)

torch = pytest.importorskip("torch")


class _DlpackArray:
    """Stands in for a GPU array: only its DLPack device is looked at."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.index)  # kDLCUDA


class _InterfaceArray:
    """Stands in for a GPU array known by `__cuda_array_interface__` alone (Numba's, say),
    whose interface refuses to be read here; its device says `id` (CuPy) or `index`."""

    def __init__(self, **device: int) -> None:
        self.device = type("Device", (), device)()

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        raise RuntimeError("not readable on this machine")


# Mutation gap: `_where` reading the device of an array known only by
# __cuda_array_interface__ as cuda:0 whatever its `id` or `index` said.
def test_the_place_of_a_cuda_interface_array_is_its_device(rng: np.random.Generator) -> None:
    for far in (_InterfaceArray(id=1), _InterfaceArray(index=1)):
        with pytest.raises(ValueError, match=r"^x is on cuda:1 but w is on cuda:0$"):
            convolve(far, _DlpackArray(0), device="cpu")


# Mutation gap: `_where` naming a torch CUDA tensor's place cuda:0 whatever its index.
def test_the_place_of_a_torch_cuda_tensor_is_its_index(rng: np.random.Generator) -> None:
    def on(index: int) -> type:
        class Placed(torch.Tensor):  # type: ignore[misc,name-defined]
            @property
            def device(self) -> Any:  # what a CUDA tensor says, without a GPU here
                return torch.device("cuda", index)
        return Placed

    x, w = (torch.from_numpy(a) for a in _operands(rng))
    with pytest.raises(ValueError, match=r"^x is on cuda:1 but w is on cuda:0$"):
        convolve(x.as_subclass(on(1)), w.as_subclass(on(0)))


# Mutation gap: `_where` taking something that is no array at all (a list) for a GPU array:
# the call must name its dtype, not a place it does not have.
def test_a_list_operand_is_named_by_its_type(db_url: str, rng: np.random.Generator) -> None:
    x, w = _operands(rng)
    with pytest.raises(ValueError, match=r"^x has dtype 'list'; expected one of"):
        convolve(x.tolist(), w, device="cpu")
    assert stored_rows(db_url) == 0


# Mutation gap: groups=0 let through the groups check, refused later as a channel
# mismatch that names no argument of the caller's.
def test_groups_zero_is_named(db_url: str, rng: np.random.Generator) -> None:
    x, w = _operands(rng)
    with pytest.raises(ValueError, match=r"^groups must be a positive int, got 0$"):
        convolve(x, w, groups=0, device="cpu")
    assert stored_rows(db_url) == 0


# Mutation gap: the remembered problems (calls._problem) kept without groups' type:
# groups=True equals 1, so after a call with groups=1 it found that problem unchecked.
def test_a_bool_groups_is_refused_after_a_call_with_groups_one(
    rng: np.random.Generator
) -> None:
    x, w = _operands(rng)
    problem = problem_for(x.shape, w.shape, padding=1)
    _close(convolve(x, w, padding=1, groups=1, device="cpu", algorithm="direct"), x, w,
           problem)
    for _ in range(2):
        with pytest.raises(ValueError, match=r"^groups must be a positive int, got True$"):
            convolve(x, w, padding=1, groups=True, device="cpu", algorithm="direct")


# Mutation gap: check_finite on torch tensors asked whether any element was finite, so one
# NaN or infinity among finite ones went through.
def test_check_finite_refuses_one_non_finite_element_of_a_tensor(
    db_url: str, rng: np.random.Generator
) -> None:
    x, w = _operands(rng)
    xt, wt = torch.from_numpy(x.copy()), torch.from_numpy(w.copy())
    xt[1, 2, 3, 4] = float("nan")
    with pytest.raises(ValueError, match=r"^x contains NaN or infinity \(check_finite=True\)$"):
        convolve(xt, wt, padding=1, device="cpu", db=db_url, check_finite=True)
    assert stored_rows(db_url) == 0
    xt[1, 2, 3, 4] = 0.5
    wt[4, 3, 2, 1] = float("-inf")
    with pytest.raises(ValueError, match=r"^w contains NaN or infinity"):
        convolve(xt, wt, padding=1, device="cpu", db=db_url, check_finite=True)
    x[1, 2, 3, 4] = 0.5
    _close(convolve(xt, torch.from_numpy(w), padding=1, device="cpu", db=db_url,
                    check_finite=True), x, w, problem_for(x.shape, w.shape, padding=1))


# Mutation gap: a kept call skipped check_finite (only a call that planned checked it): the
# suite's non-finite calls all followed a tuning, whose plan is not served again.
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_kept_call_still_refuses_non_finite_input_when_asked(
    db_url: str, rng: np.random.Generator, kind: str
) -> None:
    x, w = _operands(rng)
    problem = problem_for(x.shape, w.shape, padding=1)
    wrap: Any = torch.from_numpy if kind == "torch" else np.asarray
    named: dict[str, Any] = {"padding": 1, "device": "cpu", "db": db_url, "algorithm": "direct"}
    for _ in range(2):  # named: nothing tuned, kept from the first call
        _close(convolve(wrap(x), wrap(w), check_finite=True, **named), x, w, problem, "direct")
    bad = x.copy()
    bad[0, 1, 2, 3] = np.inf
    with pytest.raises(ValueError, match=r"^x contains NaN or infinity \(check_finite=True\)$"):
        convolve(wrap(bad), wrap(w), check_finite=True, **named)
    bad = w.copy()
    bad[1, 2, 0, 1] = np.nan
    with pytest.raises(ValueError, match=r"^w contains NaN or infinity"):
        convolve(wrap(x), wrap(bad), check_finite=True, **named)


# Mutation gap: a call's checks took a strided torch `out` without a word: the problem was
# tuned and stored, and only the plan then refused it.
def test_a_strided_torch_out_is_refused_before_tuning(
    db_url: str, rng: np.random.Generator
) -> None:
    x, w = _operands(rng)
    n, k, h, wd = problem_for(x.shape, w.shape, padding=1).output_shape
    out = torch.empty(n, k, wd, h).transpose(2, 3)  # the right shape, not C-contiguous
    with pytest.raises(ValueError, match=r"^out must be C-contiguous$"):
        convolve(torch.from_numpy(x), torch.from_numpy(w), padding=1, device="cpu",
                 db=db_url, out=out)
    assert stored_rows(db_url) == 0


# Mutation gap: an `out` that has a dtype and shape but is neither NumPy, CuPy nor torch
# passed the first check and ended in an AttributeError (its missing flags).
def test_an_out_of_another_library_is_named(db_url: str, rng: np.random.Generator) -> None:
    x, w = _operands(rng)
    out = _Foreign(np.empty(problem_for(x.shape, w.shape, padding=1).output_shape,
                            np.float32))
    with pytest.raises(ValueError, match=r"^out must be a NumPy, CuPy or torch array, got "
                                         r"_Foreign$"):
        convolve(x, w, padding=1, device="cpu", db=db_url, out=out)
    assert stored_rows(db_url) == 0


# Mutation gap: a call without `device` took the machine's default device (the first GPU)
# instead of where its operands live: on a machine with a GPU, NumPy operands were refused.
def test_a_call_without_device_runs_where_its_operands_live(
    db_url: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner import devices

    monkeypatch.setattr(devices, "default_device", lambda: "cuda:0")  # a GPU machine
    x, w = _operands(rng)
    ran = run_convolution(x, w, padding=1, db=db_url, algorithm="direct")
    assert ran.device == "cpu"
    _close(ran.y, x, w, ran.problem, "direct")


class _GpuOut(_Foreign):
    """A CuPy-like `out` (it has flags) on a GPU."""

    flags = type("Flags", (), {"c_contiguous": True, "writeable": True})()


# Mutation gap: a call's checks took an `out` on another device than its operands' and
# failed later on what the out could not give (no one-line error naming its place).
def test_an_out_on_another_device_is_named(db_url: str, rng: np.random.Generator) -> None:
    x, w = _operands(rng)
    shape = problem_for(x.shape, w.shape, padding=1).output_shape
    with pytest.raises(ValueError, match=r"^out is on cuda:0 but x is on cpu$"):
        convolve(x, w, padding=1, device="cpu", db=db_url,
                 out=_GpuOut(np.empty(shape, np.float32), 0))
    assert stored_rows(db_url) == 0
