"""Regression tests for ONNX models users bring (issue: five silent wrong results, inputs real models feed),
each against ONNX Runtime on the same inputs: DFT's negative axes, ConvTranspose's output_shape, ONNX
Attention's windows and fully masked rows, Clip with min > max, old opsets, CastLike, scalar inputs fed as [1],
com.microsoft::DynamicQuantizeLSTM, STFT on a [batch, length] signal, AveragePool windows larger than the
input, and what the converter now refuses instead of leaving to the runtime (or to a wrong number)."""
from __future__ import annotations

import os
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
from parity import assert_parity, convert, load, run_ort

rng = np.random.default_rng(32)
ONNX_TYPE = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.int32: TensorProto.INT32,
             np.bool_: TensorProto.BOOL, np.int8: TensorProto.INT8, np.float64: TensorProto.DOUBLE}


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def one_node(op, feeds, consts=None, attrs=None, opset=17, inputs=None, n_out=1, domain=""):
    """A one-node model; output types from ONNX shape inference (ONNX Runtime needs them declared)."""
    consts = consts or {}
    inputs = inputs if inputs is not None else list(feeds) + list(consts)
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, inputs, outs, name=f"{op.lower()}_node", domain=domain, **(attrs or {}))
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(k, ONNX_TYPE[v.dtype.type], list(v.shape)) for k, v in feeds.items()],
        [helper.make_value_info(o, onnx.TypeProto()) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model = onnx.shape_inference.infer_shapes(model)
    for o in model.graph.output:
        if not o.type.tensor_type.elem_type:
            o.type.tensor_type.elem_type = ONNX_TYPE[next(iter(feeds.values())).dtype.type]
    return model, feeds


# --- DFT: a negative axis counts from the back of the whole shape (the real/imaginary dim included) ---------------
@pytest.mark.parametrize("axis", [-2, -3, 1, 2])
@pytest.mark.parametrize("extra", [{}, {"onesided": 1}, {"inverse": 1}])
def test_dft_axis_attribute_opset17(axis, extra):
    x = f32(2, 5, 9, 1)
    model, feeds = one_node("DFT", {"x": x}, attrs={"axis": axis, **extra})
    got = assert_parity(model, feeds, rtol=1e-4, atol=1e-4)
    assert got[0].shape[:3] == tuple(  # the transformed axis keeps its place
        (x.shape[i] if i != (axis % 4) else got[0].shape[i]) for i in range(3))


def test_dft_negative_axis_shape_is_onnxruntime_s():
    """The case a speaker-embedding front end hit: [2, 5, 9, 1] with axis=-2 transforms the 9."""
    model, feeds = one_node("DFT", {"x": f32(2, 5, 9, 1)}, attrs={"axis": -2})
    assert assert_parity(model, feeds, rtol=1e-4, atol=1e-4)[0].shape == (2, 5, 9, 2)


@pytest.mark.parametrize("axis", [-2, 1])
def test_dft_axis_input_opset20(axis, tmp_path):
    """Opset 20 takes the axis as an input: constant (folded at conversion) or a graph input (read at run time)."""
    x = f32(2, 6, 4, 2)
    const, _ = one_node("DFT", {"x": x}, {"axis": np.array(axis, np.int64)}, opset=20, inputs=["x", "", "axis"])
    assert_parity(const, {"x": x}, rtol=1e-4, atol=1e-4)
    fed, _ = one_node("DFT", {"x": x, "axis": np.array(axis, np.int64)}, opset=20, inputs=["x", "", "axis"])
    assert_parity(fed, {"x": x, "axis": np.array(axis, np.int64)}, rtol=1e-4, atol=1e-4)


def test_dft_axis_out_of_range_is_refused(tmp_path):
    """At conversion when the shapes are fixed (the converter builds the file once), else at predict."""
    model, feeds = one_node("DFT", {"x": f32(2, 5, 1)}, attrs={"axis": 1})
    model.graph.node[0].attribute[0].i = -1   # the real/imaginary dim itself
    with pytest.raises(converter.ConverterError, match="axis -1 out of range"):
        convert(model, str(tmp_path))
    assert not os.path.exists(tmp_path / "model.ms")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    m = load(convert(model, str(tmp_path)))
    with pytest.raises(ValueError, match="axis -1 out of range"):
        m.predict(feeds)


# --- STFT: a [batch, length] signal is real -------------------------------------------------------------------------
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_two_dimensional_signal(onesided):
    signal = f32(2, 64)
    window = np.hanning(16).astype(np.float32)
    model, feeds = one_node("STFT", {"signal": signal}, {"step": np.array(4, np.int64), "window": window},
                            attrs={"onesided": onesided}, inputs=["signal", "step", "window"])
    got = assert_parity(model, feeds, rtol=1e-4, atol=1e-4)
    assert got[0].shape == (2, 13, 9 if onesided else 16, 2)


# --- ConvTranspose with output_shape ---------------------------------------------------------------------------------
@pytest.mark.parametrize("output_shape,auto_pad", [
    ([10, 8], None),            # larger than the full result: zeros at the end (the suite's case)
    ([7, 6], None),             # smaller: the spec's padding, the odd one at the start
    ([7, 6], "SAME_UPPER"),     # smaller, the odd padding at the end
    ([9, 7], None),             # exactly the full result
])
def test_convtranspose_output_shape(output_shape, auto_pad):
    attrs = {"output_shape": output_shape, "strides": [3, 2]}
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    model, feeds = one_node("ConvTranspose", {"x": f32(1, 2, 3, 3)}, {"w": f32(2, 3, 3, 3)}, attrs=attrs)
    got = assert_parity(model, feeds)
    assert got[0].shape == (1, 3, *output_shape)


# --- ONNX Attention: sliding windows and fully masked rows -----------------------------------------------------------
def attention_model(q, k, v, mask=None, opset=25, **attrs):
    feeds = {"q": q, "k": k, "v": v, **({"mask": mask} if mask is not None else {})}
    return one_node("Attention", feeds, attrs=attrs, opset=opset)


@pytest.mark.parametrize("attrs", [
    {"is_causal": 1, "left_window_size": 2},
    {"left_window_size": 1, "right_window_size": 2},
    {"left_window_size": 0},
    {"right_window_size": 0},                       # causal spelled as a window
    {"is_causal": 1, "left_window_size": 3, "right_window_size": 1},
])
@pytest.mark.parametrize("lengths", [(4, 6), (7, 7), (130, 130)])   # 130: more than one query and key tile
def test_attention_windows(attrs, lengths):
    s_q, s_kv = lengths
    model, feeds = attention_model(f32(2, 3, s_q, 8), f32(2, 3, s_kv, 8), f32(2, 3, s_kv, 8), **attrs)
    assert_parity(model, feeds, rtol=1e-4, atol=1e-5)


def test_attention_window_3d_grouped_heads():
    model, feeds = attention_model(f32(2, 5, 4 * 8), f32(2, 5, 2 * 8), f32(2, 5, 2 * 8), q_num_heads=4,
                                   kv_num_heads=2, is_causal=1, left_window_size=1)
    assert_parity(model, feeds, rtol=1e-4, atol=1e-5)


def test_attention_window_with_a_bool_mask():
    mask = rng.uniform(size=(6,)) > 0.3
    model, feeds = attention_model(f32(1, 2, 6, 8), f32(1, 2, 6, 8), f32(1, 2, 6, 8), mask=mask, is_causal=1,
                                   left_window_size=2)
    assert_parity(model, feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset,causal", [(23, 0), (24, 1), (25, 0)])
def test_attention_fully_masked_rows_give_zero(opset, causal):
    mask = np.array([[False, False, False], [True, True, False], [True, False, True]])
    model, feeds = attention_model(f32(1, 2, 3, 8), f32(1, 2, 3, 8), f32(1, 2, 3, 8), mask=mask, opset=opset,
                                   **({"is_causal": 1} if causal else {}))
    got = assert_parity(model, feeds)[0]
    assert np.all(got[:, :, 0] == 0) and np.isfinite(got).all()


# --- Clip ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_clip_min_greater_than_max_gives_max(dtype):
    x = (rng.uniform(-5, 5, (3, 7)) * 3).astype(dtype)
    model, feeds = one_node("Clip", {"x": x}, {"lo": np.array(2, dtype), "hi": np.array(-1, dtype)})
    got = assert_parity(model, feeds)[0]
    assert np.all(got == -1)


def test_clip_keeps_nan():
    x = np.array([np.nan, -3.0, 0.5, 9.0], np.float32)
    model, feeds = one_node("Clip", {"x": x}, {"lo": np.array(-1, np.float32), "hi": np.array(1, np.float32)})
    got = assert_parity(model, feeds)[0]
    assert np.isnan(got[0]) and list(got[1:]) == [-1.0, 0.5, 1.0]


# --- old opsets are upgraded --------------------------------------------------------------------------------------
def test_opset_9_model_is_upgraded_and_reported(tmp_path):
    """Opset 9: Upsample (gone in 11), BatchNormalization and Pad's attribute forms."""
    nodes = [
        helper.make_node("Pad", ["x"], ["p"], pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant", value=0.5),
        helper.make_node("BatchNormalization", ["p", "g", "b", "m", "v"], ["n"], epsilon=1e-3),
        helper.make_node("Upsample", ["n", "scales"], ["y"], mode="nearest"),
    ]
    c = 3
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("g", f32(c, lo=0.5, hi=1.5)), ("b", f32(c)), ("m", f32(c)), ("v", f32(c, lo=0.5, hi=2.0)),
        ("scales", np.array([1, 1, 2, 2], np.float32))]]
    graph = helper.make_graph(nodes, "old", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 12, 14])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 4
    feeds = {"x": f32(1, c, 4, 5)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ms = convert(model, str(tmp_path))
    assert any("opset 9; upgraded to opset 11" in str(w.message) for w in caught)
    m = load(ms)
    assert m.get_metadata()["onnx_opset_upgraded_from"] == "9"
    got = m.predict(feeds)[0].get_data_to_numpy()
    np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-5)


