"""Transpose between layouts (NCHW <-> NHWC and other two-block swaps run as tiled 2-D transposes, full 32 x 32 tiles
of 4-byte values in 8x8 register transposes; any other permutation by the general gather), across tile edges and
dtypes, against NumPy."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import convert, load

CASES = [((1, 96, 7, 9), (0, 2, 3, 1)), ((2, 33, 5, 70), (0, 2, 3, 1)), ((2, 5, 70, 33), (0, 3, 1, 2)),
         ((3, 40, 50), (0, 2, 1)), ((70, 33), (1, 0)), ((1, 64, 64), (0, 2, 1)), ((2, 3, 4, 5), (1, 0, 3, 2)),
         ((4, 1, 6, 1, 7), (4, 3, 2, 1, 0))]


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("shape,perm", CASES, ids=lambda v: "x".join(map(str, v)))
def test_transpose_matches_numpy(shape, perm, dtype, tmp_path):
    onnx_type = {np.float32: TensorProto.FLOAT, np.int32: TensorProto.INT32, np.int64: TensorProto.INT64}[dtype]
    graph = helper.make_graph([helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))], "t",
                              [helper.make_tensor_value_info("x", onnx_type, list(shape))],
                              [helper.make_tensor_value_info("y", onnx_type, None)])
    model = load(convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path)),
                 threads=2)
    x = (np.random.default_rng(0).standard_normal(shape) * 100).astype(dtype)
    np.testing.assert_array_equal(model.predict([x])[0].get_data_to_numpy(), np.transpose(x, perm))
