"""Activations and elementwise functions (standalone, not fused into a product) on NaN, +-Inf and values around
exp's overflow and underflow, against ONNX Runtime on the same inputs: the NaN lanes match exactly (NaN propagates,
as ONNX Runtime propagates it), infinities are infinities, the rest within float32 rounding."""
from __future__ import annotations

import numpy as np
import pytest

from parity import convert, load

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 88.0, 88.72, 88.75, 89.0, 100.0, -87.0, -87.5,
                    -88.0, -104.0, -200.0, 3.0e38, -3.0e38, 1e-30, -1e-30, 20.0, -20.0, 0.5], np.float32)

OPS = [("Relu", {}), ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.5, "beta": 0.1}), ("Exp", {}), ("Sigmoid", {}),
       ("Tanh", {}), ("Softplus", {}), ("Elu", {}), ("Selu", {}), ("Celu", {}), ("Mish", {}), ("LeakyRelu", {}),
       ("HardSwish", {}), ("Softsign", {}), ("Softmax", {"axis": -1})]


def onnx_model(op, attrs, shape):
    from onnx import TensorProto, helper
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("op,attrs", OPS, ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v.values())))
def test_special_values_match_onnxruntime(tmp_path, op, attrs):
    import onnx
    import onnxruntime as ort
    x = SPECIAL.reshape(4, 6) if op != "Softmax" else np.stack([SPECIAL[i:i + 6] for i in range(0, 24, 6)])
    if op == "Softmax":   # rows with NaN / Inf, and finite rows around exp's range
        x = np.array([[np.nan, 1, 2, 3, 4, 5], [np.inf, 1, 2, 3, 4, 5], [-np.inf, 1, 2, 3, 4, 5],
                      [100, 0, -100, 88.8, 1, 2]], np.float32)
    path = tmp_path / "m.onnx"
    onnx.save(onnx_model(op, attrs, x.shape), str(path))
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    got = load(convert(str(path), str(tmp_path))).predict({"x": x})[0].get_data_to_numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{op}: NaN lanes differ")
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want), err_msg=f"{op}: +Inf lanes differ")
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want), err_msg=f"{op}: -Inf lanes differ")
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=2e-6 if op != "Mish" else 1e-5, atol=1e-7)
