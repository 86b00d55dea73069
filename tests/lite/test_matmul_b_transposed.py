"""MatMul with b_transposed (format 1.14): a constant weight stored [N, K] (a checkpoint's Linear layout) against
NumPy's A @ B.T, for skinny (decode) and tall products, with the fused bias / activation / residual epilogue, under
precision bfloat16, with the weight stored compressed (decoded at load), and shared with a Gather reading the same
table (a tied language-model head); a B that is not a constant is refused."""
from __future__ import annotations

import numpy as np
import pytest

from converter.deferred import DeferredArray, StoragePlan
from converter.ir import Graph, Node, Tensor
from converter.writer import write_ms
from parity import load

F32, I64 = np.dtype(np.float32), np.dtype(np.int64)


def matmul_file(path, w, attrs, bias=None, residual=False, stored=None, gather=False):
    N, K = w.shape
    g = Graph(name="mm")
    g.tensors["x"] = Tensor("x", F32, [-1, K])
    g.tensors["w"] = Tensor("w", F32, [N, K], w if stored is None else DeferredArray.of(w, "w"))
    g.tensors["w"].stored = stored
    inputs = ["x", "w"]
    if bias is not None:
        g.tensors["b"] = Tensor("b", F32, [N], bias)
        inputs.append("b")
    if residual:
        g.tensors["r"] = Tensor("r", F32, [-1, N])
        inputs += [""] * (3 - len(inputs)) + ["r"]
        g.inputs.append("r")
    g.tensors["y"] = Tensor("y", F32, None)
    g.nodes.append(Node("mm", "MatMul", inputs, ["y"], {"b_transposed": True, **attrs}))
    g.inputs.insert(0, "x")
    g.outputs = ["y"]
    if gather:   # the same table read by rows, as the embedding of a tied head
        g.tensors["ids"] = Tensor("ids", I64, [-1])
        g.tensors["rows"] = Tensor("rows", F32, None)
        g.nodes.append(Node("embed", "Gather", ["w", "ids"], ["rows"], {"axis": 0}))
        g.inputs.append("ids")
        g.outputs.append("rows")
    write_ms(g, str(path))
    return str(path)


@pytest.mark.parametrize("rows", [1, 3, 8, 9, 40])
@pytest.mark.parametrize("epilogue", ["plain", "bias_gelu", "residual"])
def test_matches_numpy(tmp_path, rows, epilogue):
    rng = np.random.default_rng(rows)
    N, K = 37, 70
    w = rng.standard_normal((N, K)).astype(np.float32)
    x = rng.standard_normal((rows, K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32) if epilogue == "bias_gelu" else None
    attrs = {"activation": "gelu"} if epilogue == "bias_gelu" else {}
    model = load(matmul_file(tmp_path / "m.ms", w, attrs, bias, residual=epilogue == "residual"))
    feeds = {"x": x}
    want = x.astype(np.float64) @ w.T.astype(np.float64)
    if epilogue == "bias_gelu":
        import math
        want = want + bias
        want = 0.5 * want * (1 + np.vectorize(math.erf)(want / np.sqrt(2)))
    if epilogue == "residual":
        feeds["r"] = rng.standard_normal((rows, N)).astype(np.float32)
        want = want + feeds["r"]
    got = model.predict(feeds)[0].get_data_to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stored", [StoragePlan("bfloat16"), StoragePlan("int", 8, 1)], ids=["bf16", "int8"])
def test_compressed_weight_is_decoded(tmp_path, stored):
    from converter.deferred import stored_values
    rng = np.random.default_rng(1)
    w = rng.standard_normal((24, 48)).astype(np.float32)
    x = rng.standard_normal((5, 48)).astype(np.float32)
    model = load(matmul_file(tmp_path / "m.ms", w, {}, stored=stored))
    decoded = stored_values(w, stored)
    np.testing.assert_allclose(model.predict({"x": x})[0].get_data_to_numpy(), x @ decoded.T, rtol=1e-5, atol=1e-5)


def test_shared_with_a_gather_and_bf16_precision(tmp_path):
    import lite
    rng = np.random.default_rng(2)
    w = rng.standard_normal((50, 32)).astype(np.float32)
    x = rng.standard_normal((4, 32)).astype(np.float32)
    ids = np.array([3, 49, 0], np.int64)
    path = matmul_file(tmp_path / "m.ms", w, {}, gather=True)
    for mode, tol in (("enforce_fp32", 1e-5), ("preferred_bf16", 2e-2)):
        ctx = lite.Context()
        ctx.cpu.precision_mode = mode
        model = lite.Model()
        model.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx)
        for _ in range(2):   # the table's pages may be let go after packing: the Gather still reads its rows
            y, rows = (o.get_data_to_numpy() for o in model.predict({"x": x, "ids": ids}))
            np.testing.assert_array_equal(rows, w[ids])
            want = x @ w.T
            assert np.abs(y - want).max() <= tol * np.abs(want).max()


def test_a_b_that_is_not_a_constant_is_refused(tmp_path):
    g = Graph(name="mm")
    g.tensors["x"] = Tensor("x", F32, [2, 4])
    g.tensors["w"] = Tensor("w", F32, [3, 4])
    g.tensors["y"] = Tensor("y", F32, None)
    g.nodes.append(Node("mm", "MatMul", ["x", "w"], ["y"], {"b_transposed": True}))
    g.inputs, g.outputs = ["x", "w"], ["y"]
    write_ms(g, str(tmp_path / "m.ms"))
    with pytest.raises(ValueError, match="b_transposed needs a constant 2-D B"):
        load(str(tmp_path / "m.ms")).predict({"x": np.zeros((2, 4), np.float32), "w": np.zeros((3, 4), np.float32)})
