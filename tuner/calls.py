"""How a call with arrays finds its plan: the operands checked, the problem read off their
shapes, and the plan kept per call (issue 9: a cached convolve() must cost microseconds).

`execute` serves convolve, run_convolution and the backward calls of tuner.api (and through
them the PyTorch module). A call's plan is kept under every argument and each operand's
kind, shape, dtype and place, which is all its checks depend on: a kept call skips them.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import numpy as np

from algorithms.problem import DTYPES, ConvProblem, as_int, pair
from algorithms.runtime import is_torch_type
from tuner.devices import get_runtime, parse_device
from tuner.plans import Plan, dtype_name, is_torch, refuse_overlap
from tuner.service import Service, opened_service, service


def _where(x: Any) -> str:
    """The canonical device an array lives on: "cpu" or "cuda:N"."""
    if isinstance(x, np.ndarray):
        return "cpu"
    if is_torch(x):  # torch's __dlpack_device__ is Python code: a few microseconds a call
        place = x.device
        if place.type in ("cpu", "cuda"):
            return "cpu" if place.type == "cpu" else f"cuda:{place.index or 0}"
        # torch's own DLPack error for these names neither the argument nor what we take.
        raise ValueError(f"torch tensors on device {place.type!r} are not supported; "
                         f"use cpu or cuda tensors")
    dlpack_device = getattr(x, "__dlpack_device__", None)
    if dlpack_device is not None:  # CuPy, PyTorch, JAX...: (device type, index)
        kind, index = (int(v) for v in dlpack_device())
        if kind == _DLPACK_CPU:
            return "cpu"
        if kind == _DLPACK_CUDA:
            return f"cuda:{index}"
        raise ValueError(f"arrays on DLPack device type {kind} are not supported")
    # hasattr is not enough: a property may raise (torch does when requires_grad is set).
    try:
        getattr(x, "__cuda_array_interface__")  # noqa: B009
    except AttributeError:
        return "cpu"
    except Exception:  # it is a GPU array, whatever it refuses
        pass
    device = getattr(x, "device", None)
    return f"cuda:{int(getattr(device, 'id', None) or getattr(device, 'index', None) or 0)}"


_DLPACK_CPU, _DLPACK_CUDA = 1, 2  # kDLCPU, kDLCUDA in DLPack's device-type enum


def _dtype_name(array: Any, what: str) -> str:
    name = dtype_name(array)
    if name not in DTYPES:
        raise ValueError(f"{what} has dtype {name or type(array).__name__!r}; "
                         f"expected one of {sorted(DTYPES)}")
    return name


def problem_for(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    *,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    dtype: str = "float32",
    math: str = "fp32",
    direction: str = "forward",
) -> ConvProblem:
    """The ConvProblem of x (n, c, h, w) and w (k, c/groups, r, s); ValueError if they clash."""
    x_sizes, w_sizes = shape_argument(x_shape, "x_shape"), shape_argument(w_shape, "w_shape")
    if len(x_sizes) != 4:
        raise ValueError(f"x must be 4-D (n, c, h, w), got shape {x_sizes}")
    if len(w_sizes) != 4:
        raise ValueError(f"w must be 4-D (k, c/groups, r, s), got shape {w_sizes}")
    n, c, h, w = x_sizes
    k, cg, r, s = w_sizes
    count = as_int(groups)
    if count is None or count < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    groups = count
    if cg * groups != c:
        raise ValueError(
            f"shape mismatch: x has c={c} channels but w has {cg} input channels per group "
            f"x groups={groups} = {cg * groups}"
        )
    try:
        return ConvProblem(
            n=n, c=c, h=h, w=w, k=k, r=r, s=s,
            pad=pair(padding, "padding"), stride=pair(stride, "stride"),
            dilation=pair(dilation, "dilation"), groups=groups, dtype=dtype, math=math,
            direction=direction,
        )
    except ValueError as exc:  # ConvProblem's field is "pad"; this caller's argument not
        message = str(exc)
        if message.startswith("pad "):
            raise ValueError(f"padding {message[4:]}") from None
        raise


#: The geometry arguments of a call, in the order `_execute` receives them.
GEOMETRY = ("stride", "padding", "dilation", "groups")


def _kind(value: Any) -> Any:
    """What a geometry value's key holds beside it: its type, and a pair's element types.
    True == 1 and 1.0 == 1 (equal keys), but only 1 is a valid stride; a pair's elements
    compare alike, so (1.0, 1.0) found the kept plan of (1, 1), unchecked (review of
    2026-11-30). Tuples of another length are never valid, so never equal a kept key."""
    kind = type(value)
    return (type(value[0]), type(value[1])) if kind is tuple and len(value) == 2 else kind


def _typed(geometry: tuple[Any, ...]) -> tuple[Any, ...]:
    """The geometry with each value's `_kind`."""
    stride, padding, dilation, groups = geometry
    return (stride, _kind(stride), padding, _kind(padding), dilation, _kind(dilation), groups,
            type(groups))


