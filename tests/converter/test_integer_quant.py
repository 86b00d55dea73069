"""FULL_QUANT / DYNAMIC_QUANT: MatMul, Gemm and Conv in 8-bit integer arithmetic (format 1.8, Node.int8).

The runtime's integer results are checked against a NumPy emulation of the same integer arithmetic (uint8
activations, 7-bit symmetric weight codes, int32 sums, float dequantisation): they agree to float rounding, far
closer than the float32 path (which differs by the quantisation error itself), so these tests fail if the integer
kernels are not used or compute anything else. Whole models are checked against ONNX Runtime's float32 output.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite import _lite
from converter.api import Converter
from converter.ir import ConverterError
from converter.quantization import decode, quantize
from converter.quantization.integer_quant import activation_range, uint8_params
from converter.writer import INT8_COMPUTE, write_ms

sys.path.insert(0, os.path.dirname(__file__))
from isolated_run import run_isolated  # noqa: E402

F32 = np.float32


def save_model(path, nodes, inputs, outputs, weights):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                          [numpy_helper.from_array(a, n) for n, a in weights.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def write_cfg(path, quant_type, extra=""):
    path.write_text(f"[common_quant_param]\nquant_type={quant_type}\nbit_num=8\nmin_quant_weight_channel=1\n{extra}")
    return str(path)


def run(path, feeds, threads=1):
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx)
    return [t.get_data_to_numpy() for t in m.predict(feeds)]


def matmul_kernel(path, feeds):
    """The implementation the model's MatMul ran, from its profile."""
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, lite.Context())
    m.enable_profiling()
    m.predict(feeds)
    return next(p["kernel"] for p in m.last_profile() if p["op"] == "MatMul")


def dynamic_codes(x):
    """The runtime's dynamic uint8 quantisation (cpu/quantized/qgemm ChooseActQuant + QuantizeRowsU8), in float32."""
    lo, hi = min(F32(x.min()), F32(0)), max(F32(x.max()), F32(0))
    scale = F32((hi - lo) / F32(255))
    zp = int(np.clip(np.rint(-lo / scale), 0, 255))
    q = np.clip(np.rint(x * (F32(1) / scale)) + zp, 0, 255).astype(np.int64)
    return q - zp, scale


def rel_err(a, b):
    return float(np.abs(a - b).max() / np.sqrt(np.mean(b.astype(np.float64) ** 2)))


# integer_weight_bits=6: codes within [-31, 31], which the AVX2 tile sums two depth groups at a time (odd group
# counts here: K = 74 and Conv depths of 41 channels x taps).
@pytest.mark.parametrize("threads,bits", [(1, 7), (2, 7), (1, 6), (2, 6)])
def test_matmul_is_integer_arithmetic(tmp_path, threads, bits):
    rng = np.random.default_rng(0)
    M, K, N = 37, 74, 45   # K not a multiple of 4 (19 groups of 4), N not of 16, M not of the 6- or 4-row tile
    w = rng.standard_normal((K, N)).astype(F32) * 0.2
    b = rng.standard_normal(N).astype(F32)
    src = save_model(tmp_path / "m.onnx", [helper.make_node("MatMul", ["x", "w"], ["p"]),
                                           helper.make_node("Add", ["p", "b"], ["q"]),
                                           helper.make_node("Add", ["q", "r"], ["s"]),
                                           helper.make_node("Relu", ["s"], ["y"])],
                     [("x", [M, K]), ("r", [M, N])], ["y"], {"w": w, "b": b})
    out = tmp_path / "m"
    Converter().convert("ONNX", src, str(out), config_file=write_cfg(tmp_path / "q.cfg", "DYNAMIC_QUANT",
                                                                     f"integer_weight_bits={bits}\n"))
    x = (rng.standard_normal((M, K)) * 3 + 1).astype(F32)
    r = rng.standard_normal((M, N)).astype(F32)
    y = run(str(out) + ".ms", {"x": x, "r": r}, threads)[0]
    # The tiles the product took, as the profile names them: AMX's on AMX CPUs, the AVX-512 VNNI ones under
    # LITE_CPU_ISA=avx512 there (test_lower_isa_kernels_compute_the_same), the general ones below AVX-512 VNNI.
    f = _lite.cpu_features()
    assert matmul_kernel(str(out) + ".ms", {"x": x, "r": r}) == (
        "qgemm_amx" if f["amx_int8"] else "qgemm_vnni" if f["avx512_vnni"] else "qgemm")
    stored = quantize(w, 8, 1, 0, True, 63 if bits == 7 else 31)
    assert np.abs(stored.data).max() == (63 if bits == 7 else 31)
    codes = stored.data.astype(np.int64).reshape(K, N)
    qx, sx = dynamic_codes(x)
    want = np.maximum((qx @ codes).astype(np.float64) * (sx * stored.scale) + b + r, 0)
    assert rel_err(y, want) < 2e-6
    exact = np.maximum(x @ w + b + r, 0)
    assert rel_err(y, exact) > 1e-3   # the float32 path would be within float rounding
    assert float(y.ravel() @ exact.ravel() / np.linalg.norm(y) / np.linalg.norm(exact)) > 0.999


@pytest.mark.parametrize("threads,bits", [(1, 7), (2, 7), (1, 6)])
@pytest.mark.parametrize("kernel,stride,pad,dilation", [(3, 1, 1, 1), (3, 2, 1, 1), (1, 1, 0, 1), (1, 2, 0, 1),
                                                         (5, 2, 2, 1), (3, 1, 2, 2)])