# --- CastLike --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("src,like", [(np.float32, np.int64), (np.int64, np.float32), (np.float32, np.bool_)])
def test_castlike(src, like):
    x = (rng.uniform(-4, 4, (3, 5))).astype(src)
    model, feeds = one_node("CastLike", {"x": x}, {"like": np.zeros(2, like)}, opset=19)
    got = assert_parity(model, feeds)[0]
    assert got.dtype == np.dtype(like)


def test_castlike_in_a_function_body_expansion():
    """The `_expanded` bodies of ordinary operators (Elu here, as onnx writes them) use CastLike throughout."""
    from onnx.backend.test.loader import load_model_tests
    case = next(c for c in load_model_tests(kind="node") if c.name == "test_elu_expanded_ver18")
    assert any(n.op_type == "CastLike" for n in case.model.graph.node)
    inputs, _ = case.data_sets[0]
    assert_parity(case.model, {case.model.graph.input[0].name: inputs[0]})


# --- a scalar input fed as a one-element array ---------------------------------------------------------------------
def test_scalar_input_fed_as_one_element_array(tmp_path):
    model, _ = one_node("Mul", {"x": f32(2, 3), "s": np.array(2.0, np.float32)})
    m = load(convert(model, str(tmp_path)))
    x = f32(2, 3)
    for s in (np.array(3.0, np.float32), np.array([3.0], np.float32)):
        got = m.predict({"x": x, "s": s})[0].get_data_to_numpy()
        np.testing.assert_allclose(got, run_ort(model, {"x": x, "s": s})[0], rtol=1e-6)
        assert got.shape == (2, 3)
    with pytest.raises(ValueError, match="'s': expected shape"):
        m.predict({"x": x, "s": np.array([3.0, 4.0], np.float32)})


