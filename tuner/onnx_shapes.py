"""Convolution problems from an ONNX model's Conv nodes at a chosen batch size.

The batch dimension of every data input (rank 2 or more, neither an initializer nor a
convolution's weight or bias) is set to the batch size, the shapes the file recorded at its
export's batch are forgotten, and shapes are inferred again (`infer_shapes` with data
propagation, so a Reshape computed from the input's shape resolves); model-local functions
are inlined first, and Conv nodes inside If/Loop/Scan bodies count too. Each 2-D `Conv`
becomes a ConvProblem from its input shape, its weight shape and its attributes (pads,
strides, dilations, group, auto_pad). A node that has no ConvProblem is skipped with the
reason, never guessed at: asymmetric padding (ONNX pads are [top, left, bottom, right]; ours
is symmetric), a SAME_* auto_pad that pads unevenly, 1-D/3-D convolutions, unknown shapes,
other dtypes, malformed attributes, a batch the model fixes (a Reshape to a constant shape),
and the convolutions we do not tune (ConvTranspose, QLinearConv, ConvInteger). Weights are
never read (external data stays on disk): their shapes are all it takes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from algorithms.problem import ConvProblem

#: How many skipped nodes' reasons the error for a model with nothing to tune names (the
#: error is one line; a model of a hundred unusable Convs would make it unreadable).
SKIPS_SHOWN = 3

#: ONNX TensorProto element types we have problems for.
_DTYPES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}

#: The domains of ONNX's own operators (a custom domain's "Conv" is another operator).
_ONNX_DOMAINS = ("", "ai.onnx")

#: Convolutions convtune does not tune: named as skipped, never passed over in silence.
_NOT_TUNED = {
    "ConvTranspose": "ConvTranspose is not tuned (it is a backward-data problem, which "
                     "--onnx does not derive)",
    "QLinearConv": "QLinearConv is a quantized (integer) convolution; convtune tunes "
                   "floating-point ones",
    "ConvInteger": "ConvInteger is an integer convolution; convtune tunes floating-point ones",
}


@dataclass(frozen=True)
class OnnxConv:
    """One Conv node of a model: its name and problem, or the reason it was skipped."""

    name: str
    problem: ConvProblem | None
    skipped: str = ""
    op: str = "Conv"  # the operator: Conv, or a convolution skipped as not tuned


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


def _type_name(elem: int) -> str:
    from onnx import TensorProto

    try:
        return str(TensorProto.DataType.Name(elem))
    except ValueError:
        return str(elem)


def _same_pads(size: int, kernel: int, stride: int, dilation: int,
               lower: bool) -> tuple[int, int]:
    """(before, after) padding of auto_pad SAME_UPPER (`lower`: SAME_LOWER, the odd pixel
    before): output = ceil(size / stride)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    small, large = total // 2, total - total // 2
    return (large, small) if lower else (small, large)


def _ints(attrs: dict[str, Any], name: str, count: int, default: int) -> list[int] | str:
    """Attribute `name` as `count` ints (default: `default` each), or why it is not."""
    value = attrs.get(name, [default] * count)
    if (not isinstance(value, (list, tuple)) or len(value) != count
            or not all(isinstance(v, int) for v in value)):
        return f"attribute {name}={value!r} is not {count} ints"
    return [int(v) for v in value]


