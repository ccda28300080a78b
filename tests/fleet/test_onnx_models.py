"""ONNX models as users export them: the faults a review of `--onnx` found on 2026-11-30,
each checked against the problem the node really computes (shapes from ONNX's own shape
inference or the model's construction)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from algorithms.problem import ConvProblem
from tuner.onnx_shapes import onnx_convs, onnx_problems

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _weights(**shapes: tuple[int, ...]) -> list[Any]:
    return [numpy_helper.from_array(np.ones(shape, np.float32), name)
            for name, shape in shapes.items()]


def _ints(name: str, values: list[int]) -> Any:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _save(path: Path, nodes: list[Any], inputs: list[Any], initializers: list[Any],
          functions: list[Any] | None = None, elem: int = TensorProto.FLOAT,
          outputs: list[Any] | None = None, domains: tuple[str, ...] = ()) -> Path:
    graph = helper.make_graph(
        nodes, "g", inputs,
        outputs or [helper.make_tensor_value_info(nodes[-1].output[0], elem, None)],
        initializers)
    opsets = [helper.make_opsetid(domain, 1)
              for domain in (*domains, *(["local"] if functions else []))]
    opsets.insert(0, helper.make_opsetid("", 17))
    onnx.save(helper.make_model(graph, opset_imports=opsets, functions=functions or []),
              str(path))
    return path


def _x(shape: list[Any], elem: int = TensorProto.FLOAT, name: str = "x") -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def _conv(x: str, w: str, y: str, name: str, **attrs: Any) -> Any:
    return helper.make_node("Conv", [x, w], [y], name=name, **attrs)


def _by_name(path: Path, batch: int) -> dict[str, ConvProblem | str]:
    return {c.name: c.problem or c.skipped for c in onnx_convs(path, batch)}


# Bug: a model exported at batch 1 records every tensor's shape at batch 1 (torch's exporter,
# onnxsim, a saved shape inference); only the inputs were re-batched, so every later Conv
# kept n=1 under --batch 4, without a word.
def test_shapes_recorded_at_the_export_s_batch_are_inferred_again(tmp_path: Path) -> None:
    nodes = [_conv("x", "w1", "a", "c0", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["b"]),
             _conv("b", "w2", "y", "c1")]
    graph = helper.make_graph(nodes, "g", [_x([1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 6, 6])],
                              _weights(w1=(4, 3, 3, 3), w2=(5, 4, 3, 3)))
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph))
    assert model.graph.value_info  # a and b recorded at batch 1
    onnx.save(model, str(tmp_path / "m.onnx"))
    found = _by_name(tmp_path / "m.onnx", 4)
    assert found == {"c0": ConvProblem(n=4, c=3, h=8, w=8, k=4, r=3, s=3, pad=1),
                     "c1": ConvProblem(n=4, c=4, h=8, w=8, k=5, r=3, s=3)}


# Bug: a Reshape to a constant shape fixes the batch (here at 1); the Conv after it was
# tuned at n=1 under --batch 2, listed as batch 2. Frames folded into the batch (n = 2 x
# batch) follow the batch and are kept.
def test_a_batch_the_model_fixes_is_skipped_and_a_folded_one_kept(tmp_path: Path) -> None:
    fixed = _save(tmp_path / "fixed.onnx", [
        _conv("x", "w1", "a", "c0"),
        helper.make_node("Reshape", ["a", "shape"], ["b"]),
        _conv("b", "w2", "y", "c1"),
    ], [_x(["N", 3, 8, 8])], [*_weights(w1=(4, 3, 3, 3), w2=(2, 4, 3, 3)),
                              _ints("shape", [1, 4, 6, 6])])
    found = _by_name(fixed, 2)
    assert found["c0"] == ConvProblem(n=2, c=3, h=8, w=8, k=4, r=3, s=3)
    assert "fixes its batch at 1" in str(found["c1"]) and "batch 2" in str(found["c1"])
    assert _by_name(fixed, 1)["c1"] == ConvProblem(n=1, c=4, h=6, w=6, k=2, r=3, s=3)
    folded = _save(tmp_path / "folded.onnx", [
        helper.make_node("Reshape", ["x", "shape"], ["b"]),
        _conv("b", "w", "y", "frames"),
    ], [_x(["N", 2, 3, 8, 8])], [*_weights(w=(4, 3, 3, 3)), _ints("shape", [-1, 3, 8, 8])])
    assert _by_name(folded, 3) == {"frames": ConvProblem(n=6, c=3, h=8, w=8, k=4, r=3, s=3)}


# Bug: every non-initializer input's first dimension was set to the batch: a weight fed as
# an input lost its output channels (k4 became k2) and a per-channel scale of shape [3]
# stopped broadcasting (the Conv was skipped as "input shape unknown").
def test_only_data_inputs_are_batched(tmp_path: Path) -> None:
    path = _save(tmp_path / "m.onnx", [
        helper.make_node("Mul", ["x", "scale"], ["a"]),
        _conv("a", "w", "y", "c0"),
    ], [_x([1, 3, 8, 8]), _x([4, 3, 3, 3], name="w"), _x([3, 1, 1], name="scale")], [])
    assert _by_name(path, 2) == {"c0": ConvProblem(n=2, c=3, h=8, w=8, k=4, r=3, s=3)}


# Bug: shape inference ran without data propagation: a Conv after a Reshape whose shape is
# computed from the input (Shape -> Gather -> Concat, as exporters write view/flatten with a
# dynamic batch) was skipped as "not fully known".
def test_a_shape_computed_from_the_input_resolves(tmp_path: Path) -> None:
    path = _save(tmp_path / "m.onnx", [
        _conv("x", "w1", "a", "c0", pads=[1, 1, 1, 1]),
        helper.make_node("Shape", ["a"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "rest"], ["shape"], axis=0),
        helper.make_node("Reshape", ["a", "shape"], ["b"]),
        helper.make_node("ReduceSum", ["b", "axis"], ["c"], keepdims=0),
        _conv("c", "w2", "y", "c1", pads=[1, 1, 1, 1]),
    ], [_x(["N", 3, 8, 8])], [*_weights(w1=(8, 3, 3, 3), w2=(4, 2, 3, 3)), _ints("i0", [0]),
                              _ints("rest", [2, 4, 8, 8]), _ints("axis", [2])])
    assert _by_name(path, 2)["c1"] == ConvProblem(n=2, c=2, h=8, w=8, k=4, r=3, s=3, pad=1)


# Bug: Conv nodes in If/Loop bodies and in model-local functions were passed over in
# silence (a model with only those "has no 2-D Conv node", no reason given).
def test_convs_in_subgraphs_and_local_functions_count(tmp_path: Path) -> None:
    then = helper.make_graph([_conv("x", "w", "t", "c_then")], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    branchy = _save(tmp_path / "if.onnx", [
        helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)],
        [_x([1, 3, 8, 8]), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        _weights(w=(4, 3, 3, 3)))
    expected = ConvProblem(n=2, c=3, h=8, w=8, k=4, r=3, s=3)
    assert onnx_problems(branchy, 2)[0] == [("if0/then_branch/c_then", expected)]
    block = helper.make_function("local", "Block", ["a", "b"], ["c"],
                                 [_conv("a", "b", "c", "c_fn")], [helper.make_opsetid("", 17)])
    functional = _save(tmp_path / "fn.onnx", [
        helper.make_node("Block", ["x", "w"], ["y"], domain="local", name="blk")],
        [_x([1, 3, 8, 8])], _weights(w=(4, 3, 3, 3)), functions=[block])
    assert [p for _, p in onnx_problems(functional, 2)[0]] == [expected]


# Bug: ConvTranspose, QLinearConv and ConvInteger were passed over without a word, a custom
# domain's "Conv" was tuned as ONNX's, bfloat16 models were refused ("unsupported element
# type 16"), malformed attributes ended the whole command (a TypeError traceback, or "list
# index out of range" naming no node), auto_pad "" (NOTSET to ONNX) was "unknown", an
# uneven SAME_LOWER named SAME_UPPER's pads and an input of unknown rank was "-2-D".
def test_every_convolution_is_tuned_or_named_with_its_reason(tmp_path: Path) -> None:
    w = _weights(w=(4, 3, 3, 3))
    path = _save(tmp_path / "m.onnx", [
        helper.make_node("ConvTranspose", ["x", "w"], ["t"], name="up"),
        helper.make_node("Conv", ["x", "w"], ["c"], name="custom", domain="com.example"),
        _conv("x", "w", "s1", "int_strides", strides=2),
        _conv("x", "w", "s2", "short_pads", pads=[1, 1]),
        _conv("x", "w", "e", "empty_auto_pad", auto_pad="", pads=[1, 1, 1, 1]),
        _conv("x", "w2", "l", "same_lower", auto_pad="SAME_LOWER"),
        _conv("unranked", "w", "u", "unranked"),
    ], [_x([1, 3, 8, 8]), helper.make_tensor_value_info("unranked", TensorProto.FLOAT, None)],
        [*w, *_weights(w2=(4, 3, 2, 2))],
        outputs=[helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
                 for name in ("t", "s1", "s2", "e", "l", "u")], domains=("com.example",))
    found = _by_name(path, 2)
    assert "ConvTranspose is not tuned" in str(found["up"])
    assert "domain 'com.example'" in str(found["custom"])
    assert found["int_strides"] == "attribute strides=2 is not 2 ints"
    assert found["short_pads"] == "attribute pads=[1, 1] is not 4 ints"
    assert found["empty_auto_pad"] == ConvProblem(n=2, c=3, h=8, w=8, k=4, r=3, s=3, pad=1)
    assert "asymmetric padding [1, 1, 0, 0]" in str(found["same_lower"])
    assert found["unranked"] == "input rank unknown after shape inference"
    warnings = onnx_problems(path, 2)[1]
    assert any(line.startswith("skipping ConvTranspose node 'up'") for line in warnings)
    half = _save(tmp_path / "bf16.onnx", [_conv("x", "w", "y", "c0")],
                 [_x([1, 3, 8, 8], TensorProto.BFLOAT16)],
                 [helper.make_tensor("w", TensorProto.BFLOAT16, (4, 3, 3, 3),
                                     np.ones(108, np.uint16).tolist())],
                 elem=TensorProto.BFLOAT16)
    assert _by_name(half, 2) == {"c0": ConvProblem(n=2, c=3, h=8, w=8, k=4, r=3, s=3,
                                                   dtype="bfloat16")}
    ints = _save(tmp_path / "int.onnx", [_conv("x", "w", "y", "c0")],
                 [_x([1, 3, 8, 8], TensorProto.INT32)],
                 [numpy_helper.from_array(np.ones((4, 3, 3, 3), np.int32), "w")],
                 elem=TensorProto.INT32)
    assert _by_name(ints, 2) == {"c0": "unsupported element type INT32"}


# Bug: every weight was read, external data included: a model past 2 GB failed in shape
# inference ("Failed to serialize proto"), and an empty file was a model "with no Conv".
def test_weights_are_never_read_and_an_empty_file_is_not_a_model(tmp_path: Path) -> None:
    weight = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 3, 3, 3])
    weight.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", "not_here.bin"), ("offset", "0"), ("length", "432")):
        weight.external_data.add(key=key, value=value)
    path = _save(tmp_path / "m.onnx", [_conv("x", "w", "y", "c0")], [_x([1, 3, 8, 8])],
                 [weight])
    assert _by_name(path, 2) == {"c0": ConvProblem(n=2, c=3, h=8, w=8, k=4, r=3, s=3)}
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(ValueError, match="is not an ONNX model"):
        onnx_problems(tmp_path / "empty.onnx", 1)


def _inferred_and_torch(path: Path, problem: ConvProblem, out: str) -> tuple[Any, Any]:
    """The output shape of tensor `out` by ONNX's shape inference, and torch's for
    `problem` (an independent oracle for what the node computes)."""
    torch = pytest.importorskip("torch")
    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    found = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
             for v in (*model.graph.value_info, *model.graph.output)}
    x = torch.empty(1, problem.c, problem.h, problem.w, device="meta")
    w = torch.empty(problem.k, problem.c // problem.groups, problem.r, problem.s, device="meta")
    y = torch.nn.functional.conv2d(x, w, None, problem.stride, problem.pad, problem.dilation,
                                   problem.groups)
    return tuple(found[out][1:]), tuple(y.shape[1:])


# Mutation gap: nothing is square here (input, filter, pads, strides, dilations), so a height
# read as a width anywhere shows; the problem computes what ONNX and torch compute.
def test_height_and_width_are_never_swapped(tmp_path: Path) -> None:
    path = _save(tmp_path / "m.onnx", [
        _conv("x", "w", "y", "c0", kernel_shape=[3, 5], strides=[2, 1], dilations=[1, 2],
              pads=[1, 4, 1, 4], group=2)],
        [_x([1, 4, 20, 13])], _weights(w=(6, 2, 3, 5)))
    problem = _by_name(path, 3)["c0"]
    assert problem == ConvProblem(n=3, c=4, h=20, w=13, k=6, r=3, s=5, pad=(1, 4),
                                  stride=(2, 1), dilation=(1, 2), groups=2)
    assert isinstance(problem, ConvProblem)
    inferred, torch_shape = _inferred_and_torch(path, problem, "y")
    assert problem.output_shape[1:] == inferred == torch_shape == (6, 10, 13)


# Mutation gap: SAME_UPPER / SAME_LOWER pads per axis from ceil(size / stride), the axis's
# filter, stride and dilation (never below zero); VALID pads nothing; each matches the
# output shape ONNX infers and torch computes.
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_same_padding_per_axis(auto_pad: str, tmp_path: Path) -> None:
    path = _save(tmp_path / "m.onnx", [
        _conv("x", "w", "y", "same", auto_pad=auto_pad, strides=[2, 1], dilations=[1, 2]),
        _conv("x", "p", "z", "pointwise", auto_pad=auto_pad, strides=[2, 2]),
        _conv("x", "w", "v", "valid", auto_pad="VALID", strides=[2, 1]),
    ], [_x([1, 3, 15, 10])], _weights(w=(4, 3, 3, 5), p=(2, 3, 1, 1)),
        outputs=[helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "yzv"])
    found = _by_name(path, 2)
    assert found == {
        "same": ConvProblem(n=2, c=3, h=15, w=10, k=4, r=3, s=5, pad=(1, 4), stride=(2, 1),
                            dilation=(1, 2)),
        "pointwise": ConvProblem(n=2, c=3, h=15, w=10, k=2, r=1, s=1, stride=2),
        "valid": ConvProblem(n=2, c=3, h=15, w=10, k=4, r=3, s=5, stride=(2, 1)),
    }
    for out, name in zip("yzv", found, strict=True):
        problem = found[name]
        assert isinstance(problem, ConvProblem)
        inferred, torch_shape = _inferred_and_torch(path, problem, out)
        assert problem.output_shape[1:] == inferred == torch_shape


# Mutation gap: float16 and float64 models are tuned in their own dtype; a 1-D or 3-D
# convolution and an input with an unknown height are named, not guessed at.
def test_dtypes_ranks_and_unknown_sizes(tmp_path: Path) -> None:
    for elem, dtype, np_type in ((TensorProto.FLOAT16, "float16", np.float16),
                                 (TensorProto.DOUBLE, "float64", np.float64)):
        path = _save(tmp_path / f"{dtype}.onnx", [_conv("x", "w", "y", "c0", pads=[1, 1, 1, 1])],
                     [_x([1, 3, 8, 6], elem)],
                     [numpy_helper.from_array(np.ones((4, 3, 3, 3), np_type), "w")], elem=elem)
        assert _by_name(path, 2) == {"c0": ConvProblem(n=2, c=3, h=8, w=6, k=4, r=3, s=3,
                                                       pad=1, dtype=dtype)}
    path = _save(tmp_path / "ranks.onnx", [
        _conv("x1", "w1", "y1", "conv1d"), _conv("x3", "w3", "y3", "conv3d"),
        _conv("xh", "w", "yh", "unknown_h")],
        [_x([1, 3, 8], name="x1"), _x([1, 3, 4, 8, 8], name="x3"), _x(["N", 3, "H", 8], name="xh")],
        _weights(w1=(4, 3, 3), w3=(4, 3, 3, 3, 3), w=(4, 3, 3, 3)),
        outputs=[helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                 for n in ("y1", "y3", "yh")])
    assert _by_name(path, 2) == {
        "conv1d": "1-D convolution (only 2-D is supported)",
        "conv3d": "3-D convolution (only 2-D is supported)",
        "unknown_h": "input shape [2, 3, None, 8] is not fully known"}


# Mutation gap: a rank-1 input (a per-element scale) is no data input, even where its size
# is the export's batch; a batch below 1 is refused.
def test_a_rank_one_input_keeps_its_size(tmp_path: Path) -> None:
    path = _save(tmp_path / "m.onnx", [
        helper.make_node("Mul", ["x", "scale"], ["a"]), _conv("a", "w", "y", "c0")],
        [_x([1, 3, 8, 1]), _x([1], name="scale")], _weights(w=(4, 3, 3, 1)))
    assert _by_name(path, 2) == {"c0": ConvProblem(n=2, c=3, h=8, w=1, k=4, r=3, s=1)}
    with pytest.raises(ValueError, match="batch must be positive, got 0"):
        onnx_convs(path, 0)


# Mutation gap: ONNX's own domain is "" or "ai.onnx"; a custom domain's ConvTranspose is
# another operator, not listed; a group that is not an int is named; exactly SKIPS_SHOWN
# skipped nodes are all listed, with no "0 more".
def test_domains_malformed_groups_and_the_skip_list(tmp_path: Path) -> None:
    graph = helper.make_graph([
        helper.make_node("Conv", ["x", "w"], ["a"], name="onnx_domain", domain="ai.onnx"),
        helper.make_node("ConvTranspose", ["x", "w"], ["t"], name="custom",
                         domain="com.example"),
        _conv("x", "w", "g", "float_group", group=1.0),
    ], "g", [_x([1, 3, 8, 8])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "atg"],
        _weights(w=(4, 3, 3, 3)))
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[
        helper.make_opsetid(domain, version)
        for domain, version in (("", 17), ("ai.onnx", 17), ("com.example", 1))]), str(path))
    assert _by_name(path, 2) == {
        "onnx_domain": ConvProblem(n=2, c=3, h=8, w=8, k=4, r=3, s=3),
        "float_group": "attribute group=1.0 is not an int"}
    three = _save(tmp_path / "three.onnx",
                  [_conv("x", "w", f"y{i}", f"c{i}", pads=[1, 0, 0, 0]) for i in range(3)],
                  [_x([1, 3, 8, 8])], _weights(w=(4, 3, 3, 3)),
                  outputs=[helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None)
                           for i in range(3)])
    with pytest.raises(ValueError, match=r"\(3 skipped: 'c0': .*'c2': asymmetric padding "
                       r"\[1, 0, 0, 0\] \(\[top, left, bottom, right\]; auto_pad=NOTSET\) "
                       r"has no symmetric-pad problem\)$"):
        onnx_problems(three, 1)


# Mutation gap: an auto_pad ONNX does not define (TensorFlow's "SAME", a typo) is named, never
# read as NOTSET (which would tune the unpadded problem in silence).
def test_an_unknown_auto_pad_is_named(tmp_path: Path) -> None:
    path = _save(tmp_path / "m.onnx", [_conv("x", "w", "y", "c0", auto_pad="SAME")],
                 [_x([1, 3, 8, 8])], _weights(w=(4, 3, 3, 3)))
    assert _by_name(path, 2) == {"c0": "unknown auto_pad 'SAME'"}


# Mutation gap: a kernel_shape the weight does not have is named (loading and shape inference
# let such a file through); no test failed when the check was removed, which would tune the
# weight's shape without a word.
def test_a_kernel_shape_the_weight_disagrees_with_is_named(tmp_path: Path) -> None:
    path = _save(tmp_path / "m.onnx", [_conv("x", "w", "y", "c0", kernel_shape=[3, 3])],
                 [_x([1, 3, 8, 8])], _weights(w=(4, 3, 5, 5)))
    assert _by_name(path, 2) == {
        "c0": "kernel_shape [3, 3] disagrees with the weight shape [4, 3, 5, 5]"}


# Mutation gap: a batch the model fixes at exactly the batch asked for runs at that batch and
# is kept; only a Conv whose batch differs from the one asked for is skipped as fixed (here
# a folded Conv elsewhere in the model sends the check to its second inference).
def test_a_batch_fixed_at_the_batch_asked_for_is_kept(tmp_path: Path) -> None:
    path = _save(tmp_path / "m.onnx", [
        helper.make_node("Reshape", ["x", "fixed_shape"], ["a"]),
        _conv("a", "w", "y", "fixed"),
        helper.make_node("Reshape", ["f", "frames_shape"], ["b"]),
        _conv("b", "w", "z", "frames"),
    ], [_x(["N", 3, 8, 8]), _x(["N", 2, 3, 8, 8], name="f")],
        [*_weights(w=(4, 3, 3, 3)), _ints("fixed_shape", [2, 3, 8, 8]),
         _ints("frames_shape", [-1, 3, 8, 8])],
        outputs=[helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in "yz"])
    assert _by_name(path, 2) == {"fixed": ConvProblem(n=2, c=3, h=8, w=8, k=4, r=3, s=3),
                                 "frames": ConvProblem(n=4, c=3, h=8, w=8, k=4, r=3, s=3)}
    assert "fixes its batch at 2" in str(_by_name(path, 3)["fixed"])
