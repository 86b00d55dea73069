"""Reduced-precision weight storage (format 1.7): --fp16 and WEIGHT_QUANT int8/int4 written by the converter,
decoded by the runtime at load. The runtime's decode is checked against the converter's own arithmetic
(`quantization.decode`) through ONNX Runtime on the decoded weights; configs and corrupt records fail with
errors that name the line or the tensor."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
import lite
from converter.ir import ConverterError, Graph, Node, Tensor
from converter.quantization import decode, parse_config, quantize, to_bfloat16, to_float16
from converter.writer import write_ms
from parity import load, run_ort

rng = np.random.default_rng(5)


def weights_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """MatMul [40, 48], Gemm with transB [24, 48], Conv [16, 8, 3, 3] and an embedding Gather [50, 40]."""
    w = {"mm": rng.standard_normal((40, 48)).astype(np.float32),
         "gemm": rng.standard_normal((24, 48)).astype(np.float32),
         "conv": rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.3,
         "emb": rng.standard_normal((50, 40)).astype(np.float32)}
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"]),
             helper.make_node("MatMul", ["e", "mm"], ["h"]),
             helper.make_node("Gemm", ["h", "gemm"], ["y"], transB=1),
             helper.make_node("Conv", ["img", "conv"], ["z"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "w", [helper.make_tensor_value_info("ids", TensorProto.INT64, [6]),
                                           helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 8, 9, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 24]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 16, 9, 9])],
                              [numpy_helper.from_array(v, k) for k, v in w.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w


FEEDS = {"ids": np.array([0, 3, 49, 7, 7, 21], np.int64), "img": rng.standard_normal((1, 8, 9, 9)).astype(np.float32)}
# (channel axis, reduction axis) per weight, as apply_weight_quant picks them.
AXES = {"mm": (1, 0), "gemm": (0, 1), "conv": (0, 1), "emb": (0, 1)}


def write_cfg(path, text: str) -> str:
    with open(path, "w") as f:
        f.write(text)
    return str(path)


def with_weights(model: onnx.ModelProto, weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for init in m.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(weights[init.name], init.name))
    return m


@pytest.mark.parametrize("bits,per_channel,group,symmetric", [
    (8, True, 0, True), (8, True, 0, False), (8, False, 0, True), (8, True, 16, True),
    (4, True, 0, True), (4, True, 16, True), (4, True, 16, False), (4, True, 7, True)])
def test_runtime_decodes_weight_quant_exactly(tmp_path, bits, per_channel, group, symmetric):
    model, w = weights_model()
    onnx.save(model, tmp_path / "m.onnx")
    cfg = write_cfg(tmp_path / "q.cfg", f"""
