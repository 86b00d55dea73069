"""converter_lite and benchmark_lite command lines."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

import lite
from model_zoo.tiny import small_cnn
from parity import load, run_ort

BIN = os.path.dirname(sys.executable)


def run(tool: str, *args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(BIN, tool), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.fixture()
def cnn_onnx(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(path))
    return path


def test_help_documents_every_flag():
    p = run("converter_lite", "--help")
    assert p.returncode == 0
    for flag in ("--fmk", "--modelFile", "--outputFile", "--inputShape", "--optimize"):
        assert flag in p.stdout


def test_success_path(cnn_onnx, tmp_path):
    p = run("converter_lite", "--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={tmp_path / 'cnn'}")
    assert p.returncode == 0, p.stderr
    assert "CONVERT RESULT SUCCESS:0" in p.stdout
    assert "nodes:" in p.stdout and "weights:" in p.stdout and "time:" in p.stdout
    ms = tmp_path / "cnn.ms"
    assert ms.exists()
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    got = load(str(ms)).predict([x])[0].get_data_to_numpy()
    np.testing.assert_allclose(got, run_ort(str(cnn_onnx), {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp_")]


def test_failure_leaves_no_output(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage" * 10)
    p = run("converter_lite", "--fmk=ONNX", f"--modelFile={bad}", f"--outputFile={tmp_path / 'bad'}")
    assert p.returncode != 0
    assert "CONVERT RESULT FAILED" in p.stderr and "not a valid ONNX model" in p.stderr
    assert os.listdir(tmp_path) == ["bad.onnx"]


def test_failure_keeps_existing_output(cnn_onnx, tmp_path):
    """A failed conversion must not clobber a good file from an earlier run."""
    out = tmp_path / "m"
    assert run("converter_lite", "--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={out}").returncode == 0
    before = (tmp_path / "m.ms").read_bytes()
    p = run("converter_lite", "--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={out}",
            "--inputShape=x:1,3,32")   # wrong rank
    assert p.returncode != 0 and "rank" in p.stderr
    assert (tmp_path / "m.ms").read_bytes() == before


def test_input_shape_fixes_dims(cnn_onnx, tmp_path):
    p = run("converter_lite", "--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={tmp_path / 'fixed'}",
            "--inputShape=x:2,3,32,32")
    assert p.returncode == 0, p.stderr
    m = load(str(tmp_path / "fixed.ms"))
    assert m.get_inputs()[0].shape == [2, 3, 32, 32]
    assert m.get_outputs()[0].shape == [2, 10]
    with pytest.raises(ValueError, match="expected shape"):
        m.predict([np.zeros((1, 3, 32, 32), np.float32)])


def test_input_shape_unknown_name(cnn_onnx, tmp_path):
    p = run("converter_lite", "--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={tmp_path / 'x'}",
            "--inputShape=nope:1,3,32,32")
    assert p.returncode != 0 and "unknown inputs ['nope']" in p.stderr


def test_optimize_none_keeps_batchnorm_and_activations(cnn_onnx, tmp_path):
    for level in ("none", "general"):
        p = run("converter_lite", "--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={tmp_path / level}",
                f"--optimize={level}")
        assert p.returncode == 0, p.stderr
    none_nodes = int(run_nodes(tmp_path / "none.ms"))
    general_nodes = int(run_nodes(tmp_path / "general.ms"))
    assert none_nodes == general_nodes + 4   # two BatchNorms folded into, two Relus fused into, their convs


def run_nodes(path) -> int:
    from ms_schema.Model import Model
    data = open(path, "rb").read()
    return Model.GetRootAs(data[64:]).Graphs(0).NodesLength()


def test_benchmark_lite(cnn_onnx, tmp_path):
    assert run("converter_lite", "--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={tmp_path / 'b'}").returncode == 0
    p = run("benchmark_lite", f"--modelFile={tmp_path / 'b.ms'}", "--loopCount=3", "--warmUpLoopCount=1",
            "--numThreads=2", "--inputShape=x:2,3,32,32")
    assert p.returncode == 0, p.stderr
    assert "AvgRunTime" in p.stdout and "NumThreads = 2" in p.stdout
    p = run("benchmark_lite", f"--modelFile={tmp_path / 'b.ms'}")
    assert p.returncode != 0 and "dynamic shape" in p.stderr
    p = run("benchmark_lite", f"--modelFile={cnn_onnx}")
    assert p.returncode != 0 and "invalid .ms file" in p.stderr


def test_python_api_version_and_metadata(cnn_onnx, tmp_path):
    import converter
    r = converter.Converter().convert(converter.FmkType.ONNX, str(cnn_onnx), str(tmp_path / "meta"))
    md = load(r.output_file).get_metadata()
    assert md["source_format"] == "ONNX" and md["source_model"] == "cnn.onnx"
    assert md["producer"] == "mslite converter_lite"
    assert lite.__version__ == converter.__version__
