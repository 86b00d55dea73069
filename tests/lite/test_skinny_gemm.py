"""Products of few rows with a constant weight (cpu/gemm/skinny_gemm): every storage form (float32 packed, float16 and
bfloat16 halves, int8 and int4 codes per tensor / per column / per block of rows, symmetric and with zero points),
every row count up to the skinny limit and past it (the block-decoding GEMM path over the same panels), shapes
that leave partial panels, octets and groups, and the fused epilogue, against NumPy on the decoded weight."""
from __future__ import annotations

import numpy as np
import pytest

from converter.ir import Graph, Node, Tensor
from converter.quantization import decode, quantize, to_bfloat16, to_float16
from converter.writer import write_ms
from parity import load

F32 = np.dtype(np.float32)
rng = np.random.default_rng(7)


def matmul_file(path, values: np.ndarray, stored, rows: int, bias: np.ndarray | None = None) -> str:
    """y = x @ w, w holding `values` stored as `stored`; with a bias: silu(x @ w + bias + r) * g (the fused
    epilogue: bias, residual, activation, multiplier)."""
    k, n = values.shape
    g = Graph(name="mm")
    g.tensors["x"] = Tensor("x", F32, [rows, k])
    g.tensors["w"] = Tensor("w", F32, [k, n], values)
    g.tensors["w"].stored = stored
    g.tensors["y"] = Tensor("y", F32, [rows, n])
    inputs, attrs = ["x", "w"], {}
    g.inputs = ["x"]
    if bias is not None:
        g.tensors["b"] = Tensor("b", F32, [n], bias)
        for name in ("r", "g"):
            g.tensors[name] = Tensor(name, F32, [rows, n])
            g.inputs.append(name)
        inputs += ["b", "r", "g"]
        attrs["activation"] = "silu"
    g.nodes.append(Node("mm", "MatMul", inputs, ["y"], attrs))
    g.outputs = ["y"]
    write_ms(g, str(path))
    return str(path)


STORAGE = {
    "float32": lambda w: None,
    "float16": to_float16,
    "bfloat16": to_bfloat16,
    "int8_column": lambda w: quantize(w, 8, 1, 0, True),
    "int8_column_zero": lambda w: quantize(w, 8, 1, 0, False),
    "int8_tensor": lambda w: quantize(w, 8, -1, 0, True),
    "int8_blocks": lambda w: quantize(w, 8, 0, 16, True),
    "int4_blocks32": lambda w: quantize(w, 4, 0, 32, True),
    "int4_blocks8_zero": lambda w: quantize(w, 4, 0, 8, False),
    "int4_column": lambda w: quantize(w, 4, 1, 0, True),
    "int4_tensor_zero": lambda w: quantize(w, 4, -1, 0, False),
}


@pytest.mark.parametrize("storage", list(STORAGE))
@pytest.mark.parametrize("k,n", [(45, 37), (600, 50), (64, 16)])
def test_skinny_and_tall_products_match_numpy(tmp_path, storage, k, n):
    w = rng.standard_normal((k, n)).astype(np.float32)
    stored = STORAGE[storage](w)
    values = w if stored is None else decode(stored, w.shape)
    for rows in (1, 2, 3, 5, 8, 9, 20):
        x = rng.standard_normal((rows, k)).astype(np.float32)
        path = matmul_file(tmp_path / f"m{rows}.ms", values, stored, rows)
        got = load(path).predict({"x": x})[0].get_data_to_numpy()
        want = x.astype(np.float64) @ values.astype(np.float64)
        # float32 sums in another order: a few ulps of the sum of |terms|
        bound = 2e-6 * k ** 0.5 * (np.abs(x) @ np.abs(values)) + 1e-6
        assert np.all(np.abs(got - want) <= bound), (storage, rows, np.abs(got - want).max())


