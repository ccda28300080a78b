"""The PyTorch module: outputs and gradients equal nn.Conv2d's (float64 oracle), on the CPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from tuner.nn import Conv2d, convert  # noqa: E402

CASES: dict[str, dict[str, Any]] = {
    "pad1_bias": dict(padding=1),
    "same_dilated": dict(padding="same", dilation=2, bias=False),
    "same_even_kernel": dict(padding="same", kernel_size=4),
    "valid_strided": dict(padding="valid", stride=2),
    "reflect_groups": dict(padding=2, padding_mode="reflect", stride=(2, 1), groups=2),
    "circular_asym": dict(padding=(1, 2), padding_mode="circular"),
    # Mutation gap: "same" with an odd total padding in one dimension only (rows here), whose
    # extra row goes after: square kernels hid a test of all dimensions, or rows for columns.
    "same_one_odd_dim": dict(padding="same", kernel_size=(2, 3), dilation=(1, 2)),
}


def _pair(case: str) -> tuple[Any, Any]:
    args = dict(in_channels=4, out_channels=6, kernel_size=3) | CASES[case]
    reference = nn.Conv2d(**args).double()
    model = nn.Sequential(nn.Conv2d(**args).double())
    model[0].load_state_dict(reference.state_dict())
    return reference, model


def _run_both(run: Callable[[Any], Any], reference: Any, conv: Any,
              shape: tuple[int, ...]) -> tuple[Any, Any]:
    """`run` and `reference` forward and backward on one fresh float64 input of `shape`:
    asserts that the input's and the weight's gradients match; (y, y_ref)."""
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    y, y_ref = run(x), reference(x_ref)
    grad = torch.randn_like(y)
    y.backward(grad)
    y_ref.backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(conv.weight.grad, reference.weight.grad, rtol=1e-9, atol=1e-9)
    return y, y_ref


@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_and_gradients_match_nn_conv2d(case: str, db_url: str) -> None:
    reference, model = _pair(case)
    convert(model, db=db_url)
    assert isinstance(model[0], Conv2d)
    ours = model[0]
    y, y_ref = _run_both(model, reference, ours, (2, 4, 9, 8))
    assert y.shape == y_ref.shape
    torch.testing.assert_close(y, y_ref, rtol=1e-9, atol=1e-9)
    if reference.bias is not None:
        assert ours.bias is not None
        torch.testing.assert_close(ours.bias.grad, reference.bias.grad)


def test_an_unbatched_input_runs_as_nn_conv2d_runs_it(db_url: str) -> None:
    # Bug pinned: nn.Conv2d takes an unbatched (c, h, w) input, and ours refused it
    # ("x must be 4-D"), so convert() broke models that feed single images.
    reference, model = _pair("same_even_kernel")
    convert(model, db=db_url)
    y, y_ref = _run_both(model, reference, model[0], (4, 9, 8))
    assert y.shape == y_ref.shape == (6, 9, 8)
    torch.testing.assert_close(y, y_ref, rtol=1e-9, atol=1e-9)


def test_convert_keeps_parameters_and_state_dict(db_url: str) -> None:
    inner = nn.Sequential(nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4))
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), inner)
    params = [id(p) for p in model.parameters()]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.eval()
    assert convert(model, db=db_url) is model
    assert isinstance(model[0], Conv2d) and isinstance(inner[0], Conv2d)
    assert not model[0].training
    assert [id(p) for p in model.parameters()] == params  # optimizers stay valid
    assert list(model.state_dict()) == list(state)
    lone = convert(nn.Conv2d(2, 2, 3), db=db_url)
    assert isinstance(lone, Conv2d)


def test_constructor_is_nn_conv2d_s(db_url: str) -> None:
    ours = Conv2d(4, 6, 3, stride=2, padding=1, bias=False, db=db_url, workspace_limit=0)
    theirs = nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=False)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(1, 4, 8, 8)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-4, atol=1e-5)


def test_torch_compile_keeps_one_graph(db_url: str) -> None:
    reference, model = _pair("pad1_bias")
    convert(model, db=db_url)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)  # no graph break
    x = torch.randn(2, 4, 9, 8, dtype=torch.float64)
    torch.testing.assert_close(compiled(x), reference(x), rtol=1e-9, atol=1e-9)


def test_eager_calls_skip_the_operator_and_keep_its_gradients(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The eager path (an autograd.Function, or the plain call under no_grad) must give
    # what the custom operator gives, outputs and gradients, without its dispatch.
    import tuner.nn as tnn
    from tuner import torch_ops

    conv = Conv2d(4, 6, 3, stride=(2, 1), groups=2, bias=False, db=db_url).double()
    x = torch.randn(2, 4, 9, 8, dtype=torch.float64, requires_grad=True)
    y_op = tnn.conv2d(x, conv.weight, [2, 1], [0, 0], [1, 1], 2, "fp32", -1, db_url)
    grad = torch.randn_like(y_op)
    dx_op, dw_op = torch.autograd.grad(y_op, (x, conv.weight), grad)

    def no_operator(*_a: object, **_k: object) -> None:
        raise AssertionError("an eager call went through the custom operator")

    monkeypatch.setattr(tnn, "conv2d", no_operator)
    monkeypatch.setattr(torch_ops, "conv2d_backward_data", no_operator)
    monkeypatch.setattr(torch_ops, "conv2d_backward_filter", no_operator)
    y = conv(x)
    assert type(y.grad_fn).__name__ == "EagerConv2dBackward"
    torch.testing.assert_close(y, y_op, rtol=1e-12, atol=1e-12)
    dx, dw = torch.autograd.grad(y, (x, conv.weight), grad)
    torch.testing.assert_close(dx, dx_op, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dw, dw_op, rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        plain = conv(x)
    assert plain.grad_fn is None
    torch.testing.assert_close(plain, y_op, rtol=1e-12, atol=1e-12)


def test_compiled_gradients_match_nn_conv2d(db_url: str) -> None:
    # torch.compile traces the operator's autograd formula (the backward operators), which
    # eager calls no longer run.
    reference, model = _pair("valid_strided")
    convert(model, db=db_url)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    _run_both(compiled, reference, model[0], (2, 4, 9, 8))


def test_tensors_without_data_go_through_the_operator_s_shape_function(db_url: str) -> None:
    # A FakeTensor or a meta tensor has no data for the eager path to read; the operator's
    # fake implementation answers with the output's shape.
    from torch._subclasses.fake_tensor import FakeTensorMode

    conv = Conv2d(4, 6, 3, stride=2, padding=1, db=db_url)
    with FakeTensorMode(allow_non_fake_inputs=True):
        y = conv(torch.empty(2, 4, 9, 8))
    assert tuple(y.shape) == (2, 6, 5, 4)
    on_meta = Conv2d(4, 6, 3, stride=2, padding=1, db=db_url, device="meta")
    assert tuple(on_meta(torch.empty(2, 4, 9, 8, device="meta")).shape) == (2, 6, 5, 4)


def test_inference_mode_runs_the_plan(db_url: str) -> None:
    reference = nn.Conv2d(2, 3, 3, padding=1).double()
    ours = convert(nn.Conv2d(2, 3, 3, padding=1).double(), db=db_url)
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(2, 2, 6, 5, dtype=torch.float64)
    with torch.inference_mode():
        y = ours(x)
    torch.testing.assert_close(y, reference(x), rtol=1e-9, atol=1e-9)


# Mutation gap: the inference path (no graph: straight to the kept call) with every padding
# kind; the padding left after F.pad, not the module's, must reach the call.
@pytest.mark.parametrize("case", ["same_even_kernel", "reflect_groups", "same_one_odd_dim"])
def test_inference_matches_nn_conv2d_with_every_padding_kind(case: str, db_url: str) -> None:
    reference, model = _pair(case)
    convert(model, db=db_url)
    x = torch.randn(2, 4, 9, 8, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=1e-9, atol=1e-9)


# Mutation gap: what the module passes to convtune's calls besides the tensors: the math
# _math chose (on every path, backward too), its own workspace limit (0 stays a limit of 0)
# and its own store, as convert set them (the default store is db_url's: not this one).
@pytest.mark.parametrize("limit", [0, 4096])
def test_math_limit_and_store_reach_every_call(
    limit: int, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tuner.nn as tnn
    from tuner import torch_ops

    seen: list[tuple[str, Any, Any, Any]] = []

    def spy(name: str, real: Any, pick: Callable[[tuple[Any, ...], dict[str, Any]], Any]) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            seen.append((name, *pick(args, kwargs)))
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(torch_ops, "convolve", spy(
        "forward", torch_ops.convolve, lambda a, k: (a[10], a[7], a[9])))
    for name in ("convolve_backward_data", "convolve_backward_filter"):
        monkeypatch.setattr(torch_ops, name, spy(name, getattr(torch_ops, name), lambda a, k: (
            k["math"], k["workspace_limit"], k["db"])))
    monkeypatch.setattr(tnn, "execute", spy(
        "inference", tnn.execute, lambda a, k: (a[9], a[6], a[8])))
    monkeypatch.setattr(tnn, "_math", lambda x: "tf32")  # as on a CUDA float32 tensor
    own = f"sqlite:///{tmp_path / 'own.db'}"
    conv = convert(nn.Conv2d(4, 6, 3, padding=1), workspace_limit=limit, db=own)
    x = torch.randn(2, 4, 7, 7, generator=torch.Generator().manual_seed(3), requires_grad=True)
    conv(x).sum().backward()
    with torch.no_grad():
        conv(x)
    assert sorted(name for name, *_ in seen) == [
        "convolve_backward_data", "convolve_backward_filter", "forward", "inference"]
    assert {tuple(rest) for _, *rest in seen} == {("tf32", limit, own)}
    assert (tmp_path / "own.db").exists()


# Mutation gap: TF32 is chosen on CUDA float32 tensors only, and by cuDNN's switch
# (torch.backends.cudnn.allow_tf32), not by the matmul one.
def test_math_is_tf32_only_for_cuda_float32_under_cudnn_s_switch(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from tuner.nn import _math

    def tensor(cuda: bool, dtype: Any) -> Any:
        return SimpleNamespace(is_cuda=cuda, dtype=dtype)

    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    matmul = torch.backends.cuda.matmul  # a property on the module's class: set, then restored
    before = matmul.allow_tf32
    try:
        for cudnn in (True, False):
            torch.backends.cudnn.allow_tf32 = cudnn
            matmul.allow_tf32 = not cudnn
            assert _math(tensor(True, torch.float32)) == ("tf32" if cudnn else "fp32")
            for dtype in (torch.float64, torch.float16, torch.bfloat16):
                assert _math(tensor(True, dtype)) == "fp32"
            assert _math(tensor(False, torch.float32)) == "fp32"
            assert _math(torch.randn(1, 1, 2, 2)) == "fp32"
    finally:
        matmul.allow_tf32 = before
