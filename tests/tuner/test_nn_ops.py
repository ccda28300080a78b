"""The operators tuner.torch_ops registers, called directly: what they hand convtune and
what they answer where convtune cannot serve (CPU; F.conv2d and torch.nn.grad the oracles,
float64 where numbers are compared)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tuner import calls  # noqa: E402
from tuner.nn import conv2d, conv2d_backward_data, conv2d_backward_filter  # noqa: E402

GEOMETRY = ([2, 1], [1, 2], [1, 2], 2)


def _operands() -> tuple[Any, Any, Any]:
    """Fresh float64 x, w and dy for GEOMETRY."""
    x = torch.randn(2, 4, 9, 8, dtype=torch.float64)
    w = torch.randn(6, 2, 3, 3, dtype=torch.float64)
    dy = torch.randn(2, 6, 5, 8, dtype=torch.float64)
    return x, w, dy


# Mutation gap: the operators hand convtune their geometry as tuples, under which its call
# keeps the plan: a repeated call skips the plan lookup (lists, unhashable, kept none).
def test_repeated_calls_reuse_the_kept_plan(db_url: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    looked_up: list[str] = []
    real = calls._checked_plan

    def counted(*args: Any, **kwargs: Any) -> Any:
        looked_up.append(args[4])  # the direction
        return real(*args, **kwargs)

    monkeypatch.setattr(calls, "_checked_plan", counted)
    x, w, dy = _operands()
    stride, padding, dilation, groups = GEOMETRY
    limited = ("fp32", -1, db_url)
    # Two rounds to keep each call (a call that tuned writes to the store, and a plan found
    # before that write is not kept), then two that must find them all kept.
    for round_ in range(4):
        if round_ == 2:
            looked_up.clear()
        y = conv2d(x, w, *GEOMETRY, *limited)
        dx = conv2d_backward_data(dy, w, list(x.shape), *GEOMETRY, *limited)
        dw = conv2d_backward_filter(x, dy, list(w.shape), *GEOMETRY, *limited)
    assert looked_up == []
    torch.testing.assert_close(
        y, F.conv2d(x, w, None, stride, padding, dilation, groups), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(dx, torch.nn.grad.conv2d_input(
        x.shape, w, dy, stride, padding, dilation, groups), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(dw, torch.nn.grad.conv2d_weight(
        x, w.shape, dy, stride, padding, dilation, groups), rtol=1e-9, atol=1e-9)


# Mutation gap: the forward operator (what a trace or compiled graph calls) with a weight
# of no output channels raises PyTorch's own error, as F.conv2d does; not convtune's
# refusal of a problem with no filters.
def test_the_operator_with_no_output_channels_raises_f_conv2d_s_error(db_url: str) -> None:
    x = torch.randn(2, 4, 9, 8, dtype=torch.float64)
    w = torch.randn(0, 2, 3, 3, dtype=torch.float64)
    stride, padding, dilation, groups = GEOMETRY
    with pytest.raises(RuntimeError) as theirs:
        F.conv2d(x, w, None, stride, padding, dilation, groups)
    with pytest.raises(RuntimeError) as raised:
        conv2d(x, w, *GEOMETRY, "fp32", -1, db_url)
    assert str(raised.value) == str(theirs.value)


# Mutation gap: the backward-filter operator (what a compiled backward calls) with no input
# channels answers as torch.nn.grad does (an empty dw), and with no output channels raises
# its error: neither reaches convtune, which refuses a problem with nothing in it.
def test_backward_filter_without_channels_answers_as_torch_nn_grad(db_url: str) -> None:
    plain = ([1, 1], [1, 1], [1, 1], 1)
    x = torch.randn(2, 0, 7, 6, dtype=torch.float64)
    dy = torch.randn(2, 4, 7, 6, dtype=torch.float64)
    dw = conv2d_backward_filter(x, dy, [4, 0, 3, 3], *plain, "fp32", -1, db_url)
    assert dw.shape == torch.nn.grad.conv2d_weight(x, (4, 0, 3, 3), dy, padding=1).shape
    x, dy = torch.randn(2, 4, 7, 6, dtype=torch.float64), dy[:, :0]
    with pytest.raises(RuntimeError) as theirs:
        torch.nn.grad.conv2d_weight(x, (0, 4, 3, 3), dy, padding=1)
    with pytest.raises(RuntimeError) as raised:
        conv2d_backward_filter(x, dy, [0, 4, 3, 3], *plain, "fp32", -1, db_url)
    assert str(raised.value) == str(theirs.value)
