"""The ONNX frontend runs shape inference without the data of large initializers (they become typed graph
inputs): the shapes it finds must be those of inference on the whole model, values of small shape constants
included, and the model must convert to the same results."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from converter.frontends.onnx_frontend import _INFERENCE_MAX_INITIALIZER, _infer_shapes
from parity import assert_parity

rng = np.random.default_rng(5)


def model_with_large_weights(weight_is_also_input: bool) -> onnx.ModelProto:
    k, n = 64, _INFERENCE_MAX_INITIALIZER // 64 + 8   # above the threshold: stripped for inference
    w = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([-1, 2, n // 2], np.int64), "shape")   # small: keeps its value
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Reshape", ["m", "shape"], ["r"]),
             helper.make_node("Shape", ["r"], ["s"]), helper.make_node("Gather", ["s", "i"], ["d"], axis=0),
             helper.make_node("Relu", ["r"], ["y"])]
    inits = [w, shape, numpy_helper.from_array(np.array(2, np.int64), "i")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, k])]
    if weight_is_also_input:   # old-style models list initializers among the inputs
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [k, n]))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                                                   helper.make_tensor_value_info("d", TensorProto.INT64, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def shapes(model: onnx.ModelProto) -> dict[str, list]:
    return {vi.name: [d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim]
            for vi in list(model.graph.value_info) + list(model.graph.output)}


def test_inference_without_large_data_finds_the_full_inference_shapes():
    for also_input in (False, True):
        model = model_with_large_weights(also_input)
        want = shapes(shape_inference.infer_shapes(model, strict_mode=False, data_prop=True))
        before = model.graph.initializer[0].SerializeToString()
        got = shapes(_infer_shapes(model))
        assert got == want and got["y"] == [3, 2, (_INFERENCE_MAX_INITIALIZER // 64 + 8) // 2]
        assert model.graph.initializer[0].SerializeToString() == before   # the weights are untouched
        assert [t.name for t in model.graph.initializer] == ["w", "shape", "i"]


def test_model_with_large_weights_converts_and_matches():
    assert_parity(model_with_large_weights(False), {"x": rng.standard_normal((3, 64)).astype(np.float32)})