def test_conv_is_integer_arithmetic(tmp_path, threads, bits, kernel, stride, pad, dilation):
    rng = np.random.default_rng(1)
    C, M, H, W = 41, 22, 17, 19   # 41 input channels: a 1x1 kernel still has MIN_INTEGER_DEPTH terms
    w = rng.standard_normal((M, C, kernel, kernel)).astype(F32) * 0.2
    b = rng.standard_normal(M).astype(F32)
    src = save_model(tmp_path / "c.onnx",
                     [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, strides=[stride] * 2,
                                       dilations=[dilation] * 2),
                      helper.make_node("Relu", ["c"], ["y"])], [("x", [2, C, H, W])], ["y"], {"w": w, "b": b})
    out = tmp_path / "c"
    Converter().convert("ONNX", src, str(out), config_file=write_cfg(tmp_path / "q.cfg", "DYNAMIC_QUANT",
                                                                     f"integer_weight_bits={bits}\n"))
    x = rng.standard_normal((2, C, H, W)).astype(F32)
    y = run(str(out) + ".ms", {"x": x}, threads)[0]
    stored = quantize(w, 8, 0, 0, True, 63 if bits == 7 else 31)
    codes = stored.data.astype(np.int64).reshape(M, -1)
    for n in range(2):   # dynamic: each image quantised by its own range
        qx, sx = dynamic_codes(x[n])
        padded = np.pad(qx, ((0, 0), (pad, pad), (pad, pad)))   # zero padding is code zero_point: 0 after the shift
        span = dilation * (kernel - 1) + 1
        oh, ow = (H + 2 * pad - span) // stride + 1, (W + 2 * pad - span) // stride + 1
        cols = np.stack([padded[:, i * dilation:i * dilation + stride * (oh - 1) + 1:stride,
                                j * dilation:j * dilation + stride * (ow - 1) + 1:stride]
                         for i in range(kernel) for j in range(kernel)], axis=1).reshape(C * kernel * kernel, -1)
        want = np.maximum((codes @ cols).astype(np.float64) * (sx * stored.scale)[:, None] + b[:, None], 0)
        assert y[n].shape == (M, oh, ow)
        assert rel_err(y[n].reshape(M, -1), want) < 2e-6


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("C,kernel,strides,pads,hw", [
    (3, (7, 7), (2, 2), (3, 3, 3, 3), (23, 21)),    # a stem: one channel quad, four phases
    (8, (1, 7), (1, 1), (0, 3, 0, 3), (9, 12)),     # a row kernel
    (13, (3, 3), (2, 1), (1, 0, 2, 1), (11, 10)),   # unequal strides, asymmetric pads
    (16, (3, 3), (3, 3), (0, 0, 0, 0), (16, 17)),   # stride 3, no padding
    (20, (2, 2), (1, 1), (0, 0, 1, 1), (5, 4)),     # even kernel; the output rows shorter than a 16-pixel tile
])
def test_conv_geometries_are_integer_arithmetic(tmp_path, threads, C, kernel, strides, pads, hw):
    """The KxK geometries the direct kernel (padded channel quads, phase planes per stride) must get exactly right,
    against the NumPy integer emulation; the im2col kernel computes the same on CPUs without VNNI."""
    rng = np.random.default_rng(2)
    M, (H, W), (KH, KW), (SH, SW) = 10, hw, kernel, strides
    w = rng.standard_normal((M, C, KH, KW)).astype(F32) * 0.2
    src = save_model(tmp_path / "c.onnx", [helper.make_node("Conv", ["x", "w"], ["y"], pads=list(pads),
                                                            strides=list(strides))],
                     [("x", [1, C, H, W])], ["y"], {"w": w})
    Converter().convert("ONNX", src, str(tmp_path / "c"), config_file=write_cfg(tmp_path / "q.cfg", "DYNAMIC_QUANT"))
    x = rng.standard_normal((1, C, H, W)).astype(F32)
    y = run(str(tmp_path / "c.ms"), {"x": x}, threads)[0]
    stored = quantize(w, 8, 0, 0, True, 63)
    codes = stored.data.astype(np.int64).reshape(M, -1)
    qx, sx = dynamic_codes(x[0])
    padded = np.pad(qx, ((0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh, ow = (padded.shape[1] - KH) // SH + 1, (padded.shape[2] - KW) // SW + 1
    cols = np.stack([padded[:, i:i + SH * (oh - 1) + 1:SH, j:j + SW * (ow - 1) + 1:SW]
                     for i in range(KH) for j in range(KW)], axis=1).reshape(C * KH * KW, -1)
    want = (codes @ cols).astype(np.float64) * (sx * stored.scale)[:, None]
    assert y.shape == (1, M, oh, ow)
    assert rel_err(y[0].reshape(M, -1), want) < 2e-6


def test_gemm_transposed_weight(tmp_path):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((40, 64)).astype(F32)   # [N, K], trans_b
    b = rng.standard_normal(40).astype(F32)
    src = save_model(tmp_path / "g.onnx", [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)],
                     [("x", [5, 64])], ["y"], {"w": w, "b": b})
    out = tmp_path / "g"
    Converter().convert("ONNX", src, str(out), config_file=write_cfg(tmp_path / "q.cfg", "DYNAMIC_QUANT"))
    x = rng.standard_normal((5, 64)).astype(F32)
    y = run(str(out) + ".ms", {"x": x})[0]
    stored = quantize(w, 8, 0, 0, True, 63)
    qx, sx = dynamic_codes(x)
    want = (qx @ stored.data.astype(np.int64).reshape(40, 64).T) * (sx * stored.scale) + b
    assert rel_err(y, want) < 2e-6


def small_cnn(tmp_path, rng):
    C, M = 8, 32
    weights = {"w1": rng.standard_normal((M, C, 3, 3)).astype(F32) * 0.2, "b1": rng.standard_normal(M).astype(F32),
               "w2": rng.standard_normal((M, M, 1, 1)).astype(F32) * 0.2,
               "wm": rng.standard_normal((M * 64, 10)).astype(F32) * 0.05, "shape": np.array([-1, M * 64], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Add", ["c2", "r1"], ["s"]),
             helper.make_node("Reshape", ["s", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "wm"], ["y"])]
    return save_model(tmp_path / "cnn.onnx", nodes, [("x", [1, C, 16, 16])], ["y"], {k: v for k, v in weights.items()})


def calibration_dir(path, rng, count=6):
    os.makedirs(path, exist_ok=True)
    for i in range(count):
        np.save(os.path.join(path, f"{i}.npy"), rng.standard_normal((1, 8, 16, 16)).astype(F32))
    return str(path)


@pytest.mark.parametrize("method", ["MAX_MIN", "KL", "REMOVAL_OUTLIER"])
def test_full_quant_model_matches_onnxruntime(tmp_path, method):
    rng = np.random.default_rng(3)
    src = small_cnn(tmp_path, rng)
    cal = calibration_dir(tmp_path / "cal", rng)
    cfg = write_cfg(tmp_path / "q.cfg", "FULL_QUANT",
                    f"[data_preprocess_param]\ncalibrate_path=x:{cal}\ninput_type=NPY\n"
                    f"[full_quant_param]\nactivation_quant_method={method}\n")
    res = Converter().convert("ONNX", src, str(tmp_path / "q"), config_file=cfg)
    # KL and outlier removal clip tails, which this random network's outputs depend on more than a trained one's.
    floor = {"MAX_MIN": 0.999, "REMOVAL_OUTLIER": 0.99, "KL": 0.97}[method]
    assert res.quant_report["compressed_tensors"] == 3
    assert res.quant_report["outputs"][0]["cosine"] > floor
    x = rng.standard_normal((1, 8, 16, 16)).astype(F32)   # held back from calibration
    want = ort.InferenceSession(src).run(None, {"x": x})[0]
    got = run(str(tmp_path / "q.ms"), {"x": x})[0]
    cos = float(got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want))
    assert cos > floor


def test_full_quant_calibrates_beside_a_split(tmp_path):
    """The calibration run cuts the graph after the quantised nodes' inputs: a Split whose first part feeds an integer
    Conv and whose second part only feeds nodes past the cut keeps both outputs in the cut (YOLOv8's head: the box
    part's DFL Conv, the class part's Sigmoid; the second output had been dropped from the cut's tensors, and writing
    it failed with a KeyError)."""
    rng = np.random.default_rng(5)
    weights = {"w1": rng.standard_normal((64, 8, 3, 3)).astype(F32) * 0.2,
               "w2": rng.standard_normal((32, 32, 3, 3)).astype(F32) * 0.1, "sizes": np.array([32, 32], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4),
             helper.make_node("Split", ["c1", "sizes"], ["a", "b"], axis=1),
             helper.make_node("Conv", ["a", "w2"], ["c2"], pads=[1] * 4),
             helper.make_node("Sigmoid", ["b"], ["s"]),
             helper.make_node("Concat", ["c2", "s"], ["y"], axis=1)]
    src = save_model(tmp_path / "split.onnx", nodes, [("x", [1, 8, 16, 16])], ["y"], weights)
    cal = calibration_dir(tmp_path / "cal", rng)
    cfg = write_cfg(tmp_path / "q.cfg", "FULL_QUANT", f"[data_preprocess_param]\ncalibrate_path=x:{cal}\ninput_type=NPY\n")
    res = Converter().convert("ONNX", src, str(tmp_path / "q"), config_file=cfg)
    assert res.quant_report["compressed_tensors"] == 2 and res.quant_report["outputs"][0]["cosine"] > 0.999


@pytest.mark.parametrize("threads", [1, 2])
def test_full_quant_silu_convs(tmp_path, threads):
    """SiLU Convs (YOLO's) in FULL_QUANT: on CPUs with AVX-512 VNNI the pixel-major kernel takes them with SiLU in its
    epilogue, both into float rows (a Conv between float neighbours: its input quantised at the calibrated scale in
    one pass) and into uint8 codes (a Conv only integer Convs read: SiLU in real units between the code conversions);
    elsewhere the channel-major kernels. Against ONNX Runtime's float model, and the pixel-major run against the
    channel-major one (LITE_INT8_PIXEL=0) within a code's rounding."""
    rng = np.random.default_rng(6)
    w = lambda *shape: (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(F32)
    weights = {"w1": w(32, 8, 3, 3), "w2": w(32, 32, 3, 3), "w3": w(32, 32, 1, 1), "w4": w(16, 64, 3, 3),
               "b1": rng.standard_normal(32).astype(F32), "b2": rng.standard_normal(32).astype(F32),
               "b3": rng.standard_normal(32).astype(F32), "b4": rng.standard_normal(16).astype(F32)}
    nodes = []
    for i, (src, pads) in enumerate((("x", 1), ("a1", 1), ("a2", 0), ("cat", 1)), start=1):
        nodes += [helper.make_node("Conv", [src, f"w{i}", f"b{i}"], [f"c{i}"], pads=[pads] * 4),
                  helper.make_node("Sigmoid", [f"c{i}"], [f"s{i}"]), helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"a{i}"])]
        if i == 3:
            nodes.append(helper.make_node("Concat", ["a3", "a1"], ["cat"], axis=1))
    src = save_model(tmp_path / "silu.onnx", nodes, [("x", [1, 8, 20, 20])], ["a4"], weights)
    cal = calibration_dir(tmp_path / "cal", rng)
    cal_files = sorted(os.listdir(cal))
    for f in cal_files:   # this model's input is [1, 8, 20, 20]
        np.save(os.path.join(cal, f), rng.standard_normal((1, 8, 20, 20)).astype(F32))
    cfg = write_cfg(tmp_path / "q.cfg", "FULL_QUANT", f"[data_preprocess_param]\ncalibrate_path=x:{cal}\ninput_type=NPY\n")
    res = Converter().convert("ONNX", src, str(tmp_path / "q"), config_file=cfg)
    assert res.quant_report["compressed_tensors"] == 4
    x = rng.standard_normal((1, 8, 20, 20)).astype(F32)
    want = ort.InferenceSession(src).run(None, {"x": x})[0]
    got = run(str(tmp_path / "q.ms"), {"x": x}, threads)[0]
    assert float(got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want)) > 0.999
    channel_major = run_isolated(str(tmp_path / "q.ms"), {"x": x}, threads, env={"LITE_INT8_PIXEL": "0"})
    assert np.abs(got - channel_major).max() < 0.05 * np.abs(want).max()
    m = lite.Model()
    m.build_from_file(str(tmp_path / "q.ms"), lite.ModelType.MINDIR_LITE, lite.Context())
    m.enable_profiling()
    m.predict({"x": x})
    kernels = [p["kernel"] for p in m.last_profile() if p["op"] == "Conv"]
    f = _lite.cpu_features()
    if f["avx512_vnni"]:
        assert all(k.startswith("u8_pixel_major") for k in kernels), kernels