@pytest.mark.parametrize("storage", ["float32", "bfloat16", "int8_column", "int4_blocks32", "int4_tensor_zero"])
@pytest.mark.parametrize("rows", [1, 4, 8, 12])
def test_fused_epilogue_on_the_skinny_path(tmp_path, storage, rows):
    k, n = 96, 40
    w = rng.standard_normal((k, n)).astype(np.float32)
    stored = STORAGE[storage](w)
    values = w if stored is None else decode(stored, w.shape)
    bias = rng.standard_normal(n).astype(np.float32)
    path = matmul_file(tmp_path / "m.ms", values, stored, rows, bias)
    feeds = {"x": rng.standard_normal((rows, k)).astype(np.float32),
             "r": rng.standard_normal((rows, n)).astype(np.float32),
             "g": rng.standard_normal((rows, n)).astype(np.float32)}
    got = load(path).predict(feeds)[0].get_data_to_numpy()
    y = feeds["x"].astype(np.float64) @ values + bias + feeds["r"]
    want = y / (1 + np.exp(-y)) * feeds["g"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [3, 45])   # the skinny path; the GEMM's in-register SiLU
def test_fused_silu_at_the_extremes(tmp_path, rows):
    """SiLU in the products' epilogue past exp's clamps (|y| up to ~300), with NaN and +inf: -> 0 below, y above,
    NaN kept, silu(+inf) = +inf (-inf's 0 x -inf is left undefined)."""
    k, n = 96, 40
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    path = matmul_file(tmp_path / "m.ms", w, None, rows, bias)
    feeds = {"x": (rng.standard_normal((rows, k)) * 30).astype(np.float32),
             "r": rng.standard_normal((rows, n)).astype(np.float32),
             "g": rng.standard_normal((rows, n)).astype(np.float32)}
    feeds["x"][1, 7] = np.nan
    feeds["r"][2, 3], feeds["r"][2, 5] = np.inf, -np.inf
    got = load(path).predict(feeds)[0].get_data_to_numpy()
    y = feeds["x"].astype(np.float64) @ w + bias + feeds["r"]
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.where(y == -np.inf, np.nan, y / (1 + np.exp(-y))) * feeds["g"]
    assert np.abs(y[np.isfinite(y)]).max() > 100
    assert np.isnan(got[1]).all() and got[2, 3] == want[2, 3] and np.isinf(want[2, 3])
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


def test_int4_blocks_of_odd_rows_decode_at_load(tmp_path):
    """A layout the panels do not take (int4 blocks of 7 rows) still runs: decoded to float32 at load."""
    k, n = 21, 24
    w = rng.standard_normal((k, n)).astype(np.float32)
    stored = quantize(w, 4, 0, 7, True)
    values = decode(stored, w.shape)
    x = rng.standard_normal((1, k)).astype(np.float32)
    got = load(matmul_file(tmp_path / "m.ms", values, stored, 1)).predict({"x": x})[0].get_data_to_numpy()
    np.testing.assert_allclose(got, x @ values, rtol=1e-5, atol=1e-5)


def test_non_finite_inputs_make_their_row_non_finite(tmp_path):
    """NaN or infinity in a row of A: every output of that row is non-finite (with int4 or zero-point codes the
    skinny product subtracts the zero point through the row's sum, so an infinity gives NaN rather than ±inf);
    other rows are unaffected."""
    k, n = 32, 20
    w = rng.standard_normal((k, n)).astype(np.float32)
    for stored in (quantize(w, 4, 0, 32, True), quantize(w, 8, 1, 0, False), to_bfloat16(w)):
        values = decode(stored, w.shape)
        x = rng.standard_normal((3, k)).astype(np.float32)
        x[0, 3] = np.nan
        x[1, 5] = np.inf
        got = load(matmul_file(tmp_path / "m.ms", values, stored, 3)).predict({"x": x})[0].get_data_to_numpy()
        assert not np.isfinite(got[:2]).any()
        np.testing.assert_allclose(got[2], x[2] @ values, rtol=1e-5, atol=1e-5)
