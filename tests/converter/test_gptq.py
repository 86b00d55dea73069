"""WEIGHT_QUANT algorithm=GPTQ (converter/quantization/gptq.py): the im2col features match the Conv, the rounding
stays on round-to-nearest's grid and lowers the layer's output error on correlated inputs, the compensating
target undoes a known input distortion, and converted models run closer to the float model than
round-to-nearest on held-back inputs."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
import lite
from converter.ir import ConverterError, Node
from converter.quantization import gptq, parse_config, quantize
from converter.quantization.encoding import decode
from parity import run_ort

rng = np.random.default_rng(11)


def conv_onnx(w: np.ndarray, x_shape, attrs: dict) -> onnx.ModelProto:
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph([node], "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("attrs,group", [
    ({"pads": [1, 1, 1, 1]}, 1),
    ({"strides": [2, 2], "pads": [0, 1, 2, 0]}, 1),
    ({"dilations": [2, 1], "pads": [2, 1, 2, 1]}, 1),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, 1),
    ({"auto_pad": "SAME_LOWER", "strides": [2, 2]}, 1),
    ({"pads": [1, 1, 1, 1], "group": 6}, 6),
    ({"pads": [1, 1, 1, 1], "group": 2}, 2),
])
def test_conv_features_times_weight_rows_is_the_conv(attrs, group):
    c, o = 6, 4 if group != 6 else 6
    w = rng.standard_normal((o, c // group, 3, 3)).astype(np.float32)
    x = rng.standard_normal((2, c, 9, 8)).astype(np.float32)
    expected = run_ort(conv_onnx(w, x.shape, attrs), {"x": x})[0]
    ir_attrs = {k: v for k, v in attrs.items() if k != "auto_pad"}
    ir_attrs["auto_pad"] = {"SAME_UPPER": 1, "SAME_LOWER": 2}.get(attrs.get("auto_pad"), 0)
    node = Node("c", "Conv", ["x", "w"], ["y"], ir_attrs)
    cols = gptq.layer_features(node, w, x)                 # [groups, K, N * pixels]
    rows, back = gptq.weight_rows(node, w)                 # [groups, O / groups, K]
    assert np.array_equal(back(rows), w)
    y = np.matmul(rows, cols)                              # [groups, O / groups, N * pixels]
    n, oh, ow = expected.shape[0], expected.shape[2], expected.shape[3]
    y = y.reshape(o, n, oh, ow).transpose(1, 0, 2, 3)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op,attrs,shape", [("MatMul", {}, (12, 7)), ("Gemm", {"trans_b": 1}, (7, 12)),
                                            ("Gemm", {}, (12, 7))])
def test_matmul_features_times_weight_rows_is_the_product(op, attrs, shape):
    w = rng.standard_normal(shape).astype(np.float32)
    x = rng.standard_normal((3, 5, 12) if op == "MatMul" else (5, 12)).astype(np.float32)
    node = Node("m", op, ["x", "w"], ["y"], attrs)
    rows, back = gptq.weight_rows(node, w)
    assert np.array_equal(back(rows), w)
    y = np.matmul(rows, gptq.layer_features(node, w, x))[0].T
    expected = x.reshape(-1, 12) @ (w.T if attrs.get("trans_b") else w)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def correlated_inputs(k: int, n: int) -> np.ndarray:
    """[k, n] features with a strong shared component and unequal energies (as neighbouring pixels have)."""
    mix = rng.standard_normal((k, k)) * 0.3 + np.eye(k)
    return (mix @ rng.standard_normal((k, n)) + 2.0 * rng.standard_normal((1, n))).astype(np.float32)


@pytest.mark.parametrize("bits,symmetric,group", [(8, True, 0), (4, True, 0), (4, False, 16), (8, False, 16)])
def test_gptq_rounding_stays_on_the_grid_and_lowers_the_output_error(bits, symmetric, group):
    k, r = 160, 24                                         # more than gptq.BLOCK columns: the lazy update runs
    w = rng.standard_normal((r, k)).astype(np.float32)     # Gemm trans_b layout: rows are outputs
    x = correlated_inputs(k, 4000)
    layout = (1, group) if group else (0, 0)
    grid = quantize(w, bits, *layout, symmetric)
    scale, zero = gptq.element_params(grid, w.shape)
    qmax = 2 ** (bits - 1) - 1
    lo, hi = (-qmax, qmax) if symmetric else (0, 2 ** bits - 1)
    np.testing.assert_allclose(decode(grid, w.shape), (np.clip(np.rint(w / scale) + zero, lo, hi) - zero) * scale,
                               rtol=1e-6, atol=1e-7)   # the maps are the grid decode uses
    h = (x.astype(np.float64) @ x.T.astype(np.float64) / x.shape[1])[None]
    q = gptq.gptq_round(w[None], h, scale[None], zero[None], lo, hi, 0.01)[0]
    codes = q / scale + zero
    np.testing.assert_allclose(codes, np.rint(codes), atol=1e-3)   # every value is a code of the grid
    assert codes.min() >= lo - 1e-3 and codes.max() <= hi + 1e-3
    stored = quantize(q, bits, *layout, symmetric, like=grid)
    np.testing.assert_allclose(decode(stored, w.shape), q, rtol=1e-6, atol=1e-7)   # same codes when written
    rtn = decode(grid, w.shape)
    err_rtn = np.linalg.norm((rtn - w) @ x)
    err_gptq = np.linalg.norm((q - w) @ x)
    assert err_gptq < 0.75 * err_rtn, (err_gptq, err_rtn)
    assert np.linalg.norm(q - w) > np.linalg.norm(rtn - w)   # it trades weight error for output error


def test_like_requires_the_same_layout():
    w = rng.standard_normal((8, 32)).astype(np.float32)
    with pytest.raises(ValueError, match="another layout"):
        quantize(w, 8, 0, 0, True, like=quantize(w, 8, 1, 16, True))
    with pytest.raises(ValueError, match="another layout"):
        quantize(w, 8, 0, 0, True, like=quantize(w, 8, 0, 0, False))


def test_compensating_target_undoes_a_linear_input_distortion():
    k, r, n = 16, 5, 20000
    w = rng.standard_normal((1, r, k))
    x = correlated_inputs(k, n).astype(np.float64)
    distort = np.eye(k) + 0.2 * rng.standard_normal((k, k))
    xq = distort @ x                                       # what the quantised model feeds this layer
    cross = (x @ xq.T / n)[None]
    hess = (xq @ xq.T / n)[None]
    t = gptq.compensating_target(w, cross, hess, 1e-6)
    np.testing.assert_allclose(t @ xq, w @ x, rtol=1e-3, atol=2e-3 * np.abs(w @ x).max())
    same = gptq.compensating_target(w, hess, hess, 0.01)   # undistorted inputs: the weights themselves
    np.testing.assert_allclose(same, w, rtol=1e-4, atol=1e-5)


def cnn_mlp(path) -> dict[str, tuple[int, ...]]:
    """Conv 3x3 -> Relu -> depthwise 3x3 -> Relu -> Conv 1x1 -> GlobalAveragePool -> Flatten -> Gemm, spatially
    smooth weights, so neighbouring features are correlated as in an image model."""
    def w(*shape, gain=1.0):
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) * gain * np.sqrt(2.0 / fan_in)).astype(np.float32)
    inits = {"w1": w(24, 8, 3, 3), "b1": np.full(24, 0.1, np.float32), "w2": w(24, 1, 3, 3),
             "w3": w(32, 24, 1, 1), "w4": w(10, 32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w2"], ["d"], pads=[1, 1, 1, 1], group=24),
             helper.make_node("Relu", ["d"], ["dr"]),
             helper.make_node("Conv", ["dr", "w3"], ["p"]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "w4"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return {"x": (1, 8, 16, 16)}


def smooth_images(count: int, seed: int) -> list[np.ndarray]:
    r = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        img = r.standard_normal((1, 8, 18, 18)).astype(np.float32)
        out.append(((img[:, :, :-2, :-2] + img[:, :, 1:-1, 1:-1] + img[:, :, 2:, 2:]) / 3 + 0.3).astype(np.float32))
    return out


def predict(path: str, images: list[np.ndarray]) -> np.ndarray:
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, lite.Context())
    return np.concatenate([m.predict({"x": x})[0].get_data_to_numpy().ravel() for x in images]).astype(np.float64)


@pytest.mark.parametrize("bits,group,symmetric", [(8, 0, True), (4, 0, True), (4, 8, False)])
def test_gptq_model_is_closer_to_float_than_round_to_nearest_on_held_back_inputs(tmp_path, bits, group, symmetric):
    cnn_mlp(tmp_path / "m.onnx")
    cal = tmp_path / "cal"
    cal.mkdir()
    for i, img in enumerate(smooth_images(6, 1)):
        np.save(cal / f"{i}.npy", img)
    common = (f"[common_quant_param]\nquant_type=WEIGHT_QUANT\nbit_num={bits}\nmin_quant_weight_channel=1\n"
              f"[weight_quant_param]\ngroup_size={group}\nsymmetric={str(symmetric).lower()}\n")
    (tmp_path / "rtn.cfg").write_text(common)
    (tmp_path / "gptq.cfg").write_text(common + f"algorithm=GPTQ\n[data_preprocess_param]\ncalibrate_path=x:{cal}\n"
                                                "input_type=NPY\n")
    conv = converter.Converter()
    f32 = conv.convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "f32"))
    rtn = conv.convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "rtn"), config_file=str(tmp_path / "rtn.cfg"))
    gq = conv.convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "gq"), config_file=str(tmp_path / "gptq.cfg"))
    assert gq.quant_report["compressed_tensors"] == rtn.quant_report["compressed_tensors"] == 4
    assert gq.file_bytes == rtn.file_bytes   # the same layout: only the codes differ
    held = smooth_images(4, 99)
    ref = predict(f32.output_file, held)
    err_rtn = np.linalg.norm(predict(rtn.output_file, held) - ref)
    err_gq = np.linalg.norm(predict(gq.output_file, held) - ref)
    assert err_gq < 0.8 * err_rtn, (err_gq, err_rtn)


@pytest.mark.parametrize("text,message", [
    ("[weight_quant_param]\nalgorithm=GPTQ\n", "q.cfg:2: algorithm=GPTQ rounds on calibration data"),
    ("[common_quant_param]\nquant_type=FULL_QUANT\n[weight_quant_param]\nalgorithm=GPTQ\n",
     "q.cfg:4: algorithm=GPTQ applies to WEIGHT_QUANT, not FULL_QUANT"),
    ("[weight_quant_param]\nalgorithm=AWQ\n", "q.cfg:2: algorithm: 'AWQ' is not one of RTN, GPTQ"),
    ("[weight_quant_param]\ndamp=0.05\n", "q.cfg:2: damp applies to algorithm=GPTQ"),
    ("[weight_quant_param]\nalgorithm=GPTQ\ndamp=0\n", "q.cfg:3: damp: 0.0 is outside (0.0, 1.0]"),
])
def test_gptq_config_errors_name_the_line(tmp_path, text, message):
    path = tmp_path / "q.cfg"
    path.write_text(text)
    with pytest.raises(ConverterError) as e:
        parse_config(str(path))
    assert message in str(e.value), str(e.value)


def test_gptq_config_parses(tmp_path):
    (tmp_path / "cal").mkdir()
    path = tmp_path / "q.cfg"
    path.write_text(f"[weight_quant_param]\nalgorithm=gptq\ndamp=0.05\n[data_preprocess_param]\n"
                    f"calibrate_path=x:{tmp_path / 'cal'}\n")
    cfg = parse_config(str(path))
    assert (cfg.algorithm, cfg.damp) == ("GPTQ", 0.05)


def test_later_layers_compensate_the_error_earlier_layers_left(tmp_path, monkeypatch):
    """The same 4-bit conversion with each layer's target fixed at its own float weights (plain GPTQ on the
    quantised model's inputs) ends further from the float model on held-back inputs."""
    cnn_mlp(tmp_path / "m.onnx")
    cal = tmp_path / "cal"
    cal.mkdir()
    for i, img in enumerate(smooth_images(6, 1)):
        np.save(cal / f"{i}.npy", img)
    (tmp_path / "q.cfg").write_text(
        "[common_quant_param]\nquant_type=WEIGHT_QUANT\nbit_num=4\nmin_quant_weight_channel=1\n[weight_quant_param]\n"
        f"algorithm=GPTQ\n[data_preprocess_param]\ncalibrate_path=x:{cal}\ninput_type=NPY\n")
    conv = converter.Converter()
    f32 = conv.convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "f32"))
    both = conv.convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "both"), config_file=str(tmp_path / "q.cfg"))
    monkeypatch.setattr(gptq, "compensating_target", lambda rows, cross, hessian, damp: rows)
    plain = conv.convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "plain"), config_file=str(tmp_path / "q.cfg"))
    held = smooth_images(4, 99)
    ref = predict(f32.output_file, held)
    err_both = np.linalg.norm(predict(both.output_file, held) - ref)
    err_plain = np.linalg.norm(predict(plain.output_file, held) - ref)
    assert err_both < 0.9 * err_plain, (err_both, err_plain)


