"""The PyTorch operators convtune registers, and their gradients (imported by `tuner.nn`).

`convtune::conv2d` runs the tuned forward convolution, `convtune::conv2d_backward_data` and
`convtune::conv2d_backward_filter` its gradients, each with a fake (shape) function for
torch.compile and export; PyTorch's own convolution serves where none of ours does.
`EagerConv2d` runs the same bodies with the same autograd formula without the operators'
dispatch, for eager calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
import torch.nn.grad
from torch import Tensor

from tuner.api import convolve, convolve_backward_data, convolve_backward_filter
from tuner.errors import NoUsableAlgorithm


def _limit(workspace_limit: int) -> int | None:
    # The operators' schema has no optional int: -1 stands for "no limit".
    return None if workspace_limit < 0 else workspace_limit


def _convolve(
    x: Tensor, w: Tensor, stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
    groups: int, math: str, workspace_limit: int, db: str | None,
) -> Tensor:
    """The forward convolution itself (the body of `conv2d`)."""
    if x.numel() == 0 or w.numel() == 0:
        # Nothing to tune; a graph recorded on a batch (export with a dynamic batch, a
        # trace) called the operator with an empty one and failed (a review of the torch
        # ecosystem, 2026-11-30).
        return fallback(x, w, stride, padding, dilation, groups)
    try:
        # Tuples: lists would leave the call nothing to keep its plan under (tuner.calls).
        return convolve(  # type: ignore[no-any-return]
            x, w, tuple(stride), tuple(padding), tuple(dilation), groups, None,
            _limit(workspace_limit), None, db, math,
        )
    except NoUsableAlgorithm:  # none of ours serves it (say float16 under a limit of 0)
        return fallback(x, w, stride, padding, dilation, groups)


def fallback(x: Tensor, w: Tensor, stride: Sequence[int], padding: Sequence[int],
              dilation: Sequence[int], groups: int) -> Tensor:
    """PyTorch's own convolution, where no algorithm of ours serves the problem: a model
    keeps working, as its gradients do through torch.nn.grad (`_gradients`)."""
    return F.conv2d(x, w, None, tuple(stride), tuple(padding), tuple(dilation), groups)


def _backward_data(
    dy: Tensor, w: Tensor, x_shape: Sequence[int], stride: Sequence[int], padding: Sequence[int],
    dilation: Sequence[int], groups: int, math: str, workspace_limit: int, db: str | None,
) -> Tensor:
    """dx from dy (the body of `conv2d_backward_data`); PyTorch's where none of ours serves
    (in the body, not its caller, as a compiled backward graph calls the operator itself)."""
    if dy.numel() == 0 or w.numel() == 0:
        return _torch_data(dy, w, list(x_shape), stride, padding, dilation, groups)
    try:
        return convolve_backward_data(  # type: ignore[no-any-return]
            dy.contiguous(), w, tuple(x_shape), tuple(stride), tuple(padding),
            tuple(dilation), groups, workspace_limit=_limit(workspace_limit), db=db, math=math,
        )
    except NoUsableAlgorithm:
        return _torch_data(dy, w, list(x_shape), stride, padding, dilation, groups)


def _backward_filter(
    x: Tensor, dy: Tensor, w_shape: Sequence[int], stride: Sequence[int], padding: Sequence[int],
    dilation: Sequence[int], groups: int, math: str, workspace_limit: int, db: str | None,
) -> Tensor:
    """dw from dy (the body of `conv2d_backward_filter`); PyTorch's where none of ours
    serves."""
    if x.numel() == 0 or dy.numel() == 0:
        return _torch_filter(x, dy, list(w_shape), stride, padding, dilation, groups)
    try:
        return convolve_backward_filter(  # type: ignore[no-any-return]
            x, dy.contiguous(), tuple(w_shape), tuple(stride), tuple(padding),
            tuple(dilation), groups, workspace_limit=_limit(workspace_limit), db=db, math=math,
        )
    except NoUsableAlgorithm:
        return _torch_filter(x, dy, list(w_shape), stride, padding, dilation, groups)


@torch.library.custom_op("convtune::conv2d", mutates_args=())
def conv2d(
    x: Tensor, w: Tensor, stride: list[int], padding: list[int], dilation: list[int],
    groups: int, math: str, workspace_limit: int, db: str | None,
) -> Tensor:
    """Cross-correlate x (n, c, h, w) with w (k, c/groups, r, s); workspace_limit -1: none."""
    # Contiguous, as the fake says: PyTorch's convolution standing in for ours answers a
    # channels_last operand in channels_last, which failed inductor's stride check (a review
    # of the torch ecosystem, 2026-11-30). The eager paths skip this copy.
    return _convolve(x, w, stride, padding, dilation, groups, math, workspace_limit,
                     db).contiguous()


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
    return _backward_data(dy, w, x_shape, stride, padding, dilation, groups, math,
                          workspace_limit, db).contiguous()  # as the fake says (conv2d)


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
    return _backward_filter(x, dy, w_shape, stride, padding, dilation, groups, math,
                            workspace_limit, db).contiguous()  # as the fake says (conv2d)


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


def _differentiable(grad: Tensor) -> bool:
    """Whether the gradients being computed must themselves be differentiable or batched:
    a graph of them asked for (create_graph=True: a gradient penalty, a Hessian-vector
    product), torch.func's transforms over them (vmap of a backward), or batched output
    gradients (is_grads_batched, a vectorized jacobian: the older vmap, whose tensors have
    no storage). Ours are neither: PyTorch's gradient functions then serve."""
    return (torch.is_grad_enabled() or torch._C._are_functorch_transforms_active()
            or not torch._C._has_storage(grad))