@pytest.mark.parametrize("threads", [1, 2])
def test_full_quant_conv_reads_a_blocked_float_input(tmp_path, threads):
    """A float (SiLU) depthwise Conv between integer Convs keeps its channel-blocked kernel: the integer pixel-major Conv
    after it quantises the blocked input into its plane of codes (a block's run quantised, then transposed 8 pixels
    at a time; 9 x 11 pixels leave a tail). Same codes as from NCHW: the channel-major run (LITE_INT8_PIXEL=0) agrees
    within a code's rounding, and ONNX Runtime's float model by cosine."""
    rng = np.random.default_rng(7)
    w = lambda *shape: (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(F32)
    weights = {"w1": w(32, 8, 3, 3), "wd": w(32, 1, 3, 3), "w2": w(16, 32, 1, 1)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4),
             helper.make_node("Conv", ["c1", "wd"], ["d"], pads=[1] * 4, group=32),
             helper.make_node("Sigmoid", ["d"], ["ds"]),
             helper.make_node("Mul", ["d", "ds"], ["dr"]),   # SiLU: the integer depthwise kernel does not take it
             helper.make_node("Conv", ["dr", "w2"], ["y"])]
    src = save_model(tmp_path / "dw.onnx", nodes, [("x", [1, 8, 9, 11])], ["y"], weights)
    cal = str(tmp_path / "cal")
    os.makedirs(cal)
    for i in range(6):
        np.save(os.path.join(cal, f"{i}.npy"), rng.standard_normal((1, 8, 9, 11)).astype(F32))
    cfg = write_cfg(tmp_path / "q.cfg", "FULL_QUANT", f"[data_preprocess_param]\ncalibrate_path=x:{cal}\ninput_type=NPY\n")
    Converter().convert("ONNX", src, str(tmp_path / "q"), config_file=cfg)
    x = rng.standard_normal((1, 8, 9, 11)).astype(F32)
    got = run(str(tmp_path / "q.ms"), {"x": x}, threads)[0]
    want = ort.InferenceSession(src).run(None, {"x": x})[0]
    assert float(got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want)) > 0.999
    channel_major = run_isolated(str(tmp_path / "q.ms"), {"x": x}, threads, env={"LITE_INT8_PIXEL": "0"})
    np.testing.assert_allclose(got, channel_major, atol=0.02 * np.abs(want).max())
    if _lite.cpu_features()["avx512_vnni"]:
        m = lite.Model()
        m.build_from_file(str(tmp_path / "q.ms"), lite.ModelType.MINDIR_LITE, lite.Context())
        m.predict({"x": x})
        assert "dr" in set(m.channel_blocked_tensors())