# --- com.microsoft::DynamicQuantizeLSTM (ONNX Runtime's quantize_dynamic of an LSTM) ------------------------------
@pytest.mark.parametrize("direction,per_channel", [("forward", False), ("bidirectional", True)])
def test_dynamic_quantize_lstm(direction, per_channel, tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    T, B, I, H = 6, 2, 8, 16
    dirs = 2 if direction == "bidirectional" else 1
    consts = {"W": f32(dirs, 4 * H, I, lo=-0.5, hi=0.5), "R": f32(dirs, 4 * H, H, lo=-0.5, hi=0.5),
              "B": f32(dirs, 8 * H, lo=-0.2, hi=0.2)}
    model, feeds = one_node("LSTM", {"x": f32(T, B, I)}, consts, attrs={"hidden_size": H, "direction": direction},
                            n_out=3)
    src, dst = str(tmp_path / "lstm.onnx"), str(tmp_path / "lstm_q.onnx")
    onnx.save(model, src)
    quantize_dynamic(src, dst, op_types_to_quantize=["LSTM"], per_channel=per_channel, weight_type=QuantType.QInt8)
    quantized = onnx.load(dst)
    assert [n.op_type for n in quantized.graph.node if n.domain == "com.microsoft"] == ["DynamicQuantizeLSTM"]
    # lite multiplies the float inputs by the dequantised weights: the reference is ONNX Runtime's float LSTM on those
    # weights. (ONNX Runtime's own DynamicQuantizeLSTM multiplies 8-bit inputs, and on CPUs without AVX-512 VNNI / AVX-VNNI
    # its u8 x s8 products saturate in 16 bits: 0.17 from the float LSTM on an AVX2-only Zen machine, where lite is
    # within 5e-3; so it is no reference.)
    init = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}

    def dequantised(name: str) -> np.ndarray:   # [dirs, in, 4H] codes -> ONNX LSTM's [dirs, 4H, in]
        codes = init[f"{name}_quantized"].astype(np.float32)
        scale = init[f"{name}_scale"].reshape(dirs, 1, -1)
        zero = init[f"{name}_zero_point"].astype(np.float32).reshape(dirs, 1, -1)
        return np.ascontiguousarray(((codes - zero) * scale).transpose(0, 2, 1))
    deq_model, _ = one_node("LSTM", {"x": feeds["x"]}, {"W": dequantised("W"), "R": dequantised("R"),
                                                 "B": consts["B"]},
                            attrs={"hidden_size": H, "direction": direction}, n_out=3)
    want = run_ort(deq_model, feeds)
    m = load(convert(quantized, str(tmp_path)))
    got = [t.get_data_to_numpy() for t in m.predict(feeds)]
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    float_out = run_ort(model, feeds)[0]
    assert np.abs(got[0] - float_out).max() < 0.05   # and it is the LSTM it quantised