[common_quant_param]
quant_type=WEIGHT_QUANT
bit_num={bits}
min_quant_weight_channel=1
[weight_quant_param]
per_channel={str(per_channel).lower()}
group_size={group}
symmetric={str(symmetric).lower()}
""")
    result = converter.Converter().convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "q"), config_file=cfg)
    assert result.quant_report["compressed_tensors"] == 4
    # The same codes, decoded by the converter's arithmetic, run in ONNX Runtime.
    decoded = {}
    for name, v in w.items():
        ch, red = AXES[name]
        axis, g = (-1, 0) if not per_channel else ((red, group) if group and v.shape[red] > group else (ch, 0))
        decoded[name] = decode(quantize(v, bits, axis, g, symmetric), v.shape)
    want = run_ort(with_weights(model, decoded), FEEDS)
    got = [t.get_data_to_numpy() for t in load(result.output_file).predict(FEEDS)]
    # int4 products widen each code to 1 + code/16 and take the zero point off through the row's sum (skinny_gemm.h):
    # float32 rounding on sums ~10x the size of the result's terms, ~1e-5 of |x| . |w| instead of ~1e-6.
    tol = 1e-5 if bits == 8 else 2e-4
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=tol, atol=tol)
    # And it is a quantisation, not a copy: the float model differs by about a quantisation step.
    exact = run_ort(model, FEEDS)[0]
    assert 0 < np.abs(got[0] - exact).max() < (0.1 if bits == 8 else 2.0) * np.abs(exact).max()


def write_matmul(path, values: np.ndarray, stored, rows: int) -> str:
    """A .ms file of y = x @ w written straight from the IR, w holding `values` with storage `stored`."""
    k, n = values.shape
    g = Graph(name="mm")
    g.tensors["x"] = Tensor("x", np.dtype(np.float32), [rows, k])
    g.tensors["w"] = Tensor("w", np.dtype(np.float32), [k, n], values)
    g.tensors["w"].stored = stored
    g.tensors["y"] = Tensor("y", np.dtype(np.float32), [rows, n])
    g.nodes.append(Node("mm", "MatMul", ["x", "w"], ["y"]))
    g.inputs, g.outputs = ["x"], ["y"]
    write_ms(g, str(path))
    return str(path)


@pytest.mark.parametrize("encode", [to_float16, to_bfloat16], ids=["float16", "bfloat16"])
def test_runtime_decodes_half_storage(tmp_path, encode):
    model, w = weights_model()
    stored = encode(w["mm"])
    path = write_matmul(tmp_path / "h.ms", decode(stored, (40, 48)), stored, 6)
    x = rng.standard_normal((6, 40)).astype(np.float32)
    got = load(path).predict({"x": x})[0].get_data_to_numpy()
    np.testing.assert_allclose(got, x @ decode(stored, (40, 48)), rtol=1e-5, atol=1e-5)
    assert os.path.getsize(tmp_path / "h.ms") < w["mm"].nbytes * 0.6


def test_fp16_option_halves_the_file_and_reports(tmp_path):
    model, w = weights_model()
    onnx.save(model, tmp_path / "m.onnx")
    plain = converter.Converter().convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "f32"))
    half = converter.Converter().convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "f16"), fp16=True)
    assert half.file_bytes < 0.6 * plain.file_bytes
    rep = half.quant_report
    assert rep["file_bytes_float"] == plain.file_bytes and rep["file_bytes"] == half.file_bytes
    assert all(o["cosine"] > 0.9999 for o in rep["outputs"])
    with open(half.report_file) as f:
        assert json.load(f)["outputs"][0]["output"] == "y"
    got = load(half.output_file).predict(FEEDS)[0].get_data_to_numpy()
    want = run_ort(with_weights(model, {k: v.astype(np.float16).astype(np.float32) for k, v in w.items()}), FEEDS)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_fp16_keeps_out_of_range_and_tiny_constants():
    from converter.quantization import apply_fp16
    g = Graph()
    g.tensors["a"] = Tensor("a", np.dtype(np.float32), [20], np.full(20, -3.4e38, np.float32))
    g.tensors["b"] = Tensor("b", np.dtype(np.float32), [2], np.ones(2, np.float32))
    g.tensors["c"] = Tensor("c", np.dtype(np.float32), [20], np.ones(20, np.float32))
    assert apply_fp16(g) == ["c"]


def test_weight_quant_thresholds_and_skip_list(tmp_path):
    model, _ = weights_model()
    onnx.save(model, tmp_path / "m.onnx")
    cfg = write_cfg(tmp_path / "q.cfg", "[common_quant_param]\nquant_type=WEIGHT_QUANT\nbit_num=8\n"
                                        "min_quant_weight_size=1500\nmin_quant_weight_channel=1\nskip_quant_node=\n")
    r = converter.Converter().convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "a"), config_file=cfg)
    assert r.quant_report["compressed_tensors"] == 2   # mm (1920) and emb (2000); gemm 1152 and conv 1152 below
    cfg2 = write_cfg(tmp_path / "q2.cfg", "[common_quant_param]\nquant_type=WEIGHT_QUANT\nmin_quant_weight_channel=20\n")
    r2 = converter.Converter().convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "b"), config_file=cfg2)
    assert r2.quant_report["compressed_tensors"] == 3   # conv has 16 output channels
    skip = write_cfg(tmp_path / "q3.cfg", "[common_quant_param]\nquant_type=WEIGHT_QUANT\nmin_quant_weight_channel=1\n"
                                          f"skip_quant_node={model.graph.node[1].name or 'x'}\n")
    model.graph.node[1].name = model.graph.node[1].name or "x"
    onnx.save(model, tmp_path / "m.onnx")
    r3 = converter.Converter().convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "c"), config_file=skip)
    assert r3.quant_report["compressed_tensors"] == 3   # the MatMul's weight is skipped


@pytest.mark.parametrize("text,message", [
    ("[common_quant_param]\nquant_type=WEIGHT_QUANT\n[mystery]\n", "q.cfg:3: unknown section [mystery]"),
    ("[common_quant_param]\nbits=8\n", "q.cfg:2: unknown key 'bits' in [common_quant_param]"),
    ("[common_quant_param]\nbit_num=3\n", "q.cfg:2: bit_num=3: weight quantisation supports 8 and 4 bits"),
    ("[common_quant_param]\nbit_num=eight\n", "q.cfg:2: bit_num: invalid literal"),
    ("[weight_quant_param]\nper_channel=maybe\n", "q.cfg:2: per_channel: 'maybe' is not a boolean"),
    ("[common_quant_param]\nbit_num=8\nbit_num=4\n", "q.cfg:3: 'bit_num' in [common_quant_param] repeats line 2"),
    ("bit_num=8\n", "q.cfg:1: 'bit_num' comes before any [section]"),
    ("[common_quant_param]\nquant_type=SOME\n", "q.cfg:2: quant_type: 'SOME' is not one of"),
    ("[data_preprocess_param]\ncalibrate_path=x:/no/such/dir\n", "calibration directory '/no/such/dir' for input 'x'"),
    ("[common_quant_param]\nquant_type=FULL_QUANT\nbit_num=3\n", "q.cfg:3: FULL_QUANT stores 8- or 4-bit weight codes"),
    ("[common_quant_param]\nquant_type=DYNAMIC_QUANT\n[full_quant_param]\nbias_correction=true\n",
     "q.cfg:4: bias_correction=true applies to FULL_QUANT"),
    ("[full_quant_param]\nactivation_quant_method=AVG\n", "q.cfg:2: activation_quant_method: 'AVG' is not one of"),
    ("[common_quant_param]\nquant_type=FULL_QUANT\ninteger_weight_bits=5\n", "q.cfg:3: integer_weight_bits: 5 is outside"),
    ("[common_quant_param]\nquant_type=WEIGHT_QUANT\ninteger_weight_bits=6\n",
     "q.cfg:3: integer_weight_bits applies to FULL_QUANT and DYNAMIC_QUANT with bit_num=8"),
])
def test_config_errors_name_the_line(tmp_path, text, message):
    cfg = write_cfg(tmp_path / "q.cfg", text)
    with pytest.raises(ConverterError) as e:
        parse_config(cfg)
    assert message in str(e.value), str(e.value)


def test_config_keys_parse(tmp_path):
    d = tmp_path / "calib"
    d.mkdir()
    cfg = parse_config(write_cfg(tmp_path / "q.cfg", f"""# comment
