"""PyTorch front end (`pip install 'convtune[torch]'`): a Conv2d that runs tuned plans.

`Conv2d` is a `torch.nn.Conv2d` (same constructor, parameters and `state_dict`) whose
forward pass goes through convtune's plan for the problem: tuned on first sight, then
enqueued on torch's current stream. `convert(model)` swaps every `nn.Conv2d` of a model in
place, keeping the very same parameter objects (optimizers stay valid).

The convolution is the custom operator `convtune::conv2d` (torch.library.custom_op), so
torch.compile keeps it in one graph. Its backward pass runs convtune's tuned
backward-data and backward-filter algorithms (`convtune::conv2d_backward_data` and
`convtune::conv2d_backward_filter`), stored and planned like the forward pass, with
PyTorch's `torch.nn.grad` where no backward algorithm serves the device. On CUDA tensors in
float32, `torch.backends.cudnn.allow_tf32` (PyTorch's switch for convolutions) picks
math="tf32" or "fp32"; on the CPU every algorithm is FP32-accurate, so it is "fp32".
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import torch
import torch.nn.functional as F
import torch.nn.grad
from torch import Tensor, nn

from tuner.api import convolve_backward_data, convolve_backward_filter, run_convolution
from tuner.errors import NoUsableAlgorithm


@torch.library.custom_op("convtune::conv2d", mutates_args=())
def conv2d(
    x: Tensor, w: Tensor, stride: list[int], padding: list[int], dilation: list[int],
    groups: int, math: str, workspace_limit: int, db: str | None,
) -> Tensor:
    """Cross-correlate x (n, c, h, w) with w (k, c/groups, r, s); workspace_limit -1: none."""
    return run_convolution(  # type: ignore[no-any-return]
        x, w, stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation),
        groups=groups, workspace_limit=None if workspace_limit < 0 else workspace_limit,
        db=db, math=math, timed=False,
    ).y


@conv2d.register_fake
def _conv2d_shape(
    x: Tensor, w: Tensor, stride: list[int], padding: list[int], dilation: list[int],
    groups: int, math: str, workspace_limit: int, db: str | None,
) -> Tensor:
    sizes = [
        (size + 2 * pad - dil * (tap - 1) - 1) // step + 1
        for size, pad, dil, tap, step in zip(
            x.shape[2:], padding, dilation, w.shape[2:], stride, strict=True
        )
    ]
    return x.new_empty((x.shape[0], w.shape[0], *sizes))


@torch.library.custom_op("convtune::conv2d_backward_data", mutates_args=())
def conv2d_backward_data(
    dy: Tensor, w: Tensor, x_shape: list[int], stride: list[int], padding: list[int],
    dilation: list[int], groups: int, math: str, workspace_limit: int, db: str | None,
) -> Tensor:
    """dx of conv2d from its output gradient dy (convtune's tuned backward-data)."""
    return convolve_backward_data(  # type: ignore[no-any-return]
        dy.contiguous(), w, tuple(x_shape), tuple(stride), tuple(padding), tuple(dilation),
        groups, workspace_limit=None if workspace_limit < 0 else workspace_limit, db=db,
        math=math,
    )


@conv2d_backward_data.register_fake
def _backward_data_shape(
    dy: Tensor, w: Tensor, x_shape: list[int], stride: list[int], padding: list[int],
    dilation: list[int], groups: int, math: str, workspace_limit: int, db: str | None,
) -> Tensor:
    return dy.new_empty(x_shape)


@torch.library.custom_op("convtune::conv2d_backward_filter", mutates_args=())
def conv2d_backward_filter(
    x: Tensor, dy: Tensor, w_shape: list[int], stride: list[int], padding: list[int],
    dilation: list[int], groups: int, math: str, workspace_limit: int, db: str | None,
) -> Tensor:
    """dw of conv2d from its output gradient dy, summed over the batch (tuned)."""
    return convolve_backward_filter(  # type: ignore[no-any-return]
        x, dy.contiguous(), tuple(w_shape), tuple(stride), tuple(padding), tuple(dilation),
        groups, workspace_limit=None if workspace_limit < 0 else workspace_limit, db=db,
        math=math,
    )


@conv2d_backward_filter.register_fake
def _backward_filter_shape(
    x: Tensor, dy: Tensor, w_shape: list[int], stride: list[int], padding: list[int],
    dilation: list[int], groups: int, math: str, workspace_limit: int, db: str | None,
) -> Tensor:
    return x.new_empty(w_shape)


def _save(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, w = inputs[:2]
    ctx.save_for_backward(x, w)
    ctx.geometry = inputs[2:]  # stride, padding, dilation, groups, math, limit, db


def _backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    x, w = ctx.saved_tensors
    stride, padding, dilation, groups = ctx.geometry[:4]
    grad_x = grad_w = None
    # Where convtune has no backward algorithm for the device (none on CUDA yet), PyTorch's
    # reference gradients keep training working.
    if ctx.needs_input_grad[0]:
        try:
            grad_x = conv2d_backward_data(grad, w, list(x.shape), *ctx.geometry)
        except NoUsableAlgorithm:
            grad_x = torch.nn.grad.conv2d_input(x.shape, w, grad, stride, padding, dilation,
                                                groups)
    if ctx.needs_input_grad[1]:
        try:
            grad_w = conv2d_backward_filter(x, grad, list(w.shape), *ctx.geometry)
        except NoUsableAlgorithm:
            grad_w = torch.nn.grad.conv2d_weight(x, w.shape, grad, stride, padding, dilation,
                                                 groups)
    return grad_x, grad_w, None, None, None, None, None, None, None


conv2d.register_autograd(_backward, setup_context=_save)


def _math(x: Tensor) -> str:
    if x.is_cuda and x.dtype == torch.float32 and torch.backends.cudnn.allow_tf32:
        return "tf32"
    return "fp32"


class Conv2d(nn.Conv2d):
    """`torch.nn.Conv2d` whose forward pass runs convtune's tuned plan.

    Takes nn.Conv2d's arguments, plus `workspace_limit` (bytes; None: no limit) and `db`
    (the store's URL; None: the default) as keywords.
    """

    def __init__(self, *args: Any, workspace_limit: int | None = None, db: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.workspace_limit = workspace_limit
        self.db = db

    def _padded(self, x: Tensor) -> tuple[Tensor, list[int]]:
        """The input padded as nn.Conv2d would, and the symmetric padding left to apply."""
        if self.padding_mode != "zeros":
            return F.pad(x, self._reversed_padding_repeated_twice, mode=self.padding_mode), [0, 0]
        if self.padding == "valid":
            return x, [0, 0]
        if self.padding == "same":
            # Total padding d*(k-1) per side pair; an odd total puts the extra row or column
            # after, as PyTorch does. convtune pads symmetrically, so that extra is explicit.
            totals = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size, strict=True)]
            before = [t // 2 for t in totals]
            if any(t % 2 for t in totals):
                x = F.pad(x, [0, totals[1] - 2 * before[1], 0, totals[0] - 2 * before[0]])
            return x, before
        return x, [int(p) for p in self.padding]  # type: ignore[union-attr]

    def forward(self, input: Tensor) -> Tensor:
        """Convolution (and bias) through convtune, and so are the gradients."""
        x, padding = self._padded(input)
        limit = -1 if self.workspace_limit is None else self.workspace_limit
        y = conv2d(x, self.weight, list(self.stride), padding, list(self.dilation),
                   self.groups, _math(x), limit, self.db)
        if self.bias is not None:
            y = y + self.bias.view(1, -1, 1, 1)
        return y


M = TypeVar("M", bound=nn.Module)


def convert(model: M, *, workspace_limit: int | None = None, db: str | None = None) -> M:
    """Swap every nn.Conv2d of `model` for a convtune Conv2d, in place; returns the model.

    The new modules reuse the old parameter objects, so optimizers and state_dicts carry
    over unchanged. A model that is itself an nn.Conv2d comes back converted.
    """
    if isinstance(model, nn.Conv2d) and not isinstance(model, Conv2d):
        return cast(M, _converted(model, workspace_limit, db))
    for name, child in model.named_children():
        if isinstance(child, nn.Conv2d) and not isinstance(child, Conv2d):
            setattr(model, name, _converted(child, workspace_limit, db))
        else:
            convert(child, workspace_limit=workspace_limit, db=db)
    return model


def _converted(conv: nn.Conv2d, workspace_limit: int | None, db: str | None) -> Conv2d:
    new = Conv2d(
        conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride,
        padding=conv.padding, dilation=conv.dilation, groups=conv.groups,
        bias=conv.bias is not None, padding_mode=conv.padding_mode, device="meta",
        workspace_limit=workspace_limit, db=db,
    )
    new.weight = conv.weight  # the same Parameter objects, not copies
    new.bias = conv.bias
    new.train(conv.training)
    return new


__all__ = ["Conv2d", "conv2d", "conv2d_backward_data", "conv2d_backward_filter", "convert"]