def shape_argument(value: Any, name: str) -> tuple[int, ...]:
    """A backward call's x or w shape as a tuple of ints; ValueError naming `name` for
    anything else (None, a number, floats)."""
    try:
        sizes = tuple(as_int(v) for v in value)
    except TypeError:
        raise ValueError(f"{name} must be a shape (a sequence of ints), got {value!r}") from None
    if any(v is None for v in sizes):
        raise ValueError(f"{name} must hold ints, got {tuple(value)}")
    return sizes  # type: ignore[return-value]


# Remembered: building and validating a ConvProblem was the largest share of a cached
# convolve() call in a CPU profile.
@functools.lru_cache(maxsize=1024)
def _problem(shapes: tuple[tuple[int, ...], ...], typed: tuple[Any, ...],
             dtype: str, math: str, direction: str) -> ConvProblem:
    return problem_for(*shapes, **dict(zip(GEOMETRY, typed[::2], strict=True)), dtype=dtype,
                       math=math, direction=direction)


def _all_finite(array: Any) -> bool:
    """Whether every element is finite (NumPy, CuPy or torch; waits for a GPU's answer)."""
    if isinstance(array, np.ndarray):
        return bool(np.isfinite(array).all())
    if is_torch(array):
        import torch

        return bool(torch.isfinite(array).all().item())
    import cupy

    return bool(cupy.isfinite(cupy.asarray(array)).all().item())


def _nowhere(array: Any) -> None:
    """A NumPy array's place in a call's key: the host, said by its type already."""
    return None


def _place_of(kind: Any) -> Callable[[Any], Any]:
    """How `_call_key` finds where an array of type `kind` lives, cheaply and hashably:
    nothing for NumPy, a torch tensor's device object (C's attrgetter), else `_where`'s
    string."""
    if issubclass(kind, np.ndarray):
        return _nowhere
    if is_torch_type(kind):
        return attrgetter("device")
    return _where


#: `_place_of`, kept per type: every cached call asks twice.
_placer: Callable[[Any], Callable[[Any], Any]] = functools.cache(_place_of)


def _call_key(a: Any, b: Any, given_shape: tuple[int, ...] | None, direction: str,
              geometry: tuple[Any, ...], device: str | None, workspace_limit: int | None,
              algorithm: str | None, math: str) -> tuple[Any, ...] | None:
    """What a call's plan is kept under: every argument, and each operand's kind, shape,
    dtype and place. Whether a call is valid depends on nothing else, so a call whose key
    found a plan skips the checks; None where an operand is not an array (the checks then
    name what is wrong). The key may still be unhashable (a list stride): `execute` finds
    that out by looking it up, which hashes it once."""
    stride, padding, dilation, groups = geometry  # _typed's, inline: a call less per call
    try:
        kind_a, kind_b = type(a), type(b)
        return (direction, kind_a, a.shape, a.dtype, _placer(kind_a)(a), kind_b, b.shape,
                b.dtype, _placer(kind_b)(b), given_shape, stride, _kind(stride), padding,
                _kind(padding), dilation, _kind(dilation), groups, type(groups), device, math,
                workspace_limit, type(workspace_limit), algorithm)
    except (AttributeError, ValueError):
        return None


def execute(
    a: Any, b: Any, given_shape: tuple[int, ...] | None, direction: str,
    geometry: tuple[Any, ...], device: str | None, workspace_limit: int | None,
    algorithm: str | None, db: str | None, math: str, out: Any, timed: bool,
    check_finite: bool = False,
) -> tuple[Plan, Any, float | None]:
    """Run `direction` on (a, b): (the plan, the result, its milliseconds when `timed`);
    `given_shape` is the x (backward_data) or w (backward_filter) shape the operands do
    not show."""
    key = _call_key(a, b, given_shape, direction, geometry, device, workspace_limit,
                    algorithm, math)
    # None until this process opened db's store: no call can be kept there yet, and a call
    # its checks refuse must not create the database.
    found = opened_service(db)
    chosen = None
    if key is not None and found is not None:
        try:
            chosen = found.call_plan(key)
        except TypeError:  # unhashable: nothing to keep the plan under
            key = None
    if chosen is None:
        found, token, chosen = _checked_plan(db, a, b, given_shape, direction, geometry,
                                             device, workspace_limit, algorithm, math,
                                             check_finite, out)
        if key is not None:
            with contextlib.suppress(TypeError):  # unhashable, as above
                found.remember_call(key, token, chosen)
    elif check_finite:
        _refuse_nonfinite(a, b, direction)
    out = chosen.output(a, out)
    if timed:
        result, elapsed = chosen.timed(a, b, out)
    else:
        result, elapsed = chosen.enqueue(a, b, out), None
    return chosen, result if out is None else out, elapsed


