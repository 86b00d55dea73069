"""The GEMM behind MatMul/Gemm/Conv across tile, block and thread-split boundaries (register tiles 6x16, and
1-5 x 16 for the last rows, K blocks of 256, column blocks of 256), against NumPy in float64 (rtol 1e-4,
atol 1e-5 x sqrt(K))."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity import convert, load

rng = np.random.default_rng(11)

SHAPES = [(1, 1, 1), (5, 3, 15), (6, 256, 16), (7, 257, 17), (13, 600, 49), (97, 40, 300), (2, 513, 529),
          (190, 64, 33), (64, 576, 200),
          (3, 70, 40), (10, 33, 64), (14, 20, 31), (197, 40, 48),   # last rows: 3, 4, 2, 5 (1-5-row kernels)
          (400, 300, 700), (193, 520, 530)]   # activations x a wide weight: A read in place, row blocks of up to 192


def matmul_model(m, k, n, constant_b):
    b = rng.standard_normal((k, n)).astype(np.float32)
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])]
    inits = []
    if constant_b:
        inits.append(numpy_helper.from_array(b, "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [k, n]))
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mm", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), b


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("constant_b", [True, False], ids=["packed_b", "runtime_b"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_against_float64(shape, constant_b, threads, tmp_path):
    m, k, n = shape
    model, b = matmul_model(m, k, n, constant_b)
    a = rng.standard_normal((m, k)).astype(np.float32)
    lite_model = load(convert(model, str(tmp_path)), threads=threads)
    feeds = {"a": a} if constant_b else {"a": a, "b": b}
    got = lite_model.predict(feeds)[0].get_data_to_numpy()
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.sqrt(k))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n", [600, 100], ids=["A_packed_whole", "A_packed_per_block"])
def test_gemm_transposed_scaled_a_times_packed_weight(n, threads, tmp_path):
    """Gemm(transA=1, alpha) with a constant B: A cannot be read in place, so it is transposed, scaled and packed
    (whole before the product with a wide B, else block by block)."""
    m, k = 200, 300
    a = rng.standard_normal((k, m)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((n,)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, alpha=0.5, beta=2.0)], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [k, m])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                              [numpy_helper.from_array(b, "b"), numpy_helper.from_array(c, "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got = load(convert(model, str(tmp_path)), threads=threads).predict({"a": a})[0].get_data_to_numpy()
    want = 0.5 * a.T.astype(np.float64) @ b.astype(np.float64) + 2.0 * c
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.sqrt(k))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(200, 300, 100), (37, 530, 64), (601, 70, 700)], ids=lambda s: "x".join(map(str, s)))
def test_gemm_transposed_a_read_in_place(shape, threads, tmp_path):
    """Gemm(transA=1) with alpha 1 and a constant B: the tiles read A^T in place (element (i, k) at A[k][i]), no
    packing; rows not a multiple of 6, depth past one 256 block, one and several column blocks."""
    m, k, n = shape
    a = rng.standard_normal((k, m)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Gemm", ["a", "b"], ["y"], transA=1)], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [k, m])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                              [numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got = load(convert(model, str(tmp_path)), threads=threads).predict({"a": a})[0].get_data_to_numpy()
    np.testing.assert_allclose(got, a.T.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-5 * np.sqrt(k))