def test_full_quant_uses_the_calibrated_range(tmp_path):
    """A static scale saturates inputs beyond the calibration range; the dynamic one follows them."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((48, 8)).astype(F32)
    src = save_model(tmp_path / "m.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [4, 48])], ["y"],
                     {"w": w})
    cal = tmp_path / "cal"
    os.makedirs(cal)
    for i in range(3):
        np.save(cal / f"{i}.npy", rng.uniform(-1, 1, (4, 48)).astype(F32))
    cfg = write_cfg(tmp_path / "q.cfg", "FULL_QUANT", f"[data_preprocess_param]\ncalibrate_path=x:{cal}\ninput_type=NPY\n")
    Converter().convert("ONNX", src, str(tmp_path / "s"), config_file=cfg)
    Converter().convert("ONNX", src, str(tmp_path / "d"), config_file=write_cfg(tmp_path / "d.cfg", "DYNAMIC_QUANT"))
    inside = rng.uniform(-0.9, 0.9, (4, 48)).astype(F32)
    big = inside * 5
    for x, static_ok in ((inside, True), (big, False)):
        exact = x @ w
        s, d = run(str(tmp_path / "s.ms"), {"x": x})[0], run(str(tmp_path / "d.ms"), {"x": x})[0]
        assert rel_err(d, exact) < 0.05
        assert (rel_err(s, exact) < 0.05) == static_ok


def test_activation_ranges():
    rng = np.random.default_rng(5)
    v = np.concatenate([rng.standard_normal(200000), [40.0, -35.0]]).astype(F32)
    assert activation_range(v, "MAX_MIN") == (-35.0, 40.0)
    lo, hi = activation_range(v, "REMOVAL_OUTLIER")
    assert -5 < lo < -3 and 3 < hi < 5
    lo, hi = activation_range(v, "KL")
    assert -35 < lo < -2 and 2 < hi < 40
    assert uint8_params(0.0, 0.0) == (1.0, 0)
    scale, zp = uint8_params(-1.0, 3.0)
    assert scale == pytest.approx(4 / 255) and zp == 64
    assert uint8_params(0.5, 2.0)[1] == 0   # the range always covers 0


def test_marked_node_without_int8_weight_is_a_clear_error(tmp_path):
    rng = np.random.default_rng(6)
    src = save_model(tmp_path / "m.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [4, 16])], ["y"],
                     {"w": rng.standard_normal((16, 8)).astype(F32)})
    graph = Converter().load("ONNX", src)
    graph.nodes[0].attrs[INT8_COMPUTE] = {"dynamic": True}
    write_ms(graph, str(tmp_path / "float_weight.ms"))
    with pytest.raises(Exception, match="stored as INT8 codes"):
        run(str(tmp_path / "float_weight.ms"), {"x": np.ones((4, 16), F32)})
    w = graph.tensors["w"]
    w.stored = quantize(w.data, 8, 1)   # full 8-bit codes: beyond the kernels' [-64, 63]
    w.data = decode(w.stored, w.data.shape)
    write_ms(graph, str(tmp_path / "wide_codes.ms"))
    with pytest.raises(Exception, match=r"outside \[-64, 63\]"):
        run(str(tmp_path / "wide_codes.ms"), {"x": np.ones((4, 16), F32)})
    graph.nodes[0].op_type = "Relu"   # an int8 table on an operator without integer kernels
    graph.nodes[0].inputs = graph.nodes[0].inputs[:1]
    write_ms(graph, str(tmp_path / "relu.ms"))
    with pytest.raises(Exception, match=r"\(Relu\) carries an int8 table"):
        run(str(tmp_path / "relu.ms"), {"x": np.ones((4, 16), F32)})
    graph = Converter().load("ONNX", src)
    w = graph.tensors["w"]
    graph.nodes[0].attrs[INT8_COMPUTE] = {"scale": -1.0, "zero_point": 0}
    w.stored = quantize(w.data, 8, 1, 0, True, 63)
    w.data = decode(w.stored, w.data.shape)
    write_ms(graph, str(tmp_path / "bad_scale.ms"))
    with pytest.raises(Exception, match="input_scale > 0"):
        run(str(tmp_path / "bad_scale.ms"), {"x": np.ones((4, 16), F32)})


@pytest.mark.parametrize("text,message", [
    ("bit_num=2\n", "DYNAMIC_QUANT stores 8- or 4-bit weight codes, not 2"),
    ("bit_num=4\n[weight_quant_param]\ngroup_size=30\n", "q.cfg:5: the integer kernels take blocks of a multiple of 4"),
])
def test_config_errors(tmp_path, text, message):
    cfg = tmp_path / "q.cfg"
    cfg.write_text("[common_quant_param]\nquant_type=DYNAMIC_QUANT\n" + text)
    with pytest.raises(ConverterError, match=message):
        Converter().convert("ONNX", "unused.onnx", str(tmp_path / "x"), config_file=str(cfg))


def _lower_isas() -> list[str]:
    """The LITE_CPU_ISA settings below what this process runs: portable always, avx2 on an AVX-512 CPU, avx512 (the
    VNNI tiles) on an AMX one."""
    if os.environ.get("LITE_CPU_ISA"):
        return []
    f = _lite.cpu_features()
    return ["portable"] + (["avx2"] if f["isa"] == "avx512f" else []) + (["avx512"] if f["amx_int8"] else [])


@pytest.mark.parametrize("isa", ["portable", "avx2", "avx512"])
def test_lower_isa_kernels_compute_the_same(tmp_path, isa):
    """The integer tests again with LITE_CPU_ISA=portable (the plain C++ tile, CPUs without AVX2), on an AVX-512
    CPU =avx2 (the vpmaddubsw tiles where the default run took the VNNI ones), and on an AMX CPU =avx512 (the VNNI
    tiles where the default run took AMX's TDPBUSD): every build must give the same integer results."""
    if isa not in _lower_isas():
        pytest.skip(f"LITE_CPU_ISA={isa} is not below this run's ISA ({_lite.cpu_features()['isa']})")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                        "integer_arithmetic or gemm_transposed or int4 or uint8_chain"], env={**os.environ, "LITE_CPU_ISA": isa},
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout.splitlines()[-1]