@pytest.mark.parametrize("shared,expected", [(0.0, "ridge"), (3.0, "plain")])
def test_damping_of_a_rank_deficient_layer_is_chosen_on_the_other_samples(shared, expected):
    """16 rows for 64 features: with independent features the plain damping's rounding moves errors into
    directions the other rows do show (the ridge wins); with one dominant shared direction the 16 rows see
    what matters (the plain damping wins)."""
    k, n = 64, 16
    local = np.random.default_rng(3)
    w = local.standard_normal((1, 16, k)).astype(np.float32)
    grid = quantize(w[0], 4, 0, 0, True)
    scale, zero = gptq.element_params(grid, w[0].shape)
    halves = []
    for _ in range(2):
        x = (local.standard_normal((k, n)) + shared * local.standard_normal((1, n))).astype(np.float32)
        acc = gptq.MomentAccumulator()
        acc.add(x[None], x[None])
        halves.append(acc)
    ridge = 16 * k / n
    chosen = gptq.validated_damping(w, halves, (scale[None], zero[None], -7, 7), (0.01, ridge))
    assert chosen == (ridge if expected == "ridge" else 0.01)


def test_calibration_run_is_cut_to_the_nodes_it_needs(tmp_path):
    """observe() runs only what computes the asked tensors; a graph input comes straight from the samples."""
    from converter.passes import run_pipeline
    from converter.quantization.calibration import _cut, observe
    from converter.quantization.config import QuantConfig
    cnn_mlp(tmp_path / "m.onnx")
    graph = converter.Converter().load("ONNX", str(tmp_path / "m.onnx"))
    run_pipeline(graph)
    first = graph.nodes[0]
    cut = _cut(graph, [first.outputs[0]])
    assert [n.name for n in cut.nodes] == [first.name] and cut.outputs == [first.outputs[0]]
    assert set(cut.tensors) == {"x", *[i for i in first.inputs if i], first.outputs[0]}
    cal = tmp_path / "cal"
    cal.mkdir()
    images = smooth_images(2, 5)
    for i, img in enumerate(images):
        np.save(cal / f"{i}.npy", img)
    cfg = QuantConfig(calibrate_path={"x": str(cal)}, input_type="NPY")
    seen = observe(graph, ["x", first.outputs[0]], cfg)
    for img, got in zip(images, seen["x"]):
        np.testing.assert_array_equal(got, img)
    expected = [run_ort(conv_onnx(graph.tensors[first.inputs[1]].data, img.shape, {"pads": [1, 1, 1, 1]}), {"x": img})[0]
                for img in images]
    for e, got in zip(expected, seen[first.outputs[0]]):
        np.testing.assert_allclose(got, np.maximum(e + 0.1, 0), rtol=1e-4, atol=1e-4)   # conv + bias 0.1 + ReLU