# --- AveragePool whose window is larger than the input, with ceil_mode ------------------------------------------
@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("op", ["AveragePool", "MaxPool"])
def test_pool_kernel_larger_than_input_with_ceil_mode(op, count_include_pad):
    """transformers' EfficientNet pooler: AvgPool2d(1280, ceil_mode=True) over a 7x7 map."""
    attrs = {"kernel_shape": [12, 12], "strides": [12, 12], "ceil_mode": 1}
    if op == "AveragePool":
        attrs["count_include_pad"] = count_include_pad
    model, feeds = one_node(op, {"x": f32(2, 4, 7, 7)}, attrs=attrs)
    got = assert_parity(model, feeds)[0]
    assert got.shape == (2, 4, 1, 1)


def test_pool_kernel_larger_than_input_without_ceil_mode_is_refused_at_conversion(tmp_path):
    model, _ = one_node("AveragePool", {"x": f32(1, 1, 4, 4)}, attrs={"kernel_shape": [5, 5]})
    with pytest.raises(converter.ConverterError, match="larger than the padded input"):
        convert(model, str(tmp_path))
    assert not os.path.exists(tmp_path / "model.ms")


# --- refused at conversion, with the reason, instead of a wrong number or a refusal at predict ------------------
@pytest.mark.parametrize("op", ["LayerNormalization", "RMSNormalization"])
def test_attribute_lite_would_ignore_is_refused(op, tmp_path):
    """stash_type asks for the statistics in another precision; lite computes them in float32: refused rather
    than silently different."""
    x = f32(2, 3, 8)
    consts = {"scale": f32(8)}
    model, _ = one_node(op, {"x": x}, consts, attrs={"stash_type": TensorProto.FLOAT16}, opset=23)
    with pytest.raises(converter.ConverterError, match="attribute 'stash_type' not supported"):
        convert(model, str(tmp_path))
    # at its default (float32) it changes nothing and converts
    model, feeds = one_node(op, {"x": x}, consts, attrs={"stash_type": TensorProto.FLOAT}, opset=23)
    assert_parity(model, feeds, rtol=1e-4, atol=1e-5)


def test_dropout_with_run_time_training_mode_is_refused(tmp_path):
    model, _ = one_node("Dropout", {"x": f32(2, 3), "r": np.array(0.5, np.float32), "t": np.array(True)},
                        inputs=["x", "r", "t"])
    with pytest.raises(converter.ConverterError, match="training_mode is a run-time input"):
        convert(model, str(tmp_path))


def test_missing_kernel_is_refused_at_conversion(tmp_path):
    model, _ = one_node("Exp", {"x": rng.uniform(size=(2, 3))})   # float64: no CPU kernel
    with pytest.raises(converter.ConverterError, match=r"no kernel for: Exp\(float64\) at node 'exp_node'"):
        convert(model, str(tmp_path))
    assert not os.path.exists(tmp_path / "model.ms")


# --- ONNX Attention with a KV cache (past_key/past_value in, present_key/present_value out) and softcap -----------
def cache_model(q, k, v, past_k=None, past_v=None, mask=None, outputs=3, opset=24, **attrs):
    feeds = {"q": q, "k": k, "v": v}
    names = ["q", "k", "v", "mask" if mask is not None else ""]
    if mask is not None:
        feeds["mask"] = mask
    if past_k is not None:
        feeds.update({"past_k": past_k, "past_v": past_v})
        names += ["past_k", "past_v"]
    return one_node("Attention", feeds, attrs=attrs, opset=opset, inputs=names, n_out=outputs)


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("past,new", [(5, 1), (7, 3), (0, 4), (140, 2)])   # decode, chunk, first step, > a tile
def test_attention_with_a_kv_cache(past, new, causal):
    b, hq, hkv, d = 2, 4, 2, 8
    pk, pv = (f32(b, hkv, past, d), f32(b, hkv, past, d)) if past else (None, None)
    model, feeds = cache_model(f32(b, hq, new, d), f32(b, hkv, new, d), f32(b, hkv, new, d), pk, pv, is_causal=causal)
    y, present_k, present_v = assert_parity(model, feeds, rtol=1e-4, atol=1e-5)
    assert present_k.shape == (b, hkv, past + new, d)
    if past:
        np.testing.assert_array_equal(present_k[:, :, :past], pk)   # the past is carried over untouched