def _conv(node: Any, shapes: dict[str, tuple[list[int | None], int]],
          weights: dict[str, list[int]]) -> ConvProblem | str:
    """The node's problem, or why there is none."""
    from onnx import helper

    if node.domain not in _ONNX_DOMAINS:
        return f"an operator 'Conv' of domain {node.domain!r}, not ONNX's Conv"
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.input[0] not in shapes:
        return "input shape unknown after shape inference"
    x, elem = shapes[node.input[0]]
    if not x:
        return "input rank unknown after shape inference"
    if len(x) != 4:
        return f"{len(x) - 2}-D convolution (only 2-D is supported)"
    if any(d is None for d in x):
        return f"input shape {x} is not fully known"
    dtype = _DTYPES.get(elem)
    if dtype is None:
        return f"unsupported element type {_type_name(elem)}"
    w = weights.get(node.input[1]) or shapes.get(node.input[1], ([], 0))[0]
    if len(w) != 4 or any(d is None for d in w):
        return f"weight shape {w} is not a known 4-D shape"
    n, c, h, width = (int(d) for d in x)  # type: ignore[arg-type]
    k, cg, r, s = (int(d) for d in w)  # type: ignore[arg-type]
    kernel = _ints(attrs, "kernel_shape", 2, 0) if "kernel_shape" in attrs else [r, s]
    strides = _ints(attrs, "strides", 2, 1)
    dilations = _ints(attrs, "dilations", 2, 1)
    for found in (kernel, strides, dilations):
        if isinstance(found, str):
            return found
    if kernel != [r, s]:
        return f"kernel_shape {kernel} disagrees with the weight shape {w}"
    assert isinstance(strides, list) and isinstance(dilations, list)  # str returned above
    group = attrs.get("group", 1)
    if not isinstance(group, int):
        return f"attribute group={group!r} is not an int"
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    # An empty auto_pad is NOTSET to ONNX's checker, shape inference and reference runtime.
    auto_pad = (auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)) or "NOTSET"
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        lower = auto_pad == "SAME_LOWER"
        pads_h = _same_pads(h, r, strides[0], dilations[0], lower)
        pads_w = _same_pads(width, s, strides[1], dilations[1], lower)
        pads: list[int] | str = [pads_h[0], pads_w[0], pads_h[1], pads_w[1]]
    elif auto_pad == "VALID":
        pads = [0, 0, 0, 0]
    elif auto_pad == "NOTSET":
        pads = _ints(attrs, "pads", 4, 0)
        if isinstance(pads, str):
            return pads
    else:
        return f"unknown auto_pad {auto_pad!r}"
    assert isinstance(pads, list)
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


def _subgraphs(node: Any) -> Iterator[tuple[str, Any]]:
    """(attribute name, graph) of each subgraph a node holds (If branches, Loop and Scan
    bodies)."""
    from onnx import AttributeProto

    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.name, attr.g
        elif attr.type == AttributeProto.GRAPHS:
            for sub in attr.graphs:
                yield attr.name, sub


def _graphs(graph: Any) -> Iterator[Any]:
    """`graph` and every subgraph below it."""
    yield graph
    for node in graph.node:
        for _name, sub in _subgraphs(node):
            yield from _graphs(sub)


def _nodes(graph: Any, shapes: dict[str, Any], weights: dict[str, list[int]],
           prefix: str = "") -> Iterator[tuple[str, Any, dict[str, Any], dict[str, list[int]]]]:
    """(name, node, shapes and weight shapes in its scope) of every node, subgraphs too."""
    shapes = {**shapes, **{v.name: _shape(v)
                           for v in (*graph.input, *graph.value_info, *graph.output)}}
    weights = {**weights, **{t.name: list(t.dims) for t in graph.initializer}}
    for i, node in enumerate(graph.node):
        name = prefix + (node.name or f"{node.op_type.lower()}{i}")
        yield name, node, shapes, weights
        for attr_name, sub in _subgraphs(node):
            yield from _nodes(sub, shapes, weights, f"{name}/{attr_name}/")


def _load(onnx: Any, path: str | Path) -> Any:
    """The model at `path`, weights left on disk, local functions inlined."""
    try:
        # Only shapes are needed: reading every weight made a model with more than 2 GB of
        # external data fail in shape inference ("Failed to serialize proto").
        model = onnx.load(str(path), load_external_data=False)
    except FileNotFoundError:
        raise ValueError(f"no such ONNX file: {path}") from None
    except Exception as exc:
        raise ValueError(f"cannot read ONNX model {path}: {exc}") from None
    if model.ir_version == 0 and not model.graph.node:  # an empty file parses as a model
        raise ValueError(f"{path} is not an ONNX model (no IR version, no nodes)")
    if model.functions:
        try:
            from onnx import inliner

            model = inliner.inline_local_functions(model)
        except Exception as exc:
            raise ValueError(f"cannot inline the local functions of {path}: {exc}") from None
    return model