def _gradients(ctx: Any, grad: Tensor, data: Callable[..., Tensor],
               filter_: Callable[..., Tensor]) -> tuple[Tensor | None, Tensor | None]:
    """(dx, dw) by `data` and `filter_` (the operators, their bodies, or PyTorch's where
    `_differentiable`); None where the input needs no gradient."""
    if _differentiable(grad):
        data, filter_ = _torch_data, _torch_filter
    x, w = ctx.saved_tensors
    grad_x = grad_w = None
    if ctx.needs_input_grad[0]:
        grad_x = data(grad, w, list(x.shape), *ctx.geometry)
    if ctx.needs_input_grad[1]:
        grad_w = filter_(x, grad, list(w.shape), *ctx.geometry)
    return grad_x, grad_w


def _backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    # Through the operators: torch.compile traces this formula into its backward graph.
    # None for each of the seven geometry arguments.
    return (*_gradients(ctx, grad, conv2d_backward_data, conv2d_backward_filter),
            *[None] * 7)


conv2d.register_autograd(_backward, setup_context=_save)


class EagerConv2d(torch.autograd.Function):
    """`conv2d` with its autograd formula, without the operator's dispatch.

    In eager mode the custom operator's Python dispatch costs more per call than an
    autograd.Function (BENCHMARKS.md, "The PyTorch module's eager path"), so `Conv2d`
    takes this path unless something traces it.
    """

    # forward takes ctx (no separate setup_context): with one, every apply binds the
    # arguments through inspect.signature. The geometry travels as one tuple.
    @staticmethod
    def forward(ctx: Any, x: Tensor, w: Tensor,  # type: ignore[override]
                geometry: tuple[Any, ...]) -> Tensor:
        """The convolution's body, as the operator runs it; keeps what backward needs."""
        y = _convolve(x, w, *geometry)
        _save(ctx, (x, w, *geometry), y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        """The operator's formula through the bodies of the backward operators.

        Why not once_differentiable: with it the second derivative was refused for x but
        silently dropped for the weight (review of 2026-11-30); `_gradients` switches to
        PyTorch's differentiable functions instead."""
        return (*_gradients(ctx, grad, _backward_data, _backward_filter), None)


def _torch_data(grad: Tensor, w: Tensor, x_shape: list[int], stride: Sequence[int],
                padding: Sequence[int], dilation: Sequence[int], groups: int,
                *_rest: Any) -> Tensor:
    """dx by PyTorch (`_backward_data`'s arguments), differentiable in w and grad."""
    return torch.nn.grad.conv2d_input(x_shape, w, grad, stride, padding, dilation, groups)


def _torch_filter(x: Tensor, grad: Tensor, w_shape: list[int], stride: Sequence[int],
                  padding: Sequence[int], dilation: Sequence[int], groups: int,
                  *_rest: Any) -> Tensor:
    """dw by PyTorch (`_backward_filter`'s arguments), differentiable in x and grad."""
    return torch.nn.grad.conv2d_weight(x, w_shape, grad, stride, padding, dilation, groups)