def test_matmul_addend_that_broadcasts(tmp_path):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((40, 8)).astype(F32)
    src = save_model(tmp_path / "m.onnx", [helper.make_node("MatMul", ["x", "w"], ["p"]),
                                           helper.make_node("Add", ["p", "r"], ["s"]),
                                           helper.make_node("Relu", ["s"], ["y"])],
                     [("x", [4, 40]), ("r", [3, 4, 8])], ["y"], {"w": w})
    Converter().convert("ONNX", src, str(tmp_path / "m"), config_file=write_cfg(tmp_path / "q.cfg", "DYNAMIC_QUANT"))
    x = rng.standard_normal((4, 40)).astype(F32)
    r = rng.standard_normal((3, 4, 8)).astype(F32)
    y = run(str(tmp_path / "m.ms"), {"x": x, "r": r})[0]
    stored = quantize(w, 8, 1, 0, True, 63)
    qx, sx = dynamic_codes(x)
    want = np.maximum((qx @ stored.data.astype(np.int64).reshape(40, 8)) * (sx * stored.scale) + r, 0)
    assert y.shape == (3, 4, 8) and rel_err(y, want) < 2e-6


def test_shallow_products_stay_float(tmp_path):
    """Below MIN_INTEGER_DEPTH terms per output the integer kernel is slower: such nodes keep float32 weights."""
    rng = np.random.default_rng(8)
    w = rng.standard_normal((24, 8)).astype(F32)
    src = save_model(tmp_path / "m.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [4, 24])], ["y"],
                     {"w": w})
    res = Converter().convert("ONNX", src, str(tmp_path / "m"), config_file=write_cfg(tmp_path / "q.cfg", "DYNAMIC_QUANT"))
    assert res.quant_report["compressed_tensors"] == 0
    x = rng.standard_normal((4, 24)).astype(F32)
    assert rel_err(run(str(tmp_path / "m.ms"), {"x": x})[0], x @ w) < 1e-5


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("trans_b,group", [(False, 32), (True, 32), (False, 0), (False, 48)])
def test_int4_blocked_weights(tmp_path, threads, trans_b, group):
    """bit_num=4: MatMul/Gemm codes in blocks along K (each block summed in int32, scaled in float), equal to the
    emulation block by block; a K that is not a multiple of the block leaves a short last block."""
    rng = np.random.default_rng(9)
    K, N, M = 150, 37, 13
    w = rng.standard_normal((N, K) if trans_b else (K, N)).astype(F32)
    b = rng.standard_normal(N).astype(F32)
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=int(trans_b))
    src = save_model(tmp_path / "g.onnx", [node], [("x", [M, K])], ["y"], {"w": w, "b": b})
    extra = f"[weight_quant_param]\ngroup_size={group}\n"
    cfg = write_cfg(tmp_path / "q.cfg", "DYNAMIC_QUANT", extra)
    (tmp_path / "q.cfg").write_text((tmp_path / "q.cfg").read_text().replace("bit_num=8", "bit_num=4"))
    res = Converter().convert("ONNX", src, str(tmp_path / "g"), config_file=cfg)
    assert res.quant_report["compressed_tensors"] == 1
    x = rng.standard_normal((M, K)).astype(F32)
    y = run(str(tmp_path / "g.ms"), {"x": x}, threads)[0]
    wk = w.T if trans_b else w                       # [K, N]
    stored = quantize(w, 4, (1 if trans_b else 0) if group else (0 if trans_b else 1), group, True)
    codes = decode(stored, w.shape)                  # code * scale, per block
    qx, sx = dynamic_codes(x)
    want = np.zeros((M, N))
    step = group or K
    for k0 in range(0, K, step):
        blk = slice(k0, min(K, k0 + step))
        wb = (codes.T if trans_b else codes)[blk]    # float values of this block's codes
        scale = np.abs(wb).max(axis=0) / 7           # the block's scale per column (codes span [-7, 7])
        cb = np.rint(wb / np.where(scale > 0, scale, 1)).astype(np.int64)
        want += (qx[:, blk] @ cb) * (sx * scale)
    want += b
    assert rel_err(y, want) < 1e-5
    assert float(y.ravel() @ (x @ wk + b).ravel() / np.linalg.norm(y) / np.linalg.norm(x @ wk + b)) > 0.98