def _batch_dims(graph: Any) -> list[Any]:
    """The batch dimension of each data input of `graph` (rank 2 or more, not a weight,
    its first dimension symbolic or the export's batch); the shapes recorded for its other
    tensors are dropped (an export at batch 1 recorded every later tensor at batch 1, and
    inference keeps what is recorded)."""
    not_data = {t.name for t in graph.initializer}
    for sub in _graphs(graph):
        for node in sub.node:
            if node.op_type in ("Conv", *_NOT_TUNED):
                not_data.update(node.input[1:])  # weights and biases given as inputs
        del sub.value_info[:]
    for out in graph.output:
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    # Rank 1 and scalars have no batch (a per-channel scale, a shape tensor); a fixed first
    # dimension is a batch where it is the first data input's, the batch of the export.
    data = [value.type.tensor_type.shape.dim for value in graph.input
            if value.name not in not_data and len(value.type.tensor_type.shape.dim) >= 2]
    exported = next((shape[0].dim_value for shape in data if shape[0].HasField("dim_value")),
                    None)
    return [shape[0] for shape in data
            if not shape[0].HasField("dim_value") or shape[0].dim_value == exported]


def _inferred_convs(onnx: Any, model: Any, path: str | Path, dims: list[Any],
                    batch: int) -> list[OnnxConv]:
    """Every Conv-like node of `model` with its data inputs at batch size `batch`."""
    for dim in dims:
        dim.Clear()
        dim.dim_value = batch
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:
        raise ValueError(f"shape inference failed for {path}: {exc}") from None
    out = []
    for name, node, shapes, weights in _nodes(inferred.graph, {}, {}):
        if node.op_type in _NOT_TUNED and node.domain in _ONNX_DOMAINS:
            out.append(OnnxConv(name, None, _NOT_TUNED[node.op_type], node.op_type))
        elif node.op_type == "Conv":
            try:
                found = _conv(node, shapes, weights)
            except Exception as exc:  # a node ONNX's checker would refuse: skipped alone
                found = f"cannot read the node: {type(exc).__name__}: {exc}"
            if isinstance(found, ConvProblem):
                out.append(OnnxConv(name, found))
            else:
                out.append(OnnxConv(name, None, found))
    return out


def onnx_convs(path: str | Path, batch: int) -> list[OnnxConv]:
    """Every Conv node of the model at `path` (and each convolution it does not tune,
    skipped), in graph order, at batch size `batch`."""
    onnx = _import_onnx()
    if batch < 1:
        raise ValueError(f"batch must be positive, got {batch}")
    model = _load(onnx, path)
    dims = _batch_dims(model.graph)
    convs = _inferred_convs(onnx, model, path, dims, batch)
    if all(c.problem is None or c.problem.n == batch for c in convs):
        return convs
    # A Conv whose batch is not the inputs' either follows it another way (frames folded
    # into the batch) or is fixed by the model (a Reshape to a constant shape: such a model
    # does not run at this batch). One more inference, at another batch, tells which.
    again = _inferred_convs(onnx, model, path, dims, batch + 1)
    out = []
    for conv, other in zip(convs, again, strict=True):
        if (conv.problem is not None and conv.problem.n != batch and other.problem is not None
                and other.problem.n == conv.problem.n):
            conv = replace(conv, problem=None, skipped=(
                f"the model fixes its batch at {conv.problem.n} here (a Reshape to a constant "
                f"shape), so it does not run at batch {batch}: export it with a dynamic batch"))
        out.append(conv)
    return out


def onnx_problems(path: str | Path, batch: int) -> tuple[list[tuple[str, ConvProblem]], list[str]]:
    """The distinct problems of a model's Conv nodes (first node's name for each), and a
    warning per node that was skipped; ValueError when the model has no usable Conv."""
    convs = onnx_convs(path, batch)
    seen: set[ConvProblem] = set()
    problems, warnings = [], []
    for conv in convs:
        if conv.problem is None:
            warnings.append(f"skipping {conv.op} node {conv.name!r}: {conv.skipped}")
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
