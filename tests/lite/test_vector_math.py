"""Accuracy of the branch-free vector math behind Erf, Exp, Tanh, Sigmoid and Gelu, on dense grids
against float64 references: the bounds docs/ops.md and cpu/simd/vmath.h state."""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import convert, load

GRID = np.concatenate([np.linspace(-10, 10, 200001), np.linspace(-1e-3, 1e-3, 2001)]).astype(np.float32)


def unary(op, tmp_path, **attrs):
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], op,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [GRID.size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    opset = 20 if op == "Gelu" else 17
    model = load(convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(tmp_path)))
    return model.predict([GRID])[0].get_data_to_numpy().astype(np.float64)


X = GRID.astype(np.float64)
ERF = np.array([math.erf(v) for v in X])
GELU = 0.5 * X * (1 + np.array([math.erf(v / math.sqrt(2)) for v in X]))


@pytest.mark.parametrize("op,reference,abs_tol,rel_tol", [
    ("Erf", ERF, 5e-7, 0.0),
    ("Tanh", np.tanh(X), 2e-7, 0.0),
    ("Sigmoid", 1 / (1 + np.exp(-X)), 2e-7, 0.0),
    ("Exp", np.exp(X), 0.0, 4e-7),
    ("Gelu", GELU, 5e-6, 0.0),
])
def test_vector_math_accuracy(op, reference, abs_tol, rel_tol, tmp_path):
    got = unary(op, tmp_path)
    err = np.abs(got - reference)
    assert np.all(err <= abs_tol + rel_tol * np.abs(reference)), (op, float(err.max()))


@pytest.mark.parametrize("length", [1, 15, 16, 17, 100, 1031])
def test_softmax_rows(length, tmp_path):
    """Last-axis Softmax takes the vectorised row path; rows with +-inf keep the exact semantics."""
    rng = np.random.default_rng(length)
    x = (rng.standard_normal((5, length)) * 30).astype(np.float32)
    x[3, 0] = np.inf if length > 1 else x[3, 0]
    x[4, :] = -np.inf
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "s",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, length])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    from parity import run_ort
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got = load(convert(model, str(tmp_path))).predict([x])[0].get_data_to_numpy()
    want = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_exp_underflows_to_exact_zero(tmp_path):
    """Masked attention scores: exp of anything below -87.3 (where float32 turns denormal) and of -inf is
    exactly 0, and softmax rows with masked entries put exact zeros there."""
    x = np.array([-np.inf, -1e30, -104.0, -88.0, -87.0, 0.0], np.float32)
    graph = helper.make_graph([helper.make_node("Exp", ["x"], ["y"])], "e",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    got = load(convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path), "e")
               ).predict([x])[0].get_data_to_numpy()
    assert np.all(got[:4] == 0.0) and abs(got[4] / np.exp(-87.0) - 1) < 1e-6 and got[5] == 1.0
    scores = np.array([[1.0, -np.inf, 2.0, -3.4e38] * 8], np.float32)
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "s",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(scores.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    p = load(convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path), "s")
             ).predict([scores])[0].get_data_to_numpy()
    assert np.all(p[0, 1::4] == 0.0) and np.all(p[0, 3::4] == 0.0) and abs(p.sum() - 1) < 1e-6
