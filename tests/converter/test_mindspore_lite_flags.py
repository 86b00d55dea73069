"""converter_lite flags MindSpore Lite users pass (issue 35): --inputDataFormat=NHWC, --weightFile, --saveType,
--device; and quantised / fp16 conversions leave no float copy of the model in $TMPDIR."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import pytest

import converter
from model_zoo.tiny import small_cnn
from parity import load, run_ort

BIN = os.path.dirname(sys.executable)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(BIN, "converter_lite"), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture()
def cnn_onnx(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(path))
    return path


def test_input_data_format_nhwc(cnn_onnx, tmp_path):
    p = run("--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={tmp_path / 'nhwc'}", "--inputDataFormat=NHWC",
            "--inputShape=x:2,3,32,32")
    assert p.returncode == 0, p.stderr
    m = load(str(tmp_path / "nhwc.ms"))
    assert m.get_inputs()[0].shape == [2, 32, 32, 3]
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    got = m.predict([np.ascontiguousarray(x.transpose(0, 2, 3, 1))])[0].get_data_to_numpy()
    np.testing.assert_allclose(got, run_ort(str(cnn_onnx), {"x": x})[0], rtol=1e-4, atol=1e-5)
    # Dynamic batch stays dynamic, channels-last.
    dyn = converter.Converter().convert("ONNX", str(cnn_onnx), str(tmp_path / "dyn"), input_data_format="NHWC")
    assert load(dyn.output_file).get_inputs()[0].shape == [-1, 32, 32, 3]


def test_input_data_format_without_images_is_refused(tmp_path):
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    path = tmp_path / "flat.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    p = run("--fmk=ONNX", f"--modelFile={path}", f"--outputFile={tmp_path / 'flat'}", "--inputDataFormat=NHWC")
    assert p.returncode != 0 and "no 4-D floating-point input" in p.stderr


def test_weight_file_elsewhere(tmp_path):
    model = small_cnn()
    model_dir, weights_dir = tmp_path / "model", tmp_path / "weights"
    model_dir.mkdir()
    weights_dir.mkdir()
    onnx.save(model, str(model_dir / "cnn.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="cnn.data", size_threshold=0)
    os.replace(model_dir / "cnn.data", weights_dir / "renamed.data")
    p = run("--fmk=ONNX", f"--modelFile={model_dir / 'cnn.onnx'}", f"--outputFile={tmp_path / 'a'}")
    assert p.returncode != 0 and "external data" in p.stderr
    p = run("--fmk=ONNX", f"--modelFile={model_dir / 'cnn.onnx'}", f"--outputFile={tmp_path / 'b'}",
            f"--weightFile={weights_dir / 'renamed.data'}")
    assert p.returncode == 0, p.stderr
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_allclose(load(str(tmp_path / "b.ms")).predict([x])[0].get_data_to_numpy(),
                               run_ort(small_cnn(), {"x": x})[0], rtol=1e-4, atol=1e-5)
    inline = tmp_path / "inline.onnx"
    onnx.save(small_cnn(), str(inline))   # (saving with external data changed `model` in place)
    p = run("--fmk=ONNX", f"--modelFile={inline}", f"--outputFile={tmp_path / 'c'}",
            f"--weightFile={weights_dir / 'renamed.data'}")
    assert p.returncode != 0 and "no external data" in p.stderr


def test_save_type_and_device(cnn_onnx, tmp_path):
    assert run("--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={tmp_path / 'a'}", "--saveType=MINDIR_LITE",
               "--device=CPU").returncode == 0
    p = run("--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={tmp_path / 'b'}", "--saveType=MINDIR")
    assert p.returncode != 0 and "MINDIR_LITE" in p.stderr
    p = run("--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={tmp_path / 'c'}", "--device=Ascend")
    assert p.returncode != 0 and "CPU only" in p.stderr
    assert not (tmp_path / "b.ms").exists() and not (tmp_path / "c.ms").exists()


def test_fp16_and_quantised_conversions_write_nothing_to_tmpdir(cnn_onnx, tmp_path, monkeypatch):
    """The accuracy report's float model and the calibration probe are written to anonymous in-memory files."""
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)   # re-read TMPDIR
    cfg = tmp_path / "q.cfg"
    cfg.write_text("[common_quant_param]\nquant_type=FULL_QUANT\nbit_num=8\n")
    half = converter.Converter().convert("ONNX", str(cnn_onnx), str(tmp_path / "half"), fp16=True)
    full = converter.Converter().convert("ONNX", str(cnn_onnx), str(tmp_path / "full"), config_file=str(cfg),
                                         input_shape="x:1,3,32,32")
    assert half.quant_report and full.quant_report
    assert os.listdir(scratch) == []


def test_malformed_constant_is_refused_before_shape_inference(tmp_path):
    """A constant whose data does not match its dims (the sanitizer fuzz job's: a 1-element shape tensor holding 2
    values, which sent ONNX's data propagation past 24 GB) is refused, naming it."""
    from onnx import TensorProto, helper, numpy_helper
    shape = numpy_helper.from_array(np.array([-1, 4], np.int64), "shape")
    shape.dims[0] = 1
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1 << 26, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [shape])
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(converter.ConverterError, match=r"constant 'shape' declares dims \[1\] \(1 values\) but holds 2"):
        converter.Converter().convert("ONNX", str(path), str(tmp_path / "bad"))