[common_quant_param]
quant_type = weight_quant
bit_num = 4
min_quant_weight_size = 100
min_quant_weight_channel = 8
skip_quant_node = a, b
[weight_quant_param]
per_channel = true
group_size = 128
symmetric = false
[data_preprocess_param]
calibrate_path = ids:{d}
calibrate_size = 10
input_type = NPY
"""))
    assert (cfg.quant_type, cfg.bit_num, cfg.min_quant_weight_size, cfg.min_quant_weight_channel) == ("WEIGHT_QUANT", 4, 100, 8)
    assert cfg.skip_quant_node == ["a", "b"] and cfg.group_size == 128 and not cfg.symmetric
    assert cfg.calibrate_path == {"ids": str(d)} and cfg.calibrate_size == 10 and cfg.input_type == "NPY"


def test_report_runs_on_calibration_files(tmp_path):
    model, _ = weights_model()
    onnx.save(model, tmp_path / "m.onnx")
    for name in ("ids", "img"):
        (tmp_path / name).mkdir()
    for i in range(3):
        np.save(tmp_path / "ids" / f"{i}.npy", rng.integers(0, 50, 6).astype(np.int64))
        rng.standard_normal((1, 8, 9, 9)).astype(np.float32).tofile(tmp_path / "img" / f"{i}.bin")
    cfg = write_cfg(tmp_path / "q.cfg", f"[common_quant_param]\nquant_type=WEIGHT_QUANT\nmin_quant_weight_channel=1\n"
                                        f"[data_preprocess_param]\ncalibrate_path=ids:{tmp_path / 'ids'},img:{tmp_path / 'img'}\n"
                                        "input_type=NPY\n")
    with pytest.raises(ConverterError, match="has no \\*.npy files"):   # img holds .bin files
        converter.Converter().convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "q"), config_file=cfg)
    for i in range(3):
        np.save(tmp_path / "img" / f"{i}.npy", rng.standard_normal((1, 8, 9, 9)).astype(np.float32))
    r = converter.Converter().convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "q"), config_file=cfg)
    assert r.quant_report["inputs"] == "3 calibration samples"
    assert all(o["cosine"] > 0.999 for o in r.quant_report["outputs"])


def test_cli_fp16_and_config(tmp_path, capsys):
    from converter.cli import main
    model, _ = weights_model()
    onnx.save(model, tmp_path / "m.onnx")
    assert main(["--fmk=ONNX", f"--modelFile={tmp_path / 'm.onnx'}", f"--outputFile={tmp_path / 'h'}", "--fp16=on"]) == 0
    out = capsys.readouterr().out
    assert "accuracy vs the float model" in out and "CONVERT RESULT SUCCESS:0" in out
    assert os.path.exists(tmp_path / "h.quant_report.json")
    bad = write_cfg(tmp_path / "bad.cfg", "[common_quant_param]\nbit_num=2\n")
    assert main(["--fmk=ONNX", f"--modelFile={tmp_path / 'm.onnx'}", f"--outputFile={tmp_path / 'b'}",
                 f"--configFile={bad}"]) == 1
    assert "bad.cfg:2: bit_num=2" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "b.ms")


def test_writer_keeps_float_when_a_pass_changed_a_stored_constant(tmp_path):
    w = rng.standard_normal((8, 4)).astype(np.float32)
    path = write_matmul(tmp_path / "s.ms", w, quantize(w, 8, 1), 2)   # not the decoded values: stale storage
    x = rng.standard_normal((2, 8)).astype(np.float32)
    got = load(path).predict({"x": x})[0].get_data_to_numpy()
    np.testing.assert_allclose(got, x @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mutate,message", [
    (lambda s: setattr(s, "scale", s.scale[:3]), "has 3 scales, its quantisation layout needs 4"),
    (lambda s: setattr(s, "data", s.data[:-1]), "holds 31 bytes, 32 8-bit codes need 32"),
    (lambda s: setattr(s, "bits", 3), "has 3-bit codes"),
    (lambda s: setattr(s, "axis", 5), "has quantisation axis 5 for rank 2"),
    (lambda s: setattr(s, "scale", np.full(4, np.inf, np.float32)), "has a non-finite scale"),
    (lambda s: setattr(s, "zero_point", np.zeros(2, np.int64)), "has 2 zero points for 4 scales"),
    (lambda s: setattr(s, "scale", None), "has no quantisation scales"),
])
def test_corrupt_quantised_weights_are_rejected(tmp_path, monkeypatch, mutate, message):
    import converter.writer
    monkeypatch.setattr(converter.writer, "_stored_matches", lambda t: True)   # write the broken record as is
    s = quantize(np.ones((8, 4), np.float32), 8, 1)
    mutate(s)
    path = write_matmul(tmp_path / "c.ms", np.ones((8, 4), np.float32), s, 2)
    with pytest.raises(lite.ModelFormatError, match="constant 'w'") as e:
        load(path)
    assert message in str(e.value), str(e.value)


# ---------------------------------------------------------------------------------------- pre-quantised ONNX
def float_matmul(k: int, n: int, opset: int = 21) -> onnx.ModelProto:
    w = rng.standard_normal((k, n)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, n])], [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("fmt", ["QOperator", "QDQ"])
@pytest.mark.parametrize("k,block,symmetric", [(96, 32, False), (96, 32, True), (100, 32, False), (256, 128, False)])
def test_onnxruntime_weight_only_int4_models_import(tmp_path, fmt, k, block, symmetric):
    """ONNX Runtime's MatMulNBitsQuantizer output (MatMulNBits, or DequantizeLinear of int4 blocks in QDQ
    form) converts to a MatMul whose weight the file keeps as the same 4-bit codes; outputs match ONNX
    Runtime running the quantised model."""
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization import matmul_nbits_quantizer as mnb
    cfg = mnb.DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=symmetric,
                                           quant_format=getattr(QuantFormat, fmt))
    q = mnb.MatMulNBitsQuantizer(float_matmul(k, 40), algo_config=cfg)
    q.process()
    qmodel = q.model.model
    ops = {n.op_type for n in qmodel.graph.node}
    assert ("MatMulNBits" in ops) if fmt == "QOperator" else ("DequantizeLinear" in ops), ops
    onnx.save(qmodel, tmp_path / "q.onnx")
    result = converter.Converter().convert("ONNX", str(tmp_path / "q.onnx"), str(tmp_path / "q"))
    x = rng.standard_normal((3, k)).astype(np.float32)
    got = load(result.output_file).predict({"x": x})[0].get_data_to_numpy()
    want = run_ort(qmodel, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert result.weight_bytes < k * 40 * 4 / 5   # 4-bit codes plus scales, not float32


def dq_model(codes: onnx.TensorProto, scale: np.ndarray, zp: onnx.TensorProto | None, attrs: dict,
             k: int, n: int) -> onnx.ModelProto:
    inits = [codes, numpy_helper.from_array(scale, "s")] + ([zp] if zp is not None else [])
    nodes = [helper.make_node("DequantizeLinear", ["q", "s"] + (["z"] if zp is not None else []), ["w"], **attrs),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    g = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def test_dequantize_linear_weight_forms(tmp_path):
    k, n = 64, 24
    cases = {
        "int8 per axis": dq_model(numpy_helper.from_array(rng.integers(-127, 128, (k, n)).astype(np.int8), "q"),
                                  rng.uniform(0.01, 0.1, n).astype(np.float32), None, {"axis": 1}, k, n),
        "uint8 per tensor": dq_model(numpy_helper.from_array(rng.integers(0, 256, (k, n)).astype(np.uint8), "q"),
                                     np.array(0.02, np.float32), numpy_helper.from_array(np.array(128, np.uint8), "z"),
                                     {}, k, n),
        "int4 blocked": dq_model(helper.make_tensor("q", TensorProto.INT4, [k, n], rng.integers(-8, 8, k * n).tolist()),
                                 rng.uniform(0.01, 0.1, (k // 16, n)).astype(np.float32), None,
                                 {"axis": 0, "block_size": 16}, k, n),
        "uint4 blocked, zero points": dq_model(
            helper.make_tensor("q", TensorProto.UINT4, [k, n], rng.integers(0, 16, k * n).tolist()),
            rng.uniform(0.01, 0.1, (k // 32, n)).astype(np.float32),
            helper.make_tensor("z", TensorProto.UINT4, [k // 32, n], rng.integers(0, 16, (k // 32) * n).tolist()),
            {"axis": 0, "block_size": 32}, k, n),
    }
    for name, model in cases.items():
        onnx.save(model, tmp_path / "m.onnx")
        result = converter.Converter().convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "m"))
        x = rng.standard_normal((2, k)).astype(np.float32)
        got = load(result.output_file).predict({"x": x})[0].get_data_to_numpy()
        want = run_ort(model, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)
        bits = 4 if "4" in name else 8
        assert result.weight_bytes < k * n * bits / 8 + 2048, (name, result.weight_bytes)   # the codes, not floats


def test_quantize_dequantize_of_activations(tmp_path):
    """QuantizeLinear/DequantizeLinear on computed tensors: per tensor and per axis, uint8 and int8, against
    ONNX Runtime (exact: the same round-half-to-even of the same float32 quotient); blocked is a clear error."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], axis=1),
             helper.make_node("QuantizeLinear", ["d", "s0", "z0"], ["q8"]),
             helper.make_node("DequantizeLinear", ["q8", "s0", "z0"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0.05, 0.1, 0.02], np.float32), "s"),
             numpy_helper.from_array(np.array([128, 100, 3], np.uint8), "z"),
             numpy_helper.from_array(np.array(0.03, np.float32), "s0"), numpy_helper.from_array(np.array(-5, np.int8), "z0")]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 5]),
                           helper.make_tensor_value_info("q", TensorProto.UINT8, [2, 3, 5])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    onnx.save(model, tmp_path / "a.onnx")
    m = load(converter.Converter().convert("ONNX", str(tmp_path / "a.onnx"), str(tmp_path / "a")).output_file)
    x = (rng.standard_normal((2, 3, 5)) * 4).astype(np.float32)
    x[0, 0, 0] = 0.025 * 3   # exactly half a step: ties round to even
    got = [t.get_data_to_numpy() for t in m.predict({"x": x})]
    want = run_ort(model, {"x": x})
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-6)
    blocked = helper.make_graph([helper.make_node("DequantizeLinear", ["x", "s"], ["y"], name="dq_act", axis=0,
                                                  block_size=2)], "b",
                                [helper.make_tensor_value_info("x", TensorProto.INT8, [4])],
                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                                [numpy_helper.from_array(np.array([0.1, 0.2], np.float32), "s")])
    onnx.save(helper.make_model(blocked, opset_imports=[helper.make_opsetid("", 21)]), tmp_path / "b.onnx")
    with pytest.raises(ConverterError, match="node 'dq_act' \\(DequantizeLinear\\): blocked dequantisation of activations"):
        converter.Converter().convert("ONNX", str(tmp_path / "b.onnx"), str(tmp_path / "b"))


