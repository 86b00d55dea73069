"""FULL_QUANT bias_correction=true: each integer node's bias cancels its mean quantisation error on the
calibration set (converter/quantization/bias_correction.py). Checked in the runtime: the quantised model's
per-channel mean error against the float computation shrinks to rounding for MatMul (where the correction is
exact), and well below the uncorrected error for Conv (exact but for the border pixels that read padding)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
import onnx

import lite
from converter.api import Converter
from converter.quantization.bias_correction import fake_quantize

F32 = np.float32


def save_model(path, nodes, inputs, weights):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(a, n) for n, a in weights.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def calibration(tmp_path, samples):
    d = tmp_path / "cal"
    d.mkdir()
    for i, s in enumerate(samples):
        np.save(d / f"{i:02d}.npy", s)
    return d


def convert(tmp_path, src, cal, name, correct, method="MAX_MIN"):
    """correct: True / False, or None to leave the key out (the default)."""
    cfg = tmp_path / f"{name}.cfg"
    key = "" if correct is None else f"bias_correction={str(correct).lower()}\n"
    cfg.write_text("[common_quant_param]\nquant_type=FULL_QUANT\nbit_num=8\nmin_quant_weight_channel=1\n"
                   f"[data_preprocess_param]\ncalibrate_path=x:{cal}\ninput_type=NPY\n"
                   f"[full_quant_param]\nactivation_quant_method={method}\n{key}")
    result = Converter().convert("ONNX", src, str(tmp_path / name), config_file=str(cfg))
    return result.output_file, json.loads(open(result.report_file).read())


def run(path, samples):
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, lite.Context())
    return [m.predict({"x": s})[0].get_data_to_numpy() for s in samples]


def skewed_inputs(shape, count, seed):
    """Inputs with a large positive mean (ReLU-like features): their mean times a weight error is a bias."""
    rng = np.random.default_rng(seed)
    return [(np.abs(rng.standard_normal(shape)) * 2 + 1).astype(F32) for _ in range(count)]


@pytest.mark.parametrize("method", ["MAX_MIN", "KL"])
def test_matmul_bias_cancels_the_mean_error(tmp_path, method):
    rng = np.random.default_rng(0)
    K, N = 96, 40
    w = (rng.standard_normal((K, N)) * 0.1).astype(F32)
    src = save_model(tmp_path / "m.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [32, K])], {"w": w})
    samples = skewed_inputs((32, K), 6, 1)
    cal = calibration(tmp_path, samples)
    plain, _ = convert(tmp_path, src, cal, "plain", False, method)
    fixed, report = convert(tmp_path, src, cal, "fixed", True, method)
    ref = np.concatenate([s @ w for s in samples]).astype(np.float64)
    err_plain = np.concatenate(run(plain, samples)) - ref
    err_fixed = np.concatenate(run(fixed, samples)) - ref
    before = np.abs(err_plain.mean(axis=0)).max()
    after = np.abs(err_fixed.mean(axis=0)).max()
    # Without correction the per-column mean error is a visible bias; with it, float rounding is what is left.
    assert before > 2e-3
    assert after < 1e-5 + 0.01 * before, (before, after)
    # The correction moved the bias only: the per-element scatter is the quantisation noise, as before.
    assert np.std(err_fixed - err_fixed.mean(axis=0)) == pytest.approx(np.std(err_plain - err_plain.mean(axis=0)),
                                                                       rel=0.05)
    # The accuracy report's reference is the float model without a bias (it still reports a small error).
    assert 0 < report["outputs"][0]["mean_abs_error"] < np.abs(err_plain).mean()


def test_conv_bias_correction_reduces_channel_bias(tmp_path):
    rng = np.random.default_rng(2)
    C, O = 24, 16
    w = (rng.standard_normal((O, C, 3, 3)) * 0.05).astype(F32)
    b = rng.standard_normal(O).astype(F32)
    src = save_model(tmp_path / "c.onnx", [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
                     [("x", [1, C, 14, 14])], {"w": w, "b": b})
    samples = skewed_inputs((1, C, 14, 14), 6, 3)
    cal = calibration(tmp_path, samples)
    plain, _ = convert(tmp_path, src, cal, "plain", False)
    fixed, _ = convert(tmp_path, src, cal, "fixed", True)
    ref = run(str(Converter().convert("ONNX", src, str(tmp_path / "float")).output_file), samples)
    mean_err = {name: np.mean([(q - r)[0] for q, r in zip(run(path, samples), ref)], axis=0).mean(axis=(1, 2))
                for name, path in (("plain", plain), ("fixed", fixed))}
    before, after = np.abs(mean_err["plain"]).max(), np.abs(mean_err["fixed"]).max()
    assert before > 2e-3
    assert after < 0.25 * before, (before, after)


def test_bias_correction_is_the_full_quant_default(tmp_path):
    """As in MindSpore Lite, FULL_QUANT corrects biases unless told bias_correction=false."""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((64, 24)) * 0.1).astype(F32)
    src = save_model(tmp_path / "m.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [16, 64])], {"w": w})
    samples = skewed_inputs((16, 64), 4, 6)
    cal = calibration(tmp_path, samples)
    default, on, off = (run(convert(tmp_path, src, cal, n, c)[0], samples)
                        for n, c in (("default", None), ("on", True), ("off", False)))
    np.testing.assert_array_equal(np.stack(default), np.stack(on))
    assert not np.array_equal(np.stack(default), np.stack(off))


def test_fake_quantize_matches_the_runtime_codes():
    x = np.array([-1.0, -0.02, 0.0, 0.013, 0.5, 3.0], F32)
    y = fake_quantize(x, 0.01, 10)   # codes clip at 0 and 255: [-0.1, 2.45]
    np.testing.assert_allclose(y, [-0.1, -0.02, 0.0, 0.01, 0.5, 2.45], atol=1e-6)
