"""NaN through products with a fused Relu / Relu6 (Clip 0..6), as ONNX Runtime gives it: an input NaN makes every
output it reaches NaN, and the activation fused into the Conv / MatMul keeps it NaN (it does not clamp it to 0 or 6),
on each kernel family (pointwise, direct and depthwise convolutions, grouped, skinny and tall products, float32 and
compressed weights, bfloat16 precision where the CPU has it)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity import convert, run_ort

RELUS = ("relu", "relu6")   # Relu, and Clip(0, 6), both fused into the product


def with_activation(nodes, inits, last, act):
    if act == "relu":
        nodes.append(helper.make_node("Relu", [last], ["y"]))
    else:
        inits += [numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["y"]))


def conv_model(c_in, c_out, k, group, shape, act, rng):
    w = (rng.standard_normal((c_out, c_in // group, k, k)) * 0.5).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4, group=group)]
    with_activation(nodes, inits, "c", act)
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def matmul_model(k, n, rows, act, rng):
    w = (rng.standard_normal((k, n)) * 0.5).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["c"])]
    with_activation(nodes, inits, "c", act)
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def check(model, x, tmp_path, precision="enforce_fp32", **convert_kwargs):
    import lite
    want = run_ort(model, {"x": x})[0]
    path = convert(model, str(tmp_path), **convert_kwargs)
    ctx = lite.Context()
    ctx.cpu.precision_mode = precision
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx)
    got = m.predict({"x": x})[0].get_data_to_numpy()
    assert np.isnan(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    tol = 1e-4 if precision == "enforce_fp32" and not convert_kwargs else 5e-2
    np.testing.assert_allclose(got[finite], want[finite], rtol=tol, atol=tol)


CONVS = {"pointwise": (16, 32, 1, 1), "3x3": (8, 16, 3, 1), "3x3_wide": (32, 32, 3, 1), "depthwise": (16, 16, 3, 16),
         "grouped": (16, 16, 3, 4), "stem": (3, 16, 3, 1)}


@pytest.mark.parametrize("act", sorted(RELUS))
@pytest.mark.parametrize("conv", sorted(CONVS))
def test_conv_with_fused_activation_keeps_nan(tmp_path, conv, act):
    rng = np.random.default_rng(0)
    c_in, c_out, k, group = CONVS[conv]
    shape = (1, c_in, 12, 12)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, :, 3, 4] = np.nan    # every channel of one pixel: reaches its neighbourhood in every output channel
    check(conv_model(c_in, c_out, k, group, shape, act, rng), x, tmp_path)


@pytest.mark.parametrize("act", sorted(RELUS))
@pytest.mark.parametrize("rows", [1, 4, 9, 33])
def test_matmul_with_fused_activation_keeps_nan(tmp_path, rows, act):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 64)).astype(np.float32)
    x[rows // 2, 5] = np.nan    # one row all NaN after the product
    check(matmul_model(64, 48, rows, act, rng), x, tmp_path)


@pytest.mark.parametrize("rows", [1, 9])
def test_bf16_precision_keeps_nan(tmp_path, rows):
    if "avx512_bf16" not in open("/proc/cpuinfo").read():
        pytest.skip("bf16 products need AVX512_BF16")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((rows, 64)).astype(np.float32)
    x[0, 7] = np.nan
    check(matmul_model(64, 48, rows, "relu", rng), x, tmp_path, precision="preferred_bf16")
    shape = (1, 16, 10, 10)
    xc = rng.standard_normal(shape).astype(np.float32)
    xc[0, :, 2, 2] = np.nan
    check(conv_model(16, 16, 3, 1, shape, "relu", rng), xc, tmp_path, precision="preferred_bf16")
