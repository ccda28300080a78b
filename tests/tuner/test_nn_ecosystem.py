"""What framework developers do with a converted model beyond eager calls (export, trace,
FX, compile, introspection): the faults a review of the torch ecosystem found on
2026-11-30 (CPU; nn.Conv2d the oracle, float64 where numbers are compared)."""

from __future__ import annotations

import copy
import inspect
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from tuner.nn import (  # noqa: E402
    Conv2d,
    conv2d,
    conv2d_backward_data,
    conv2d_backward_filter,
    convert,
)

GEOMETRY = ([1, 1], [1, 1], [1, 1], 1)


def _model(db_url: str) -> tuple[Any, Any]:
    reference = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                              nn.Conv2d(4, 5, 3, padding=1, padding_mode="reflect")).double()
    return reference, convert(copy.deepcopy(reference), db=db_url)


# Bug: a bfloat16 problem no algorithm of ours serves (workspace_limit=0) ran PyTorch's
# convolution, whose channels_last result broke the operator's fake (contiguous): inductor
# failed its stride check, and torch.library.opcheck its fake-tensor test.
@pytest.mark.parametrize("operand", ["x", "w"])
def test_fallbacks_answer_as_the_operators_fakes_say(db_url: str, operand: str) -> None:
    cl = torch.channels_last
    x = torch.randn(2, 3, 8, 8).bfloat16()
    w = torch.randn(4, 3, 3, 3).bfloat16()
    x, w = (x.contiguous(memory_format=cl), w) if operand == "x" else (
        x, w.contiguous(memory_format=cl))
    dy = torch.randn(2, 4, 8, 8).bfloat16()
    limited = ("fp32", 0, db_url)
    torch.library.opcheck(conv2d, (x, w, *GEOMETRY, *limited),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(conv2d_backward_data, (dy, w, list(x.shape), *GEOMETRY, *limited),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(conv2d_backward_filter, (x, dy, list(w.shape), *GEOMETRY, *limited),
                          test_utils=("test_schema", "test_faketensor"))


# Bug: only the module's eager path sent an empty batch (or no channels) to PyTorch; an
# exported program with a dynamic batch, or a trace, called the operator with n=0:
# "n must be positive". nn.Conv2d gives an empty output.
def test_empty_operands_through_the_operators(db_url: str) -> None:
    reference, ours = _model(db_url)
    exported = torch.export.export(ours, (torch.randn(2, 3, 8, 8, dtype=torch.float64),),
                                   dynamic_shapes=({0: torch.export.Dim("batch")},))
    empty = torch.randn(0, 3, 8, 8, dtype=torch.float64)
    assert exported.module()(empty).shape == reference(empty).shape == (0, 5, 8, 8)
    traced = torch.jit.trace(ours, torch.randn(2, 3, 8, 8, dtype=torch.float64),
                             check_trace=False)
    assert traced(empty).shape == (0, 5, 8, 8)
    no_channels = nn.Conv2d(0, 4, 3, padding=1).double()
    ours_none = convert(copy.deepcopy(no_channels), db=db_url)
    x = torch.randn(2, 0, 8, 8, dtype=torch.float64)
    assert ours_none(x).shape == no_channels(x).shape
    dy = torch.randn(0, 4, 8, 8, dtype=torch.float64)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64)
    assert conv2d_backward_data(dy, w, [0, 3, 8, 8], *GEOMETRY, "fp32", -1, db_url).shape == (
        0, 3, 8, 8)
    dw = conv2d_backward_filter(empty, dy, [4, 3, 3, 3], *GEOMETRY, "fp32", -1, db_url)
    assert dw.shape == (4, 3, 3, 3) and not dw.any()


# Bug: torch.fx.symbolic_trace failed on a converted model (the forward branched on the
# input, a Proxy under FX), so FX tools (quantization, feature extractors) could not run.
def test_fx_symbolic_trace_records_the_operator(db_url: str) -> None:
    reference, ours = _model(db_url)
    graph = torch.fx.symbolic_trace(ours)
    targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
    assert targets.count(torch.ops.convtune.conv2d.default) == 2
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(graph(x), reference(x), rtol=1e-9, atol=1e-9)
    graph(x).sum().backward()
    assert x.grad is not None


# Bug: the constructor took *args, so tools reading nn.Conv2d's signature failed:
# torch.nn.utils.skip_init ("Module must support a 'device' arg").
def test_the_constructor_is_nn_conv2d_s(db_url: str) -> None:
    ours = torch.nn.utils.skip_init(Conv2d, 3, 4, 3, padding=1, db=db_url)
    assert ours.weight.shape == (4, 3, 3, 3)
    plain = list(inspect.signature(nn.Conv2d).parameters)
    assert list(inspect.signature(Conv2d).parameters)[:len(plain)] == plain


# Bug: nn.Conv2d answers channels_last weights (an NCHW input) in channels_last; ours
# answered NCHW; then (the review of the session's changes) still for a 1x1 weight, which
# is plainly contiguous as well.
@pytest.mark.parametrize("kernel", [3, 1])
def test_channels_last_weights_give_channels_last(db_url: str, kernel: int) -> None:
    reference = nn.Conv2d(3, 4, kernel, padding=kernel // 2).double().to(
        memory_format=torch.channels_last)
    ours = convert(copy.deepcopy(reference), db=db_url)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    expected = reference(x)
    got = ours(x)
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


# Bug: repr showed nothing of what convert set, and torch.jit.script failed with "try blocks
# aren't supported" pointing into tuner/nn.py.
def test_repr_and_script_say_what_this_is() -> None:
    ours = Conv2d(3, 4, 3, workspace_limit=0, db="postgresql://u:s3cret@h/x?password=s3cret")
    text = repr(ours)
    assert "workspace_limit=0" in text and "db=" in text and "s3cret" not in text
    with pytest.raises(RuntimeError, match=r"cannot be compiled by torch\.jit\.script: use"):
        torch.jit.script(ours)



# Bug (older, found by the review of the session's changes): with a padding mode other than
# zeros nn.Conv2d convolves F.pad's copy, whose layout decides; ours answered a
# channels_last input in channels_last there.
@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
def test_the_output_layout_follows_nn_conv2d_in_every_padding_mode(db_url: str,
                                                                    mode: str) -> None:
    reference = nn.Conv2d(3, 4, 3, padding=1, padding_mode=mode).double()
    ours = convert(copy.deepcopy(reference), db=db_url)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64).contiguous(
        memory_format=torch.channels_last)
    expected, got = reference(x), ours(x)
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