def test_decoded_weights_are_freed_after_packing_and_decoded_again_for_new_shapes(tmp_path):
    """A quantised MatMul weight's float32 copy is freed once packed; a second input shape (a new plan)
    decodes it again; a constant also read at run time by another node (the Add) is kept."""
    k, n = 64, 32
    w = rng.standard_normal((k, n)).astype(np.float32)
    shared = rng.standard_normal((n, n)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("MatMul", ["h", "shared"], ["h2"]),
             helper.make_node("Gather", ["shared", "idx"], ["rows"]), helper.make_node("Add", ["h2", "rows"], ["y"])]
    g = helper.make_graph(nodes, "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", k]),
                                       helper.make_tensor_value_info("idx", TensorProto.INT64, ["b"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", n])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(shared, "shared")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "r.onnx")
    cfg = write_cfg(tmp_path / "q.cfg", "[common_quant_param]\nquant_type=WEIGHT_QUANT\nmin_quant_weight_channel=1\n")
    # 'shared' is the second MatMul's weight and the Gather's table: quantised per row (the Gather's rule
    # comes first) and never freed, as the Gather reads it at run time; 'w' is freed once packed.
    r = converter.Converter().convert("ONNX", str(tmp_path / "r.onnx"), str(tmp_path / "r"), config_file=cfg, fp16=True)
    assert "needs fixed input shapes" in r.quant_report["skipped"]   # batch 'b' is dynamic: no report, a file
    assert r.weight_bytes == k * n + n * n   # int8 codes (the scales live in the graph table)
    m = load(r.output_file)
    wq = decode(quantize(w, 8, 1), w.shape)
    sh = decode(quantize(shared, 8, 0), shared.shape)
    for b in (3, 5, 3):
        x = rng.standard_normal((b, k)).astype(np.float32)
        idx = rng.integers(0, n, b).astype(np.int64)
        got = m.predict({"x": x, "idx": idx})[0].get_data_to_numpy()
        np.testing.assert_allclose(got, (x @ wq) @ sh + sh[idx], rtol=1e-4, atol=1e-4)


def small_cnn_mlp(path) -> None:
    w1 = (rng.standard_normal((16, 3, 3, 3)) * 0.3).astype(np.float32)
    b1 = (rng.standard_normal(16) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((16 * 8 * 8, 10)) * 0.05).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]), helper.make_node("MatMul", ["f", "w2"], ["y"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
                           numpy_helper.from_array(w2, "w2")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("kind", ["QDQ", "QOperator", "dynamic"])
def test_onnxruntime_int8_models_import_and_run(tmp_path, kind):
    """ONNX Runtime's quantize_static (QDQ: QuantizeLinear/DequantizeLinear around float ops; QOperator:
    QLinearConv/QLinearMatMul) and quantize_dynamic (DynamicQuantizeLinear, ConvInteger, MatMulInteger)
    outputs run as float arithmetic on the dequantised values, weights kept as int8 codes in the file."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
    small_cnn_mlp(tmp_path / "f.onnx")
    samples = [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(8)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)
    q = str(tmp_path / "q.onnx")
    if kind == "dynamic":
        quantize_dynamic(str(tmp_path / "f.onnx"), q, weight_type=QuantType.QInt8)
    else:
        quantize_static(str(tmp_path / "f.onnx"), q, Reader(), quant_format=getattr(QuantFormat, kind), per_channel=True)
    ops = {n.op_type for n in onnx.load(q).graph.node}
    expected = {"QDQ": "QuantizeLinear", "QOperator": "QLinearConv", "dynamic": "MatMulInteger"}[kind]
    assert expected in ops, ops
    result = converter.Converter().convert("ONNX", q, str(tmp_path / "q"))
    assert result.weight_bytes < 16 * 27 + 1024 * 10 + 1024   # int8 codes (float32 would be 4x)
    model = load(result.output_file)
    for feeds in samples[:3]:
        got = model.predict(feeds)[0].get_data_to_numpy()
        want = run_ort(q, feeds)[0]
        # A code may differ by one where a product lands on a rounding boundary; the QDQ output is requantised
        # with a step of about range / 255.
        step = (np.abs(want).max() * 2) / 255
        assert np.abs(got - want).max() <= 3 * step, (np.abs(got - want).max(), step)


RSS_SCRIPT = """
import sys, numpy as np, lite
m = lite.Model()
m.build_from_file(sys.argv[1], lite.ModelType.MINDIR_LITE, lite.Context())
y = m.predict({"a": np.load(sys.argv[2])})[0].get_data_to_numpy()
np.save(sys.argv[3], y)
print([int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")][0])
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM")
def test_int8_and_fp16_weights_stay_compressed_in_memory(tmp_path):
    """A [K, N] MatMul weight stored as int8 codes (or float16) is packed block by block from the stored values at
    run time: the process never holds the float32 weight (32 MB here), and the result equals the decode-at-load
    path's (LITE_DECODE_WEIGHTS=1), which computes from the same float values."""
    k, n = 2048, 4096
    w = np.random.default_rng(0).standard_normal((k, n)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [8, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, n])], [numpy_helper.from_array(w, "w")])
    src = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    cfg = write_cfg(tmp_path / "q.cfg", "[common_quant_param]\nquant_type=WEIGHT_QUANT\nbit_num=8\n")
    converter.Converter().convert("ONNX", src, str(tmp_path / "q"), config_file=cfg)
    converter.Converter().convert("ONNX", src, str(tmp_path / "h"), fp16=True)
    a = np.random.default_rng(1).standard_normal((8, k)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    for name in ("q", "h"):
        peaks, outs = {}, {}
        for mode, env in (("packed", {}), ("decoded", {"LITE_DECODE_WEIGHTS": "1"})):
            out = tmp_path / f"{name}_{mode}.npy"
            r = subprocess.run([sys.executable, "-c", RSS_SCRIPT, str(tmp_path / f"{name}.ms"), str(tmp_path / "a.npy"),
                                str(out)], env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stderr[-2000:]
            peaks[mode], outs[mode] = int(r.stdout.split()[-1]), np.load(out)
        assert peaks["packed"] + 20000 < peaks["decoded"], peaks   # kB: the 32 MB float32 copy is never made
        # the same float values, summed in blocks of their own (the decoded panels' K blocks, the codes' groups):
        # equal up to float32 rounding of 2048-term sums
        scale = float(np.abs(outs["decoded"]).max())
        np.testing.assert_allclose(outs["packed"], outs["decoded"], rtol=1e-5, atol=1e-5 * scale)
