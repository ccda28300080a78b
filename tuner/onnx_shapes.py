"""Convolution problems from an ONNX model's Conv nodes at a chosen batch size.

The batch dimension of every graph input is set to the batch size, shapes are inferred with
`onnx.shape_inference.infer_shapes`, and each 2-D `Conv` becomes a ConvProblem from its
input shape, its weight shape and its attributes (pads, strides, dilations, group,
auto_pad). A node that has no ConvProblem is skipped with the reason, never guessed at:
asymmetric padding (ONNX pads are [top, left, bottom, right]; ours is symmetric), a
SAME_* auto_pad that pads unevenly, 1-D/3-D convolutions, unknown shapes, other dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms.problem import ConvProblem

#: How many skipped nodes' reasons the error for a model with nothing to tune names (the
#: error is one line; a model of a hundred unusable Convs would make it unreadable).
SKIPS_SHOWN = 3

#: ONNX TensorProto element types we have problems for.
_DTYPES = {1: "float32", 10: "float16", 11: "float64"}


@dataclass(frozen=True)
class OnnxConv:
    """One Conv node of a model: its name and problem, or the reason it was skipped."""

    name: str
    problem: ConvProblem | None
    skipped: str = ""


def _import_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise ValueError(
            "reading ONNX models needs the onnx package (the [onnx] extra): pip install onnx"
        ) from None
    return onnx


def _shape(value_info: Any) -> tuple[list[int | None], int]:
    tensor = value_info.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    return dims, tensor.elem_type


def _same_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """(before, after) padding of auto_pad SAME_*: output = ceil(size / stride)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _conv(node: Any, shapes: dict[str, tuple[list[int | None], int]],
          weights: dict[str, list[int]]) -> ConvProblem | str:
    """The node's problem, or why there is none."""
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.input[0] not in shapes:
        return "input shape unknown after shape inference"
    x, elem = shapes[node.input[0]]
    if len(x) != 4:
        return f"{len(x) - 2}-D convolution (only 2-D is supported)"
    if any(d is None for d in x):
        return f"input shape {x} is not fully known"
    dtype = _DTYPES.get(elem)
    if dtype is None:
        return f"unsupported element type {elem}"
    w = weights.get(node.input[1]) or shapes.get(node.input[1], ([], 0))[0]
    if len(w) != 4 or any(d is None for d in w):
        return f"weight shape {w} is not a known 4-D shape"
    n, c, h, width = (int(d) for d in x)  # type: ignore[arg-type]
    k, cg, r, s = (int(d) for d in w)  # type: ignore[arg-type]
    kernel = [int(v) for v in attrs.get("kernel_shape", [r, s])]
    if kernel != [r, s]:
        return f"kernel_shape {kernel} disagrees with the weight shape {w}"
    strides = [int(v) for v in attrs.get("strides", [1, 1])]
    dilations = [int(v) for v in attrs.get("dilations", [1, 1])]
    group = int(attrs.get("group", 1))
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads_h = _same_pads(h, r, strides[0], dilations[0])
        pads_w = _same_pads(width, s, strides[1], dilations[1])
        pads = [pads_h[0], pads_w[0], pads_h[1], pads_w[1]]
    elif auto_pad == "VALID":
        pads = [0, 0, 0, 0]
    elif auto_pad == "NOTSET":
        pads = [int(v) for v in attrs.get("pads", [0, 0, 0, 0])]
    else:
        return f"unknown auto_pad {auto_pad!r}"
    if pads[0] != pads[2] or pads[1] != pads[3]:
        return (
            f"asymmetric padding {pads} ([top, left, bottom, right]; "
            f"auto_pad={auto_pad}) has no symmetric-pad problem"
        )
    if cg * group != c:
        return f"weight has {cg} channels per group x group={group}, input has c={c}"
    try:
        return ConvProblem(
            n=n, c=c, h=h, w=width, k=k, r=r, s=s, pad=(pads[0], pads[1]),
            stride=(strides[0], strides[1]), dilation=(dilations[0], dilations[1]),
            groups=group, dtype=dtype,
        )
    except ValueError as exc:
        return str(exc)


def onnx_convs(path: str | Path, batch: int) -> list[OnnxConv]:
    """Every Conv node of the model at `path`, in graph order, at batch size `batch`."""
    onnx = _import_onnx()
    if batch < 1:
        raise ValueError(f"batch must be positive, got {batch}")
    try:
        model = onnx.load(str(path))
    except FileNotFoundError:
        raise ValueError(f"no such ONNX file: {path}") from None
    except Exception as exc:
        raise ValueError(f"cannot read ONNX model {path}: {exc}") from None
    graph = model.graph
    initializers = {t.name: list(t.dims) for t in graph.initializer}
    for value in graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        if len(dims) >= 1:
            dims[0].Clear()
            dims[0].dim_value = batch
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:
        raise ValueError(f"shape inference failed for {path}: {exc}") from None
    g = inferred.graph
    shapes = {v.name: _shape(v) for v in (*g.input, *g.value_info, *g.output)}
    out = []
    for i, node in enumerate(g.node):
        if node.op_type != "Conv":
            continue
        name = node.name or f"conv{i}"
        found = _conv(node, shapes, initializers)
        if isinstance(found, ConvProblem):
            out.append(OnnxConv(name, found))
        else:
            out.append(OnnxConv(name, None, found))
    return out


def onnx_problems(path: str | Path, batch: int) -> tuple[list[tuple[str, ConvProblem]], list[str]]:
    """The distinct problems of a model's Conv nodes (first node's name for each), and a
    warning per node that was skipped; ValueError when the model has no usable Conv."""
    convs = onnx_convs(path, batch)
    seen: set[ConvProblem] = set()
    problems, warnings = [], []
    for conv in convs:
        if conv.problem is None:
            warnings.append(f"skipping Conv node {conv.name!r}: {conv.skipped}")
        elif conv.problem not in seen:
            seen.add(conv.problem)
            problems.append((conv.name, conv.problem))
    if not problems:
        # The error is all the caller shows (its warnings are dropped), so it carries the
        # reasons: "(1 skipped)" alone left the user to guess what was wrong with the model.
        detail = ""
        if convs:
            reasons = [f"{c.name!r}: {' '.join(c.skipped.split())}" for c in convs]
            shown = "; ".join(reasons[:SKIPS_SHOWN])
            more = f"; {len(reasons) - SKIPS_SHOWN} more" if len(reasons) > SKIPS_SHOWN else ""
            detail = f" ({len(convs)} skipped: {shown}{more})"
        raise ValueError(f"{path} has no 2-D Conv node convtune can tune{detail}")
    return problems, warnings