def test_vector_times_matrix_stays_float(tmp_path):
    rng = np.random.default_rng(10)
    w = rng.standard_normal((40, 8)).astype(F32)
    src = save_model(tmp_path / "v.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [40])], ["y"],
                     {"w": w})
    res = Converter().convert("ONNX", src, str(tmp_path / "v"), config_file=write_cfg(tmp_path / "q.cfg", "DYNAMIC_QUANT"))
    assert res.quant_report["compressed_tensors"] == 0
    x = rng.standard_normal(40).astype(F32)
    assert rel_err(run(str(tmp_path / "v.ms"), {"x": x})[0], x @ w) < 1e-5


def conv_chain(tmp_path, rng, act3="Relu", pool=False, hw=(13, 11)):
    """Conv-ReLU (with pool: then a 3x3/2 MaxPool), Conv-ReLU, Conv + residual (the first ReLU's or the pool's
    output) - act3, Conv: every output but the last is read only by integer Convs (as input or residual) or the
    MaxPool; the last is the graph's output."""
    C, M = 8, 32
    w = {"w1": rng.standard_normal((M, C, 3, 3)) * 0.2, "b1": rng.standard_normal(M) * 0.1,
         "w2": rng.standard_normal((M, M, 3, 3)) * 0.06, "w3": rng.standard_normal((M, M, 1, 1)) * 0.2,
         "w4": rng.standard_normal((C, M, 1, 1)) * 0.2}
    h = "m1" if pool else "r1"
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"])]
    if pool:
        nodes.append(helper.make_node("MaxPool", ["r1"], ["m1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
    nodes += [helper.make_node("Conv", [h, "w2"], ["c2"], pads=[1] * 4),
              helper.make_node("Relu", ["c2"], ["r2"]),
              helper.make_node("Conv", ["r2", "w3"], ["c3"]),
              helper.make_node("Add", ["c3", h], ["s3"]),
              helper.make_node(act3, ["s3"], ["r3"]),
              helper.make_node("Conv", ["r3", "w4"], ["y"])]
    return save_model(tmp_path / "chain.onnx", nodes, [("x", [2, C, *hw])], ["y"],
                      {k: v.astype(F32) for k, v in w.items()})


def uint8_activations_in(path):
    from ms_schema.Model import Model
    from ms_schema.DataType import DataType
    g = Model.GetRootAs(open(path, "rb").read()[64:]).Graphs(0)
    out = {}
    for i in range(g.TensorsLength()):
        t = g.Tensors(i)
        if t.Dtype() == DataType.UINT8 and not t.HasData() and t.Quant() is not None:
            out[t.Name().decode()] = (t.Quant().Scale(0), t.Quant().ZeroPoint(0))
    return out


@pytest.mark.parametrize("threads,act3,pool,hw", [(1, "Relu", False, (13, 11)), (2, "Relu", False, (13, 11)),
                                                  (1, "Sigmoid", False, (13, 11)), (1, "Relu", True, (13, 11)),
                                                  (2, "Relu", True, (13, 11)),
                                                  (1, "Relu", True, (40, 37))])   # pooled rows of 16+ outputs
def test_uint8_chain_between_integer_convs(tmp_path, threads, act3, pool, hw, monkeypatch):
    """FULL_QUANT keeps a tensor as uint8 codes when only integer Convs read it (format 1.11): the producer
    requantises in its epilogue, the readers take the codes (a residual is dequantised in the epilogue). Same
    result as the float32 hand-over up to the residual's own rounding; close to ONNX Runtime's float32."""
    from converter.quantization import integer_quant
    rng = np.random.default_rng(11)
    src = conv_chain(tmp_path, rng, act3, pool, hw)
    cal = tmp_path / "cal"
    os.makedirs(cal)
    for i in range(4):
        np.save(cal / f"{i}.npy", rng.standard_normal((2, 8, *hw)).astype(F32))
    cfg = write_cfg(tmp_path / "q.cfg", "FULL_QUANT",
                    f"[data_preprocess_param]\ncalibrate_path=x:{cal}\ninput_type=NPY\n")
    Converter().convert("ONNX", src, str(tmp_path / "chain"), config_file=cfg)
    monkeypatch.setattr(integer_quant, "uint8_activations", lambda graph, targets: {})
    Converter().convert("ONNX", src, str(tmp_path / "float_between"), config_file=cfg)
    chained = uint8_activations_in(str(tmp_path / "chain.ms"))
    assert len(chained) == (4 if pool else 3) and not uint8_activations_in(str(tmp_path / "float_between.ms"))
    if pool:   # a MaxPool of codes keeps its input's scale and zero point
        assert chained["m1"] == chained["r1"]
    assert all(s > 0 and 0 <= z <= 255 for s, z in chained.values())
    assert min(z for _, z in chained.values()) == 0   # ReLU outputs: the range starts at 0
    x = rng.standard_normal((2, 8, *hw)).astype(F32)
    got = run(str(tmp_path / "chain.ms"), {"x": x}, threads)[0]
    between = run(str(tmp_path / "float_between.ms"), {"x": x}, threads)[0]
    want = ort.InferenceSession(src).run(None, {"x": x})[0]
    assert got.dtype == np.float32 and got.shape == want.shape
    cos = lambda a, b: float(a.ravel() @ b.ravel() / np.linalg.norm(a) / np.linalg.norm(b))
    assert cos(got, between) > 0.99995
    assert cos(got, want) > 0.999
    assert not np.array_equal(got, between)   # the residual really went through uint8 codes
    np.testing.assert_array_equal(got, run(str(tmp_path / "chain.ms"), {"x": x}, 3 - threads)[0])


def test_uint8_codes_saturate_like_the_scalar_path(tmp_path):
    """Inputs 8x past the calibrated range push the requantised uint8 codes between the Convs to 255: the SIMD
    epilogues (16-lane on AVX-512) must saturate them as the plain C++ path does (LITE_CPU_ISA=portable). Where the
    pixel-major kernel runs (AVX-512 VNNI) it requantises in one rounding where the plain path takes two: a code within
    float error of a rounding tie may land on its other side, moving that pixel's outputs (1x1 Convs after c1) by one
    code's worth; every other output is equal to float rounding."""
    if _lite.cpu_features()["isa"] == "portable":
        pytest.skip("this run is the portable path")
    rng = np.random.default_rng(12)
    C, M = 8, 32   # c1 has no activation: its codes saturate at 0 as well as at 255
    w = {"w1": rng.standard_normal((M, C, 3, 3)) * 0.2, "w2": rng.standard_normal((M, M, 1, 1)) * 0.2,
         "w3": rng.standard_normal((C, M, 1, 1)) * 0.2}
    src = save_model(tmp_path / "sat.onnx", [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4),
                                             helper.make_node("Conv", ["c1", "w2"], ["c2"]),
                                             helper.make_node("Relu", ["c2"], ["r2"]),
                                             helper.make_node("Conv", ["r2", "w3"], ["y"])],
                     [("x", [2, C, 13, 11])], ["y"], {k: v.astype(F32) for k, v in w.items()})
    cal = tmp_path / "cal"
    os.makedirs(cal)
    for i in range(4):
        np.save(cal / f"{i}.npy", rng.standard_normal((2, 8, 13, 11)).astype(F32))
    cfg = write_cfg(tmp_path / "q.cfg", "FULL_QUANT", f"[data_preprocess_param]\ncalibrate_path=x:{cal}\ninput_type=NPY\n")
    Converter().convert("ONNX", src, str(tmp_path / "chain"), config_file=cfg)
    assert set(uint8_activations_in(str(tmp_path / "chain.ms"))) == {"c1", "r2"}
    x = (rng.standard_normal((2, 8, 13, 11)) * 8).astype(F32)
    got = run(str(tmp_path / "chain.ms"), {"x": x})[0]
    scalar = run_isolated(str(tmp_path / "chain.ms"), {"x": x}, env={"LITE_CPU_ISA": "portable"})
    off = ~np.isclose(got, scalar, rtol=1e-5, atol=1e-5 * float(np.abs(scalar).max()))
    off_pixels = off.any(axis=1)   # the near-tie codes' pixels (a 1x1 chain: each moves one pixel's channels)
    assert off_pixels.sum() <= 2, int(off_pixels.sum())
    assert np.abs(got - scalar).max() < 0.05 * np.abs(scalar).max()
    want = ort.InferenceSession(src).run(None, {"x": x})[0]
    assert rel_err(got, want) > 0.1   # the codes did saturate: far from the float32 result


def test_bad_uint8_activation_is_a_clear_error(tmp_path):
    from converter.passes import run_pipeline
    from converter.quantization import apply_integer_quant, parse_config
    src = conv_chain(tmp_path, np.random.default_rng(12))
    graph = Converter().load("ONNX", src)
    run_pipeline(graph, Converter().optimize)
    apply_integer_quant(graph, parse_config(write_cfg(tmp_path / "q.cfg", "FULL_QUANT")))
    chained = [t for t in graph.tensors.values() if t.act_quant is not None]
    assert len(chained) == 3
    x = {"x": np.ones((2, 8, 13, 11), F32)}
    for act_quant, message in (((0.0, 0), "needs a finite scale > 0"), ((0.1, 256), "zero point in \\[0, 255\\]")):
        chained[0].act_quant = act_quant
        write_ms(graph, str(tmp_path / "bad.ms"))
        with pytest.raises(lite.ModelFormatError, match=f"uint8 activation '{chained[0].name}' has .*{message}"):
            run(str(tmp_path / "bad.ms"), x)
    # A float Conv handed uint8 codes refuses them instead of reading bytes as floats.
    chained[0].act_quant = (0.1, 3)
    reader = next(n for n in graph.nodes if n.inputs[0] == chained[0].name)
    del reader.attrs[INT8_COMPUTE]
    write_ms(graph, str(tmp_path / "float_reader.ms"))
    with pytest.raises(Exception, match="only float32"):
        run(str(tmp_path / "float_reader.ms"), x)
    # A MaxPool of codes whose output claims another scale would silently rescale: refused.
    src = conv_chain(tmp_path, np.random.default_rng(13), pool=True)
    graph = Converter().load("ONNX", src)
    run_pipeline(graph, Converter().optimize)
    apply_integer_quant(graph, parse_config(write_cfg(tmp_path / "q.cfg", "FULL_QUANT")))
    pooled = graph.tensors[next(n for n in graph.nodes if n.op_type == "MaxPool").outputs[0]]
    assert pooled.act_quant is not None
    pooled.act_quant = (pooled.act_quant[0] * 2, pooled.act_quant[1])
    write_ms(graph, str(tmp_path / "pool.ms"))
    with pytest.raises(Exception, match="MaxPool of uint8 codes needs its output quantised like its input"):
        run(str(tmp_path / "pool.ms"), x)


@pytest.mark.parametrize("threads", [1, 2])
def test_matmul_gelu_in_the_integer_epilogue(tmp_path, threads):
    """BERT's FFN: MatMul + bias + GELU (erf form, fused by the converter), its GELU applied to the dequantised
    tile in registers: same as GELU of the emulated integer result."""
    from math import erf
    rng = np.random.default_rng(21)
    M, K, N = 29, 64, 40
    w = rng.standard_normal((K, N)).astype(F32) * 0.2
    b = rng.standard_normal(N).astype(F32)
    s2 = np.array(np.sqrt(2.0), F32)
    src = save_model(tmp_path / "g.onnx", [helper.make_node("MatMul", ["x", "w"], ["p"]),
                                           helper.make_node("Add", ["p", "b"], ["q"]),
                                           helper.make_node("Div", ["q", "s2"], ["d"]),
                                           helper.make_node("Erf", ["d"], ["e"]),
                                           helper.make_node("Add", ["e", "one"], ["f"]),
                                           helper.make_node("Mul", ["q", "f"], ["g"]),
                                           helper.make_node("Mul", ["g", "half"], ["y"])],
                     [("x", [M, K])], ["y"], {"w": w, "b": b, "s2": s2, "one": np.array(1.0, F32),
                                              "half": np.array(0.5, F32)})
    res = Converter().convert("ONNX", src, str(tmp_path / "g"), config_file=write_cfg(tmp_path / "q.cfg", "DYNAMIC_QUANT"))
    assert res.nodes == 1   # the GELU went into the MatMul
    x = rng.standard_normal((M, K)).astype(F32)
    y = run(str(tmp_path / "g.ms"), {"x": x}, threads)[0]
    stored = quantize(w, 8, 1, 0, True, 63)
    qx, sx = dynamic_codes(x)
    pre = (qx @ stored.data.astype(np.int64).reshape(K, N)).astype(np.float64) * (sx * stored.scale) + b
    want = 0.5 * pre * (1 + np.vectorize(erf)(pre / np.sqrt(2)))
    assert np.abs(y - want).max() < 2e-6 * np.abs(want).max() + 1e-6