# Mutation gap: a weight without data (made under FakeTensorMode: a model initialised
# fake, as export and memory planners do) with a plain input must still go through the
# operator's fake, not the eager path that reads the data.
def test_a_fake_weight_with_a_real_input_goes_through_the_operator(db_url: str) -> None:
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    x = torch.randn(2, 4, 9, 8, generator=torch.Generator().manual_seed(2))
    with FakeTensorMode(allow_non_fake_inputs=True):
        conv = Conv2d(4, 6, 3, stride=2, padding=1, db=db_url)
        assert isinstance(conv.weight, FakeTensor)
        y = conv(x)
    assert isinstance(y, FakeTensor) and tuple(y.shape) == (2, 6, 5, 4)


# Mutation gap: the operator's fake (shape) function with dilation, asymmetric stride and
# padding, checked against the real operator and nn.Conv2d's shape.
def test_the_fake_shape_keeps_dilation_and_stride(db_url: str) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    args: dict[str, Any] = dict(stride=(2, 1), padding=(1, 2), dilation=(2, 3), groups=2)
    reference = nn.Conv2d(4, 6, 3, **args)
    x = torch.randn(2, 4, 11, 10, generator=torch.Generator().manual_seed(4))
    with FakeTensorMode(allow_non_fake_inputs=True):
        y = Conv2d(4, 6, 3, db=db_url, **args)(x)
    assert tuple(y.shape) == tuple(reference(x).shape) == (2, 6, 5, 8)
    torch.library.opcheck(conv2d, (x, reference.weight.detach(), [2, 1], [1, 2], [2, 3], 2,
                                   "fp32", -1, db_url),
                          test_utils=("test_schema", "test_faketensor"))


# Mutation gap: torch.fx.symbolic_trace records the module's whole geometry (stride,
# dilation, groups), no limit as -1, fp32 math and the module's store in the node.
def test_fx_records_the_whole_geometry(db_url: str) -> None:
    args: dict[str, Any] = dict(stride=(2, 1), padding=2, dilation=(2, 3), groups=2)
    reference = nn.Conv2d(4, 6, 3, **args).double()
    ours = convert(copy.deepcopy(reference), db=db_url)
    graph = torch.fx.symbolic_trace(ours)
    (node,) = [n for n in graph.graph.nodes if n.target == torch.ops.convtune.conv2d.default]
    assert node.args[2:] == ([2, 1], [2, 2], [2, 3], 2, "fp32", -1, db_url)
    x = torch.randn(2, 4, 11, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(graph(x), reference(x), rtol=1e-9, atol=1e-9)


# Mutation gap: the constructor's defaults are nn.Conv2d's (the names alone were checked).
def test_the_constructor_s_defaults_are_nn_conv2d_s() -> None:
    theirs = inspect.signature(nn.Conv2d).parameters
    ours = inspect.signature(Conv2d).parameters
    assert [(p.name, p.default) for p in theirs.values()] == [
        (p.name, p.default) for p in list(ours.values())[:len(theirs)]]


# Mutation gap: the backward-data operator with no input channels answers as
# torch.nn.grad does (an empty dx), not with convtune's refusal of an empty problem.
def test_backward_data_without_input_channels(db_url: str) -> None:
    dy = torch.randn(2, 4, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(12))
    w = torch.randn(4, 0, 3, 3, dtype=torch.float64)
    dx = conv2d_backward_data(dy, w, [2, 0, 8, 8], *GEOMETRY, "fp32", -1, db_url)
    assert dx.shape == (2, 0, 8, 8)