def _names(direction: str) -> tuple[str, str]:
    return {"backward_data": ("dy", "w"), "backward_filter": ("x", "dy")}.get(
        direction, ("x", "w"))


def _refuse_nonfinite(a: Any, b: Any, direction: str) -> None:
    for name, array in zip(_names(direction), (a, b), strict=True):
        if not _all_finite(array):
            raise ValueError(f"{name} contains NaN or infinity (check_finite=True)")


def _checked_plan(
    db: str | None, a: Any, b: Any, given_shape: tuple[int, ...] | None, direction: str,
    geometry: tuple[Any, ...], device: str | None, workspace_limit: int | None,
    algorithm: str | None, math: str, check_finite: bool, out: Any = None,
) -> tuple[Service, int, Plan]:
    """The plan for a call seen first: its operands and `out` checked (place, dtype, shape,
    finiteness when asked), then its problem planned (tuned first if new, unless the
    caller's stream is capturing a CUDA graph). With db's Service and its answer token
    from before the planning (Service.remember_call)."""
    names = _names(direction)
    lives_on = _where(a)
    if _where(b) != lives_on:
        raise ValueError(f"{names[0]} is on {lives_on} but {names[1]} is on {_where(b)}")
    device = parse_device(device) if device is not None else lives_on
    if device != lives_on:
        raise ValueError(f"device={device!r} but the inputs live on {lives_on}")
    dtype = _dtype_name(a, names[0])
    if _dtype_name(b, names[1]) != dtype:
        raise ValueError(f"{names[0]} is {dtype} but {names[1]} is "
                         f"{_dtype_name(b, names[1])}: pass the same dtype")
    if check_finite:
        _refuse_nonfinite(a, b, direction)
    if direction == "backward_data":
        shapes = (tuple(given_shape or ()), tuple(b.shape))
    elif direction == "backward_filter":
        shapes = (tuple(a.shape), tuple(given_shape or ()))
    else:
        shapes = (tuple(a.shape), tuple(b.shape))
    try:
        problem = _problem(shapes, _typed(geometry), dtype, math, direction)
    except TypeError:  # a list stride or padding: nothing to remember it by
        problem = problem_for(*shapes, **dict(zip(GEOMETRY, geometry, strict=True)),
                              dtype=dtype, math=math, direction=direction)
    # Before planning, which may tune and store: a call refused after would have stored.
    _check_shapes(problem, (a, b), names)
    if out is not None:
        _check_out(out, (a, b), names, problem.operand_shapes[2], dtype, lives_on)
    found = service(db)
    token = found.answers.token()
    return found, token, found.plan(problem, device, workspace_limit, algorithm=algorithm,
                                    measure=not _capturing(a, device))


def _check_shapes(problem: ConvProblem, operands: tuple[Any, Any],
                  names: tuple[str, str]) -> None:
    """ValueError unless each operand has the shape `problem` gives it (a backward call's
    dy against the x or w shape it was given)."""
    for name, array, shape in zip(names, operands, problem.operand_shapes, strict=False):
        if tuple(array.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(array.shape)}; this call needs {shape}")


def _check_out(out: Any, operands: tuple[Any, Any], names: tuple[str, str],
               shape: tuple[int, ...], dtype: str, lives_on: str) -> None:
    """ValueError naming what is wrong with a caller's `out`: not an array we write in
    place, its place, dtype, shape or layout, or memory it shares with an operand."""
    torch_out = is_torch(out)
    flags = None if torch_out else getattr(out, "flags", None)
    if (flags is None and not torch_out) or not hasattr(out, "dtype"):
        raise ValueError(f"out must be a NumPy, CuPy or torch array, got {type(out).__name__}")
    if _where(out) != lives_on:
        raise ValueError(f"out is on {_where(out)} but {names[0]} is on {lives_on}")
    if dtype_name(out) != dtype:
        raise ValueError(f"out is {dtype_name(out)}; this call needs {dtype}")
    if tuple(out.shape) != shape:
        raise ValueError(f"out has shape {tuple(out.shape)}; this call needs {shape}")
    if not (out.is_contiguous() if flags is None else flags.c_contiguous):
        raise ValueError("out must be C-contiguous")
    if not getattr(flags, "writeable", True):  # NumPy's; CuPy and torch arrays are writeable
        raise ValueError("out is read-only; pass a writeable array")
    refuse_overlap(out, zip(names, operands, strict=True))


def _capturing(array: Any, device: str) -> bool:
    """Whether the caller's stream (torch's for a tensor) is capturing a CUDA graph, where a
    call seen first may plan but not tune: timing synchronises, which ends a capture."""
    if device == "cpu":
        return False
    runtime = get_runtime(device)
    with runtime.caller_stream(array):
        return runtime.capturing(runtime.lane())
