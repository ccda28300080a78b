"""The PyTorch module's gradients where autograd is used beyond one backward pass: the
faults a review of the backward pass found on 2026-11-30 (CPU; float64 where numbers are
compared, nn.Conv2d or torch.nn.grad the oracle)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from tuner import torch_ops  # noqa: E402
from tuner.nn import convert  # noqa: E402


def _twins(db_url: str, dtype: Any = torch.float64, **kwargs: Any) -> tuple[Any, Any]:
    """nn.Conv2d and a converted copy of it with the same parameters."""
    args = dict(in_channels=2, out_channels=3, kernel_size=3, padding=1) | kwargs
    reference = nn.Conv2d(**args).to(dtype)
    return reference, convert(copy.deepcopy(reference), db=db_url)


# Bug: under torch.autocast a float64 model was cast to bfloat16 (autocast leaves float64
# operands alone): its output came back bfloat16 and its weight gradient off by 6e-2.
def test_autocast_leaves_a_float64_model_exact(db_url: str) -> None:
    reference, ours = _twins(db_url)
    x = torch.randn(2, 2, 7, 7, dtype=torch.float64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, y_ref = ours(x), reference(x)
    assert y.dtype == y_ref.dtype == torch.float64
    torch.testing.assert_close(y, y_ref, rtol=1e-9, atol=1e-9)
    y.sum().backward()
    y_ref.sum().backward()
    torch.testing.assert_close(ours.weight.grad, reference.weight.grad, rtol=1e-9, atol=1e-9)


# Bug: batched output gradients (is_grads_batched, which jacobian(vectorize=True) uses) ran
# our backward on vmap's storage-less tensors: "Batching rule not implemented for
# aten::detach".
def test_batched_output_gradients_match_nn_conv2d(db_url: str) -> None:
    reference, ours = _twins(db_url)
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    cotangents = torch.randn(4, 1, 3, 5, 5, dtype=torch.float64)
    (got,) = torch.autograd.grad(ours(x), x, cotangents, is_grads_batched=True)
    (expected,) = torch.autograd.grad(reference(x), x, cotangents, is_grads_batched=True)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
    jacobian = torch.autograd.functional.jacobian(ours, x, vectorize=True)
    torch.testing.assert_close(
        jacobian, torch.autograd.functional.jacobian(reference, x), rtol=1e-9, atol=1e-9)


# Bug: second derivatives through the custom operator (traced, compiled or subclass
# inputs) failed: its autograd formula called the backward operators, which have none
# ("no autograd formula was registered for convtune.conv2d_backward_data").
def test_second_derivatives_through_the_operator(db_url: str) -> None:
    reference, ours = _twins(db_url, stride=2)
    x = torch.randn(2, 2, 7, 7, dtype=torch.float64)
    penalties = []
    for conv in (ours, reference):
        traced = torch.jit.trace(conv, x)
        xx = x.clone().requires_grad_()
        (dx,) = torch.autograd.grad(traced(xx).square().sum(), xx, create_graph=True)
        penalties.append(torch.autograd.grad(dx.square().sum(), [conv.weight, xx]))
    for got, expected in zip(*penalties, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


# Bug: where no backward algorithm of ours serves (bfloat16 with workspace_limit=0 on the
# CPU), a compiled model's backward raised NoUsableAlgorithm: the fallback to PyTorch's
# gradients was in the formula the compiler traces, not in the operators its graph calls.
def test_a_compiled_backward_that_no_algorithm_serves_falls_back(db_url: str) -> None:
    reference = nn.Conv2d(2, 3, 3, padding=1).to(torch.bfloat16)
    ours = convert(copy.deepcopy(reference), workspace_limit=0, db=db_url)
    compiled = torch.compile(ours, backend="aot_eager", fullgraph=True)
    x = torch.randn(2, 2, 6, 6, dtype=torch.bfloat16, requires_grad=True)
    compiled(x).float().sum().backward()
    expected = torch.nn.grad.conv2d_weight(x.double(), ours.weight.shape,
                                           torch.ones(2, 3, 6, 6, dtype=torch.float64),
                                           padding=1)
    torch.testing.assert_close(ours.weight.grad.double(), expected, rtol=2e-2, atol=2e-1)


def _count_backward_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the backward algorithms the operators call from now on, in order."""
    calls: list[str] = []
    for name in ("convolve_backward_data", "convolve_backward_filter"):
        real = getattr(torch_ops, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(torch_ops, name, counted)
    return calls


def test_a_compiled_backward_still_runs_our_backward_algorithms(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fallbacks above must not send a compiled model's ordinary backward to PyTorch.
    calls = _count_backward_calls(monkeypatch)
    reference, ours = _twins(db_url)
    compiled = torch.compile(ours, backend="aot_eager", fullgraph=True)
    x = torch.randn(2, 2, 6, 6, dtype=torch.float64, requires_grad=True)
    compiled(x).sum().backward()
    assert sorted(set(calls)) == ["convolve_backward_data", "convolve_backward_filter"]
    x_ref = x.detach().clone().requires_grad_()
    reference(x_ref).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-9, atol=1e-9)


# Mutation gap: a frozen weight (fine-tuning) still needs the input's gradient, and only
# the gradients asked for are computed: a frozen weight's filter gradient, or a first
# layer's input gradient, is a whole backward algorithm's run for nothing.
def test_only_the_gradients_needed_are_computed(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_backward_calls(monkeypatch)
    reference, ours = _twins(db_url, stride=2)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2, 2, 7, 7, dtype=torch.float64, generator=g)
    grad = torch.randn(2, 3, 4, 4, dtype=torch.float64, generator=g)
    ours.weight.requires_grad_(False)
    xx = x.clone().requires_grad_()
    (dx,) = torch.autograd.grad(ours(xx), xx, grad)
    (expected,) = torch.autograd.grad(reference(xx), xx, grad)
    torch.testing.assert_close(dx, expected, rtol=1e-9, atol=1e-9)
    assert calls == ["convolve_backward_data"]
    ours.weight.requires_grad_(True)
    calls.clear()
    ours(x).backward(grad)
    reference(x).backward(grad)
    torch.testing.assert_close(ours.weight.grad, reference.weight.grad, rtol=1e-9, atol=1e-9)
    assert calls == ["convolve_backward_filter"]


# Mutation gap: PyTorch's differentiable gradient functions (create_graph=True) must keep
# dilation and groups, which the second-derivative tests above leave at 1.
def test_second_derivatives_keep_dilation_and_groups(db_url: str) -> None:
    reference, ours = _twins(db_url, in_channels=4, out_channels=6, padding=2, dilation=2,
                             groups=2, stride=2)
    x = torch.randn(2, 4, 9, 9, dtype=torch.float64, requires_grad=True,
                    generator=torch.Generator().manual_seed(5))
    penalties = []
    for conv in (ours, reference):
        dx, dw = torch.autograd.grad(conv(x).square().sum(), (x, conv.weight),
                                     create_graph=True)
        penalties.append(torch.autograd.grad(dx.square().sum() + dw.square().sum(),
                                             [conv.weight, x]))
    for got, expected in zip(*penalties, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


# Mutation gap: torch.func.vmap over the backward of a graph recorded outside it (per-sample
# cotangents) must reach PyTorch's gradient functions: ours cannot be batched by vmap.
def test_vmap_over_a_recorded_backward_matches_nn_conv2d(db_url: str) -> None:
    from torch.func import vmap

    reference, ours = _twins(db_url)
    g = torch.Generator().manual_seed(9)
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64, generator=g, requires_grad=True)
    cotangents = torch.randn(3, 1, 3, 5, 5, dtype=torch.float64, generator=g)
    results = []
    for conv in (ours, reference):
        y = conv(x)
        results.append(vmap(lambda v, y=y, conv=conv: torch.autograd.grad(
            y, (x, conv.weight), v, retain_graph=True))(cotangents))
    for got, expected in zip(*results, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
