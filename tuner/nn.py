"""PyTorch front end (`pip install 'convtune[torch]'`): a Conv2d that runs tuned plans.

`Conv2d` is a `torch.nn.Conv2d` (same constructor, parameters and `state_dict`) whose
forward pass goes through convtune's plan for the problem: tuned on first sight, then
enqueued on torch's current stream. `convert(model)` swaps every `nn.Conv2d` of a model in
place, keeping the very same parameter objects (optimizers stay valid).

The convolution is the custom operator `convtune::conv2d` (torch.library.custom_op), so
torch.compile keeps it in one graph. Its backward pass runs convtune's tuned
backward-data and backward-filter algorithms (`convtune::conv2d_backward_data` and
`convtune::conv2d_backward_filter`), stored and planned like the forward pass, with
PyTorch's `torch.nn.grad` where no backward algorithm serves the device. Eager calls
skip the operators' dispatch, which costs more than the rest of the call: the same bodies
run through an autograd.Function, or directly when no graph is recorded (`_traced` says
when the operators are needed). On CUDA tensors in float32,
`torch.backends.cudnn.allow_tf32` (PyTorch's switch for convolutions) picks math="tf32"
or "fp32"; on the CPU every algorithm is FP32-accurate, so it is "fp32".
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar, cast

try:
    import torch
except ModuleNotFoundError as exc:  # said with the extra that brings it (a review of packaging)
    raise ModuleNotFoundError("tuner.nn needs PyTorch: pip install 'convtune[torch]'",
                              name="torch") from exc
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd import forward_ad

from tuner.calls import execute
from tuner.candidates import validate_workspace_limit
from tuner.errors import NoUsableAlgorithm
from tuner.service import describe_url
from tuner.torch_ops import (
    EagerConv2d,
    conv2d,
    conv2d_backward_data,
    conv2d_backward_filter,
    fallback,
)

_PLAIN = (Tensor, nn.Parameter)


def _traced(x: Tensor, w: Tensor) -> bool:
    """Whether this call is being traced (torch.compile, export, jit) or sees tensors
    without data (tensor subclasses such as FakeTensor or DTensor, the meta device): then it
    must go through the operator, which such machinery knows (its fake shape function, its
    schema)."""
    return (torch.compiler.is_compiling() or torch.jit.is_tracing()
            or type(x) not in _PLAIN or type(w) not in _PLAIN or x.is_meta)


def _pairs(module: nn.Conv2d) -> None:
    """A one-element stride, padding or dilation as the pair it stands for: nn.Conv2d keeps
    (1,) as given and F.conv2d repeats it (convtune's calls take ints or pairs)."""
    for name in ("stride", "padding", "dilation"):
        value = getattr(module, name)
        if isinstance(value, tuple) and len(value) == 1:
            setattr(module, name, value * 2)


def _autocast(t: Tensor, dtype: torch.dtype) -> Tensor:
    """`t` as autocast casts an operand of F.conv2d: floating point but float64 to `dtype`."""
    return t.to(dtype) if t.is_floating_point() and t.dtype != torch.float64 else t


def _channels_last(t: Tensor) -> bool:
    """Whether PyTorch's convolution takes `t` for channels_last: whether its strides are
    like channels_last's, by Tensor.suggest_memory_format's rule (ambiguous ones are NCHW).
    Strides, not contiguity: a crop of a channels_last tensor is channels_last to PyTorch,
    and a tensor one column wide with channels first in memory, channels_last-contiguous,
    is not (a mutation review, 2026-12-01; before it, the review of the session's changes:
    a channels_last 1x1 weight, plainly contiguous too, gave NCHW)."""
    if t.is_contiguous() and not t.is_contiguous(memory_format=torch.channels_last):
        return False  # plain NCHW, the common case, decided in C++ (no such tensor is like
        # channels_last: checked over all shapes up to 4 per side, size-1 strides free)
    sizes, strides = t.shape, t.stride()
    if strides[1] == 0:
        return False
    low = 0
    for d in (1, 3, 2, 0):  # channels, columns, rows, batch: innermost first
        if sizes[d] == 0 or strides[d] < low or (d == 0 and low == strides[1]):
            return False
        low = strides[d] * sizes[d]
    return True


def _math(x: Tensor) -> str:
    if x.is_cuda and x.dtype == torch.float32 and torch.backends.cudnn.allow_tf32:
        return "tf32"
    return "fp32"


class InputError(ValueError, RuntimeError):
    """An input the module cannot convolve (wrong rank, channels, dtype or size): a
    ValueError, as convtune raises, and a RuntimeError, as nn.Conv2d raises for it, so that
    code written for nn.Conv2d catches it too (it raised a plain ValueError, which an
    `except RuntimeError` let through: a review of the torch ecosystem, 2026-11-30)."""


class Conv2d(nn.Conv2d):
    """`torch.nn.Conv2d` whose forward pass runs convtune's tuned plan.

    Takes nn.Conv2d's arguments, plus `workspace_limit` (bytes; None: no limit) and `db`
    (the store's URL; None: the default) as keywords.
    """

    # nn.Conv2d's parameters spelled out (not *args): torch.nn.utils.skip_init and other
    # tools read them from the signature (a review of the torch ecosystem, 2026-11-30).
    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: Literal["zeros", "reflect", "replicate", "circular"] = "zeros",
                 device: Any = None, dtype: Any = None, *,
                 workspace_limit: int | None = None, db: str | None = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)
        self._use(workspace_limit, db)

    def extra_repr(self) -> str:
        """nn.Conv2d's, with the workspace limit and the store where set (no password)."""
        text = super().extra_repr()
        if self.workspace_limit is not None:
            text += f", workspace_limit={self.workspace_limit}"
        if self.db is not None:
            text += f", db={describe_url(self.db)!r}"
        return text

    def __prepare_scriptable__(self) -> nn.Module:
        """Refused, saying what works instead (TorchScript cannot compile this forward)."""
        raise RuntimeError("convtune's Conv2d cannot be compiled by torch.jit.script: use "
                           "torch.compile, torch.export or torch.jit.trace")

    def _use(self, workspace_limit: int | None, db: str | None) -> None:
        """Set what this module adds to nn.Conv2d, checked (also for a converted one)."""
        _pairs(self)
        self.workspace_limit = validate_workspace_limit(workspace_limit)
        self.db = db

    def _padded(self, x: Tensor) -> tuple[Tensor, tuple[int, ...]]:
        """The input padded as nn.Conv2d would, and the symmetric padding left to apply."""
        if self.padding_mode != "zeros":
            return F.pad(x, self._reversed_padding_repeated_twice, mode=self.padding_mode), (0, 0)
        if self.padding == "valid":
            return x, (0, 0)
        if self.padding == "same":
            # Total padding d*(k-1) per side pair; an odd total puts the extra row or column
            # after, as PyTorch does. convtune pads symmetrically, so that extra is explicit.
            totals = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size, strict=True)]
            before = tuple(t // 2 for t in totals)
            if any(t % 2 for t in totals):
                x = F.pad(x, [0, totals[1] - 2 * before[1], 0, totals[0] - 2 * before[0]])
            return x, before
        return x, self.padding  # type: ignore[return-value]  # nn.Conv2d's pair of ints

    def _symbolic(self, input: Any) -> Any:
        """forward as torch.fx.symbolic_trace records it: the operator as one node, with no
        branch on the input (a Proxy there: `if` on it failed the trace; a review of the
        torch ecosystem, 2026-11-30). What the eager forward decides from the input at run
        time is fixed here instead (README): FP32-accurate math (the graph may run on either
        device), a batched input, no autocast, an NCHW result."""
        x, padding = self._padded(input)
        limit = -1 if self.workspace_limit is None else self.workspace_limit
        y = conv2d(x, self.weight, list(self.stride), list(padding), list(self.dilation),
                   self.groups, "fp32", limit, self.db)
        return y if self.bias is None else y + self.bias.view(1, -1, 1, 1)

    def forward(self, input: Tensor) -> Tensor:
        """Convolution (and bias) through convtune, and so are the gradients."""
        try:
            return self._forward(input)
        except ValueError as exc:
            if isinstance(exc, RuntimeError):
                raise
            raise InputError(str(exc)) from None

    def _forward(self, input: Tensor) -> Tensor:
        if isinstance(input, torch.fx.Proxy):
            return self._symbolic(input)  # type: ignore[no-any-return]
        if input.dim() == 3:  # unbatched (c, h, w), which nn.Conv2d takes too
            return self._forward(input.unsqueeze(0)).squeeze(0)
        w, bias = self.weight, self.bias
        kind = input.device.type  # autocast knows no meta device: it raises for one
        if kind in ("cpu", "cuda") and torch.is_autocast_enabled(kind):
            # As autocast runs F.conv2d: in its lower precision (float16 or bfloat16).
            # Autocast leaves float64 alone (and so does it here: a float64 model stays exact).
            dtype = torch.get_autocast_dtype(kind)
            input, w = _autocast(input, dtype), _autocast(w, dtype)
            bias = None if bias is None else _autocast(bias, dtype)
        if (input.numel() == 0 or w.numel() == 0 or torch._C._are_functorch_transforms_active()
                or forward_ad._current_level >= 0):
            # Nothing to tune in an empty batch (or channels); torch.func's transforms (vmap,
            # grad, jvp) and forward-mode AD's dual tensors need an operator they can
            # transform or carry tangents through, which ours is not: PyTorch's own (a dual
            # level's Python global is read here, as asking each input for a tangent costs
            # more).
            return self._conv_forward(input, w, bias)
        x, padding = self._padded(input)
        math = _math(x)
        traced = _traced(x, w)
        if traced or (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)):
            limit = -1 if self.workspace_limit is None else self.workspace_limit
            # The eager path takes the module's tuples as they are: the operator's schema
            # wants lists, and converting them on every call cost a few microseconds (issue 9).
            geometry = (self.stride, padding, self.dilation, self.groups, math, limit, self.db)
            if traced:
                y = conv2d(x, w, *[list(g) for g in geometry[:3]], *geometry[3:])
            else:
                y = EagerConv2d.apply(x, w, geometry)
        else:  # inference: no graph to record, so straight to the kept call (tuner.calls)
            try:
                y = execute(x, w, None, "forward",
                            (self.stride, padding, self.dilation, self.groups), None,
                            self.workspace_limit, None, self.db, math, None, False)[1]
            except NoUsableAlgorithm:
                y = fallback(x, w, self.stride, padding, self.dilation, self.groups)
        if bias is not None:
            y = y + bias.view(1, -1, 1, 1)
        # nn.Conv2d answers channels_last (input or weight) with channels_last; ours compute
        # NCHW. With a padding mode other than zeros it convolves the padded copy F.pad made
        # (and its layout decides: a review of the torch ecosystem, 2026-11-30).
        if _channels_last(input if self.padding_mode == "zeros" else x) or _channels_last(w):
            y = y.contiguous(memory_format=torch.channels_last)
        return y


M = TypeVar("M", bound=nn.Module)


def convert(model: M, *, workspace_limit: int | None = None, db: str | None = None) -> M:
    """Make every plain nn.Conv2d of `model` (itself included) a convtune Conv2d, in place;
    returns the model.

    Each module stays the same object with the same parameters, buffers, hooks and
    state_dict (optimizers stay valid; hook-based weight_norm and pruning go on working):
    only its class changes. Subclasses of nn.Conv2d (LazyConv2d, QAT or parametrized
    convolutions, a user's own forward) are left as they are: their forward is not
    nn.Conv2d's.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"convert takes a torch.nn.Module, got {type(model).__name__}")
    limit = validate_workspace_limit(workspace_limit)
    for module in model.modules():
        if type(module) is nn.Conv2d:
            # Why not a new module with the old parameters: that dropped hooks and buffers,
            # and failed on a weight that a hook computes (a review of 2026-11-30).
            module.__class__ = Conv2d
            cast(Conv2d, module)._use(limit, db)
    return model


__all__ = ["Conv2d", "InputError", "conv2d", "conv2d_backward_data", "conv2d_backward_filter",
           "convert"]