def test_attention_kv_cache_3d_operands_with_mask_and_window():
    b, s, hq, hkv, d, past = 1, 3, 4, 2, 8, 6
    mask = rng.uniform(size=(s, past + s)) > 0.2
    model, feeds = cache_model(f32(b, s, hq * d), f32(b, s, hkv * d), f32(b, s, hkv * d), f32(b, hkv, past, d),
                               f32(b, hkv, past, d), mask=mask, opset=25, q_num_heads=hq, kv_num_heads=hkv,
                               is_causal=1, left_window_size=4)
    assert_parity(model, feeds, rtol=1e-4, atol=1e-5)


def test_attention_kv_cache_decoding_step_by_step_equals_the_whole_sequence(tmp_path):
    """Feeding a sequence one token at a time through the cache gives the full causal attention's rows."""
    b, h, d, total = 1, 2, 8, 6
    q, k, v = f32(b, h, total, d), f32(b, h, total, d), f32(b, h, total, d)
    full, _ = cache_model(q, k, v, outputs=1, is_causal=1)
    want = run_ort(full, {"q": q, "k": k, "v": v})[0]
    step, _ = cache_model(q[:, :, :1], k[:, :, :1], v[:, :, :1], f32(b, h, 1, d), f32(b, h, 1, d), is_causal=1)
    step.graph.input[3].type.tensor_type.shape.dim[2].dim_param = "past"
    step.graph.input[4].type.tensor_type.shape.dim[2].dim_param = "past"
    m = load(convert(step, str(tmp_path)))
    y, pk, pv = [t.get_data_to_numpy() for t in m.predict({"q": q[:, :, :1], "k": k[:, :, :1], "v": v[:, :, :1],
                                                            "past_k": k[:, :, :0], "past_v": v[:, :, :0]})]
    rows = [y]
    for t in range(1, total):
        y, pk, pv = [o.get_data_to_numpy() for o in m.predict({"q": q[:, :, t:t + 1], "k": k[:, :, t:t + 1],
                                                                "v": v[:, :, t:t + 1], "past_k": pk, "past_v": pv})]
        rows.append(y)
    np.testing.assert_allclose(np.concatenate(rows, axis=2), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("softcap", [0.5, 5.0])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_softcap(softcap, causal):
    model, feeds = attention_model(f32(2, 2, 5, 8, lo=-3, hi=3), f32(2, 2, 7, 8, lo=-3, hi=3), f32(2, 2, 7, 8),
                                   opset=23, softcap=softcap, is_causal=causal)
    assert_parity(model, feeds, rtol=1e-4, atol=1e-5)


def test_upgrade_that_changes_the_interface_is_refused(tmp_path):
    """onnx.version_converter rewrites opset 8's batched Scan without its batch axis, changing the graph inputs:
    refused at conversion (the caller's arrays would not fit), not at predict."""
    from onnx.backend.test.loader import load_model_tests
    case = next(c for c in load_model_tests(kind="node") if c.name == "test_scan_sum")
    with pytest.raises(converter.ConverterError, match=r"changes the model's interface \(input 'initial' \[1, 2\] -> \[2\]"):
        convert(case.model, str(tmp_path))


def test_build_check_can_be_skipped(tmp_path):
    """--verifyBuild=off keeps the file; the runtime then refuses the shape at build, with the same reason."""
    from converter.cli import main
    model, _ = one_node("AveragePool", {"x": f32(1, 1, 4, 4)}, attrs={"kernel_shape": [5, 5]})
    onnx.save(model, str(tmp_path / "pool.onnx"))
    args = ["--fmk=ONNX", f"--modelFile={tmp_path / 'pool.onnx'}", f"--outputFile={tmp_path / 'pool'}"]
    assert main(args) == 1 and not os.path.exists(tmp_path / "pool.ms")
    assert main(args + ["--verifyBuild=off"]) == 0
    with pytest.raises(ValueError, match="larger than the padded input"):
        load(str(tmp_path / "pool.ms"))
