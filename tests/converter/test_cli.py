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
    for flag in ("--fmk", "--modelFile", "--outputFile", "--inputShape", "--optimize", "--dumpGraph"):
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


def test_dump_graph_writes_the_optimised_graph_and_pass_report(cnn_onnx, tmp_path):
    import json
    dump = tmp_path / "cnn.json"
    p = run("converter_lite", "--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={tmp_path / 'cnn'}",
            f"--dumpGraph={dump}")
    assert p.returncode == 0, p.stderr
    report = json.loads(dump.read_text())
    fired = {e["name"]: e["fired"] for e in report["passes"]}
    assert fired["batchnorm_folding"] >= 1 and fired["activation_fusion"] >= 1, fired
    assert report["op_counts_before"]["BatchNormalization"] >= 1
    assert "BatchNormalization" not in report["op_counts_after"]
    nodes = report["graph"]["nodes"]
    assert sum(report["op_counts_after"].values()) == len(nodes) > 0
    assert [n["op"] for n in nodes].count("Conv") == report["op_counts_after"]["Conv"]
    assert report["graph"]["inputs"][0]["dtype"] == "float32" and report["output"].endswith("cnn.ms")
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".dump-")]   # written atomically


def test_dump_graph_into_a_missing_directory_fails_before_writing(cnn_onnx, tmp_path):
    p = run("converter_lite", "--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={tmp_path / 'cnn'}",
            f"--dumpGraph={tmp_path / 'nowhere' / 'cnn.json'}")
    assert p.returncode == 1 and "does not exist" in p.stderr
    assert not (tmp_path / "cnn.ms").exists()


def test_benchmark_lite(cnn_onnx, tmp_path):
    assert run("converter_lite", "--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={tmp_path / 'b'}").returncode == 0
    p = run("benchmark_lite", f"--modelFile={tmp_path / 'b.ms'}", "--loopCount=3", "--warmUpLoopCount=1",
            "--numThreads=2", "--inputShape=x:2,3,32,32")
    assert p.returncode == 0, p.stderr
    assert "AvgRunTime" in p.stdout and "NumThreads = 2" in p.stdout and "Precision = float32" in p.stdout
    p = run("benchmark_lite", f"--modelFile={tmp_path / 'b.ms'}", "--inputShape=x:1,3,32,32", "--precisionMode=fp8")
    assert p.returncode != 0 and "precision_mode must be enforce_fp32, preferred_bf16 or preferred_fp16" in p.stderr
    p = run("benchmark_lite", f"--modelFile={tmp_path / 'b.ms'}")
    assert p.returncode != 0 and "dynamic shape" in p.stderr
    p = run("benchmark_lite", f"--modelFile={cnn_onnx}")
    assert p.returncode != 0 and "invalid .ms file" in p.stderr
    # flag values are checked and the message names the flag
    for flag, message in (("--loopCount=-5", "--loopCount=-5 must be at least 1"),
                          ("--numThreads=two", "--numThreads='two' is not an integer"),
                          ("--warmUpLoopCount=3x", "--warmUpLoopCount='3x' is not an integer"),
                          ("--inputShape=x:1,-3,32,32", "--inputShape: dim '-3' of 'x:1,-3,32,32' is not a size")):
        p = run("benchmark_lite", f"--modelFile={tmp_path / 'b.ms'}", "--inputShape=x:1,3,32,32", flag)
        assert p.returncode != 0 and message in p.stderr, (flag, p.stderr)


def _write_benchmark_data(path, outputs: dict) -> None:
    with open(path, "w") as f:
        for name, arr in outputs.items():
            f.write(f"{name} {arr.ndim} {' '.join(map(str, arr.shape))}\n")
            f.write(" ".join(repr(float(v)) for v in arr.ravel()) + "\n")


def test_benchmark_lite_accuracy_check_with_input_files(cnn_onnx, tmp_path):
    assert run("converter_lite", "--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={tmp_path / 'b'}").returncode == 0
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    model = onnx.load(str(cnn_onnx))
    expected = run_ort(model, {"x": x})
    out_name = model.graph.output[0].name
    _write_benchmark_data(tmp_path / "good.out", {out_name: expected[0]})
    args = [f"--modelFile={tmp_path / 'b.ms'}", "--loopCount=2", "--inputShape=x:1,3,32,32",
            f"--inDataFile={tmp_path / 'x.bin'}"]
    p = run("benchmark_lite", *args, f"--benchmarkDataFile={tmp_path / 'good.out'}", "--accuracyThreshold=0.5")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Accuracy check passed" in p.stdout and f"Mean bias of output '{out_name}'" in p.stdout
    # Off by 10%: the check must fail, with a non-zero exit status.
    _write_benchmark_data(tmp_path / "bad.out", {out_name: expected[0] * 1.1})
    p = run("benchmark_lite", *args, f"--benchmarkDataFile={tmp_path / 'bad.out'}")
    assert p.returncode == 1 and "Accuracy check FAILED" in p.stdout
    # A file of the wrong size names the input and the sizes.
    x[:, :1].tofile(tmp_path / "short.bin")
    p = run("benchmark_lite", f"--modelFile={tmp_path / 'b.ms'}", "--inputShape=x:1,3,32,32",
            f"--inDataFile={tmp_path / 'short.bin'}")
    assert p.returncode == 1 and "needs 12288" in p.stderr


def test_benchmark_lite_time_profiling_and_trace(cnn_onnx, tmp_path):
    import json
    assert run("converter_lite", "--fmk=ONNX", f"--modelFile={cnn_onnx}", f"--outputFile={tmp_path / 'b'}").returncode == 0
    trace = tmp_path / "trace.json"
    p = run("benchmark_lite", f"--modelFile={tmp_path / 'b.ms'}", "--loopCount=3", "--inputShape=x:1,3,32,32",
            "--timeProfiling", f"--traceFile={trace}")
    assert p.returncode == 0, p.stderr
    assert "opType" in p.stdout and "opName" in p.stdout and "Conv " in p.stdout
    events = json.loads(trace.read_text())["traceEvents"]
    assert events and all(e["ph"] == "X" and e["dur"] >= 0 for e in events)
    starts = [e["ts"] for e in events]
    assert starts == sorted(starts)   # execution order
    # Every executed node appears once per run in the trace and in the per-node table.
    ms = load(tmp_path / "b.ms")
    ms.resize(ms.get_inputs(), [[1, 3, 32, 32]])
    ms.enable_profiling()
    ms.predict([np.zeros((1, 3, 32, 32), np.float32)])
    prof = ms.last_profile()
    assert [e["name"] for e in events] == [p["name"] for p in prof]
    table = p.stdout.split("opName", 1)[1]
    assert all(rec["name"] in table for rec in prof)
    assert all(rec["duration_us"] >= 0 and rec["op"] for rec in prof)
    ms.enable_profiling(False)
    ms.predict([np.zeros((1, 3, 32, 32), np.float32)])
    assert ms.last_profile() == []


def test_python_api_version_and_metadata(cnn_onnx, tmp_path):
    import converter
    r = converter.Converter().convert(converter.FmkType.ONNX, str(cnn_onnx), str(tmp_path / "meta"))
    md = load(r.output_file).get_metadata()
    assert md["source_format"] == "ONNX" and md["source_model"] == "cnn.onnx"
    assert md["producer"] == "mslite converter_lite"
    assert lite.__version__ == converter.__version__
