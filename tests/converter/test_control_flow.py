"""If / Loop / Scan with bodies run at run time, against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity import assert_parity, convert, load

rng = np.random.default_rng(9)


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def if_model():
    """y = relu(x) * w if sum(x) > 0 else -x + b: the branches read x, w and b from the outer scope."""
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "w"], ["t_out"])],
                               "then", [], [vi("t_out", None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Add", ["n", "b"], ["e_out"])],
                               "else", [], [vi("e_out", None)])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="branch")]
    inits = [numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")]
    return model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])], inits, opset=13)


def loop_model():
    """Repeats acc = acc * 0.5 + x M times, collecting each acc (a scan output); stops early when
    sum(acc) < limit. Carried: acc; captures: x, limit."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "half"], ["h"]), helper.make_node("Add", ["h", "x"], ["acc_out"]),
         helper.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0),
         helper.make_node("Greater", ["s", "limit"], ["cond_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan_out"])],
        "body", [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("acc_in", None)],
        [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", None), vi("scan_out", None)],
        [numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    nodes = [helper.make_node("Loop", ["M", "cond", "acc0"], ["acc_final", "history"], body=body, name="loop")]
    inputs = [vi("M", [], TensorProto.INT64), vi("cond", [], TensorProto.BOOL), vi("acc0", [3]), vi("x", [3]),
              vi("limit", [])]
    return model(nodes, inputs, [vi("acc_final", [3]), vi("history", None)], opset=13)


def scan_model(reverse=False):
    """Running sum over the sequence axis (axis 1 of [batch, seq, d]) plus a per-step product output."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Mul", ["x_t", "k"], ["y_t"])],
        "body", [vi("s_in", None), vi("x_t", None)], [vi("s_out", None), vi("y_t", None)])
    attrs = {"num_scan_inputs": 1, "scan_input_axes": [1], "scan_output_axes": [2]}
    if reverse:
        attrs.update(scan_input_directions=[1], scan_output_directions=[1])
    nodes = [helper.make_node("Scan", ["s0", "x"], ["s_final", "ys"], body=body, name="scan", **attrs)]
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "k")]
    return model(nodes, [vi("s0", [2, 3]), vi("x", [2, 5, 3])], [vi("s_final", [2, 3]), vi("ys", None)], inits)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_if_with_runtime_condition(sign):
    x = (np.abs(rng.standard_normal((3, 4))) * sign).astype(np.float32)
    assert_parity(if_model(), {"x": x})


def test_if_same_model_takes_both_branches(tmp_path):
    source = if_model()
    m = load(convert(source, str(tmp_path)))
    from parity import run_ort
    for sign in (1.0, -1.0, 1.0):
        x = (np.abs(rng.standard_normal((2, 4))) * sign).astype(np.float32)
        np.testing.assert_allclose(m.predict([x])[0].get_data_to_numpy(), run_ort(source, {"x": x})[0],
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("trip,limit", [(5, -1e9), (10, 2.0), (0, 0.0)])
def test_loop_trip_count_condition_and_scan_output(trip, limit):
    feeds = {"M": np.array(trip, np.int64), "cond": np.array(True), "acc0": np.zeros(3, np.float32),
             "x": np.array([1.0, 0.5, 0.25], np.float32), "limit": np.array(limit, np.float32)}
    assert_parity(loop_model(), feeds)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_axes_and_directions(reverse):
    feeds = {"s0": np.zeros((2, 3), np.float32), "x": rng.standard_normal((2, 5, 3)).astype(np.float32)}
    assert_parity(scan_model(reverse), feeds)
