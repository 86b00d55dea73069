"""Layout clean-up (Transpose, Reshape and Cast pairs) and common sub-expression elimination: what each
removes, what each must leave alone, and parity with ONNX Runtime either way."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.frontends.onnx_frontend import import_onnx
from converter.passes import run_pipeline
from parity import assert_parity

rng = np.random.default_rng(5)


def make(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def optimised(model, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    g = import_onnx(str(path), None)
    return g, run_pipeline(g, "general")


def ops(g):
    return [n.op_type for n in g.nodes]


X = rng.standard_normal((2, 3, 4)).astype(np.float32)


def test_transpose_pair_that_cancels_disappears(tmp_path):
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]),
             helper.make_node("Relu", ["t2"], ["y"])]
    model = make(nodes, [vi("x", [2, 3, 4])], [vi("y", None)])
    g, report = optimised(model, tmp_path)
    assert ops(g) == ["Relu"] and report.fired["layout_cleanup"] == 1
    assert_parity(model, {"x": X})


def test_transpose_pair_composes_and_the_first_stays_for_its_other_reader(tmp_path):
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0, 2]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[2, 0, 1]),
             helper.make_node("Relu", ["t2"], ["y"]), helper.make_node("Neg", ["t1"], ["z"])]
    model = make(nodes, [vi("x", [2, 3, 4])], [vi("y", None), vi("z", None)])
    g, _ = optimised(model, tmp_path)
    second = next(n for n in g.nodes if n.op_type == "Transpose" and n.outputs[0] != "t1")
    assert second.inputs == ["x"] and list(second.attrs["perm"]) == [2, 1, 0]
    assert_parity(model, {"x": X})


def test_cancelling_transposes_into_a_graph_output_keep_its_name(tmp_path):
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["t1"], ["y"], perm=[0, 2, 1])]
    model = make(nodes, [vi("x", [2, 3, 4])], [vi("y", None)])
    g, _ = optimised(model, tmp_path)
    assert g.outputs == ["y"]
    assert_parity(model, {"x": X})


@pytest.mark.parametrize("second_shape,folds", [([6, 4], True), ([0, -1], False)])
def test_reshape_chain(tmp_path, second_shape, folds):
    inits = [numpy_helper.from_array(np.array([2, 12], np.int64), "s1"),
             numpy_helper.from_array(np.array(second_shape, np.int64), "s2")]
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["r1"]), helper.make_node("Reshape", ["r1", "s2"], ["r2"]),
             helper.make_node("Relu", ["r2"], ["y"])]
    model = make(nodes, [vi("x", [2, 3, 4])], [vi("y", None)], inits)
    g, _ = optimised(model, tmp_path)
    assert ops(g).count("Reshape") == (1 if folds else 2)   # 0 copies a dim of the intermediate: kept
    assert_parity(model, {"x": X})


@pytest.mark.parametrize("src,mid,dst,left", [
    (TensorProto.INT32, TensorProto.INT64, TensorProto.INT32, 0),       # lossless round trip: gone
    (TensorProto.INT8, TensorProto.INT32, TensorProto.FLOAT, 1),         # widening then float: one Cast
    (TensorProto.FLOAT, TensorProto.INT32, TensorProto.FLOAT, 2),        # truncation in between: both stay
])
def test_cast_pairs(tmp_path, src, mid, dst, left):
    nodes = [helper.make_node("Cast", ["x"], ["c1"], to=mid), helper.make_node("Cast", ["c1"], ["c2"], to=dst),
             helper.make_node("Abs", ["c2"], ["y"])]
    model = make(nodes, [vi("x", [2, 3, 4], src)], [vi("y", None, dst)])
    g, _ = optimised(model, tmp_path)
    assert ops(g).count("Cast") == left
    x = (X * 40).astype(helper.tensor_dtype_to_np_dtype(src))
    assert_parity(model, {"x": x})


def test_cse_merges_repeated_work_but_not_different_attributes(tmp_path):
    nodes = [helper.make_node("Softmax", ["x"], ["s1"], axis=-1), helper.make_node("Softmax", ["x"], ["s2"], axis=-1),
             helper.make_node("Softmax", ["x"], ["s3"], axis=1),
             helper.make_node("Relu", ["s1"], ["r1"]), helper.make_node("Relu", ["s2"], ["r2"]),
             helper.make_node("Sum", ["r1", "r2", "s3"], ["y"])]
    model = make(nodes, [vi("x", [2, 3, 4])], [vi("y", None)])
    g, report = optimised(model, tmp_path)
    assert report.fired["cse"] == 2   # the second Softmax(axis -1), then its Relu
    assert ops(g).count("Softmax") == 2 and ops(g).count("Relu") == 1
    assert_parity(model, {"x": X})


def test_cse_keeps_duplicate_graph_outputs(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["z"])]
    model = make(nodes, [vi("x", [2, 3, 4])], [vi("y", None), vi("z", None)])
    g, report = optimised(model, tmp_path)
    assert report.fired["cse"] == 0 and g.outputs == ["y", "z"]
    assert_parity(model, {"x": X})
