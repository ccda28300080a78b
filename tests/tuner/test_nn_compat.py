"""What nn.Conv2d does and the PyTorch module must do too: the faults a review of tuner.nn
found on 2026-11-30 (CPU; float64 where numbers are compared, nn.Conv2d the oracle)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from tuner.nn import Conv2d, convert  # noqa: E402


def _twins(db_url: str, dtype: Any = None, **kwargs: Any) -> tuple[Any, Any]:
    """nn.Conv2d and a converted copy of it with the same parameters."""
    args = dict(in_channels=4, out_channels=6, kernel_size=3) | kwargs
    reference = nn.Conv2d(**args).to(dtype or torch.float64)
    return reference, convert(copy.deepcopy(reference), db=db_url)


# Bug: an empty batch raised "n must be positive"; nn.Conv2d returns an empty output.
def test_an_empty_batch_gives_an_empty_output(db_url: str) -> None:
    reference, ours = _twins(db_url, padding=1)
    x = torch.randn(0, 4, 9, 9, dtype=torch.float64, requires_grad=True)
    y = ours(x)
    assert y.shape == reference(x).shape == (0, 6, 9, 9)
    y.sum().backward()
    assert ours.weight.grad is not None and not ours.weight.grad.any()


# Bug: under torch.autocast the module ran in float32 (autocast runs F.conv2d in bfloat16
# on the CPU), and a bfloat16 activation met a float32 weight: "x is bfloat16 but w is
# float32", so a model that ran under autocast broke once converted.
def test_autocast_runs_in_its_lower_precision(db_url: str) -> None:
    reference, ours = _twins(db_url, torch.float32, padding=1)
    x = torch.randn(2, 4, 9, 9)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, y_ref = ours(x), reference(x)
        from_bf16 = ours(x.to(torch.bfloat16))
    assert y.dtype == y_ref.dtype == from_bf16.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), y_ref.float(), rtol=2e-2, atol=2e-2)


# Bug: the eager autograd.Function was once_differentiable: a gradient penalty's second
# derivative was refused for the input and silently missing for the weight ("not used in
# the graph").
def test_second_derivatives_match_nn_conv2d(db_url: str) -> None:
    reference, ours = _twins(db_url, padding=1, stride=2)
    x = torch.randn(2, 4, 9, 9, dtype=torch.float64, requires_grad=True)
    penalties = []
    for conv in (ours, reference):
        (dx,) = torch.autograd.grad(conv(x).square().sum(), x, create_graph=True)
        penalty = dx.square().sum()
        penalties.append(torch.autograd.grad(penalty, [conv.weight, x]))
    for got, expected in zip(*penalties, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


# Bug: convert() swapped subclasses of nn.Conv2d, whose forward is their own (weight
# standardisation here: results changed), and rebuilt modules from their parameters, which
# failed on a weight a hook computes (weight_norm, pruning) and dropped hooks and buffers.
def test_convert_leaves_subclasses_and_keeps_hooks_and_buffers(db_url: str) -> None:
    class Standardized(nn.Conv2d):  # type: ignore[name-defined,misc]
        def forward(self, x: Any) -> Any:
            w = (self.weight - self.weight.mean()) / self.weight.std()
            return self._conv_forward(x, w, self.bias)

    own = Standardized(4, 6, 3).double()
    lazy = nn.LazyConv2d(6, 3)
    assert convert(own, db=db_url) is own and type(own) is Standardized
    assert type(convert(nn.Sequential(lazy), db=db_url)[0]) is nn.LazyConv2d
    plain = nn.Conv2d(4, 6, 3).double()
    plain.register_buffer("scale", torch.tensor(2.0, dtype=torch.float64))
    calls: list[int] = []
    plain.register_forward_hook(lambda module, args, out: calls.append(1))
    state = {k: v.clone() for k, v in plain.state_dict().items()}
    reference = copy.deepcopy(plain)
    model = nn.Sequential(plain)
    assert convert(model, db=db_url)[0] is plain and isinstance(plain, Conv2d)
    x = torch.randn(2, 4, 9, 9, dtype=torch.float64)
    torch.testing.assert_close(model(x), reference(x), rtol=1e-9, atol=1e-9)
    assert calls == [1, 1]  # the hook ran for both: it came along
    assert plain.state_dict().keys() == state.keys()


def test_convert_keeps_hook_computed_weights(db_url: str) -> None:
    with pytest.warns(FutureWarning):  # the hook-based weight_norm, deprecated but in use
        normed = torch.nn.utils.weight_norm(nn.Conv2d(4, 6, 3).double())
    from torch.nn.utils import prune

    pruned = nn.Conv2d(4, 6, 3).double()
    prune.l1_unstructured(pruned, "weight", amount=0.5)
    x = torch.randn(2, 4, 9, 9, dtype=torch.float64)
    for conv in (normed, pruned):
        expected = conv(x)
        assert isinstance(convert(nn.Sequential(conv), db=db_url)[0], Conv2d)
        torch.testing.assert_close(conv(x), expected, rtol=1e-9, atol=1e-9)


# Bug: the workspace limit was never checked: -5 ran as "no limit" when training and
# raised under no_grad; "64MB" raised a raw TypeError when training.
@pytest.mark.parametrize("limit", [-5, "64MB", 1.5])
def test_a_bad_workspace_limit_is_refused_at_construction(db_url: str, limit: Any) -> None:
    with pytest.raises(ValueError, match=r"^workspace_limit must be"):
        Conv2d(4, 6, 3, workspace_limit=limit, db=db_url)
    with pytest.raises(ValueError, match=r"^workspace_limit must be"):
        convert(nn.Conv2d(4, 6, 3), workspace_limit=limit, db=db_url)
    with pytest.raises(ValueError, match=r"^convert takes a torch.nn.Module, got NoneType$"):
        convert(None)  # type: ignore[type-var]


# Bug: torch.func's per-sample gradients (vmap over grad of functional_call) and forward-
# mode AD (jvp) failed on the module, and torch.autograd.forward_ad's tangents were dropped
# without a word; nn.Conv2d supports all three.
def test_torch_func_transforms_work(db_url: str) -> None:
    from torch.func import functional_call, grad, jvp, vmap

    reference, ours = _twins(db_url, padding=1)
    x = torch.randn(3, 4, 9, 9, dtype=torch.float64)
    params = {k: v.detach() for k, v in ours.named_parameters()}

    def loss(module: Any, p: dict[str, Any], sample: Any) -> Any:
        return functional_call(module, p, (sample.unsqueeze(0),)).square().sum()

    got = vmap(grad(lambda p, s: loss(ours, p, s)), in_dims=(None, 0))(params, x)
    expected = vmap(grad(lambda p, s: loss(reference, p, s)), in_dims=(None, 0))(params, x)
    for name in params:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-9, atol=1e-9)
    tangent = torch.randn_like(x)
    torch.testing.assert_close(jvp(ours, (x,), (tangent,)), jvp(reference, (x,), (tangent,)),
                               rtol=1e-9, atol=1e-9)
    import torch.autograd.forward_ad as fwad

    with fwad.dual_level():  # forward-mode AD without torch.func: the tangent was dropped
        got_dual, expected_dual = (fwad.unpack_dual(conv(fwad.make_dual(x, tangent)))
                                   for conv in (ours, reference))
    torch.testing.assert_close(got_dual.tangent, expected_dual.tangent, rtol=1e-9, atol=1e-9)


# Bug: the output was NCHW whatever the input's memory format; nn.Conv2d answers a
# channels_last input in channels_last.
def test_channels_last_in_channels_last_out(db_url: str) -> None:
    reference, ours = _twins(db_url, padding=1)
    x = torch.randn(2, 4, 9, 9, dtype=torch.float64).to(memory_format=torch.channels_last)
    y = ours(x)
    assert y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y, reference(x), rtol=1e-9, atol=1e-9)


# Bug: one-element tuples (padding=(1,)), which nn.Conv2d keeps and F.conv2d repeats, were
# refused as "padding must be an int or an (h, w) pair".
def test_one_element_tuples_stand_for_pairs(db_url: str) -> None:
    args: dict[str, Any] = dict(padding=(1,), stride=(2,), dilation=(2,))
    reference = nn.Conv2d(4, 6, 3, **args).double()
    ours = Conv2d(4, 6, 3, db=db_url, **args).double()
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(2, 4, 11, 11, dtype=torch.float64)
    torch.testing.assert_close(ours(x), reference(x), rtol=1e-9, atol=1e-9)


# Bug: float16 with workspace_limit=0 on the CPU raised NoUsableAlgorithm in the forward,
# where the backward falls back to PyTorch's gradients for the same problem.
def test_a_problem_no_algorithm_of_ours_serves_falls_back_to_pytorch(db_url: str) -> None:
    reference = nn.Conv2d(4, 6, 3, padding=1).to(torch.bfloat16)
    ours = convert(copy.deepcopy(reference), workspace_limit=0, db=db_url)
    reference = copy.deepcopy(reference)
    x = torch.randn(2, 4, 9, 9, dtype=torch.bfloat16, requires_grad=True)
    with torch.no_grad():
        expected = reference.double()(x.double())
        torch.testing.assert_close(ours(x).double(), expected, rtol=2e-2, atol=2e-2)
    ours(x).sum().backward()
    assert x.grad is not None and ours.weight.grad is not None


# Bug (a review of the torch ecosystem, 2026-11-30, left open then): the module raised a
# plain ValueError where nn.Conv2d raises RuntimeError, so code written for nn.Conv2d
# (`except RuntimeError`) let ours through.
@pytest.mark.parametrize("shape, dtype, why", [
    ((1, 3, 8, 8), torch.float32, "channels"),
    ((1, 4, 2, 2), torch.float32, "larger than the padded input"),
    ((1, 1, 4, 8, 8), torch.float32, "4-D"),
    ((4, 8, 8), torch.float64, "float64"),
])
def test_a_bad_input_raises_what_nn_conv2d_raises_too(
        db_url: str, shape: tuple[int, ...], dtype: Any, why: str) -> None:
    reference = nn.Conv2d(4, 6, 3)
    with pytest.raises(RuntimeError):
        reference(torch.randn(shape, dtype=dtype))
    ours = Conv2d(4, 6, 3, db=db_url)
    for grad in (False, True):
        x = torch.randn(shape, dtype=dtype, requires_grad=grad)
        with pytest.raises(RuntimeError, match=why) as raised:
            ours(x)
        assert isinstance(raised.value, ValueError)
        assert len(str(raised.value).splitlines()) == 1


# Mutation gap: PyTorch's convolution standing in for ours (bfloat16 under a limit of 0)
# and PyTorch's gradients behind it keep stride, dilation and groups, in training and in
# inference.
def test_the_fallback_keeps_the_whole_geometry(db_url: str) -> None:
    reference, ours = _twins(db_url, torch.bfloat16, padding=2, dilation=2, groups=2, stride=2)
    ours = convert(copy.deepcopy(reference), workspace_limit=0, db=db_url)
    exact = copy.deepcopy(reference).double()
    g = torch.Generator().manual_seed(8)
    x = torch.randn(2, 4, 9, 9, generator=g).bfloat16().requires_grad_()
    with torch.no_grad():
        expected = exact(x.double())
        torch.testing.assert_close(ours(x).double(), expected, rtol=3e-2, atol=3e-2)
    y = ours(x)
    torch.testing.assert_close(y.double(), expected, rtol=3e-2, atol=3e-2)
    grad = torch.randn(y.shape, generator=g, dtype=torch.float64)
    y.backward(grad.bfloat16())
    x64 = x.detach().double().requires_grad_()
    exact(x64).backward(grad)
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=5e-2, atol=5e-2)
    torch.testing.assert_close(ours.weight.grad.double(), exact.weight.grad, rtol=5e-2,
                               atol=1e-1)


# Mutation gap: an empty batch under no_grad (inference) too, not only when training.
def test_an_empty_batch_in_inference(db_url: str) -> None:
    reference, ours = _twins(db_url, padding=1)
    x = torch.randn(0, 4, 9, 9, dtype=torch.float64)
    with torch.no_grad():
        assert ours(x).shape == reference(x).shape == (0, 6, 9, 9)


# Mutation gap: "in one line" holds for the printed traceback too: InputError stands alone
# (from None), not chained to the ValueError it replaces.
def test_an_input_error_is_not_chained(db_url: str) -> None:
    ours = Conv2d(4, 6, 3, db=db_url)
    with pytest.raises(RuntimeError) as raised:
        ours(torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1)))
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


# Mutation gap: a plainly contiguous 1x1 weight (also channels_last by strides) and an NCHW
# input give an NCHW result, as nn.Conv2d's.
def test_a_plain_1x1_weight_gives_nchw(db_url: str) -> None:
    reference, ours = _twins(db_url, kernel_size=1)
    x = torch.randn(2, 4, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    expected, got = reference(x), ours(x)
    assert got.stride() == expected.stride() == (150, 25, 5, 1)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
