"""Bad input never crashes: malformed ONNX, unsupported operators, truncated / corrupted / hostile
.ms files, wrong versions, and wrong predict() arguments all raise clear Python exceptions."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
import lite
from model_zoo.tiny import mlp, small_cnn
from parity import convert, load

HEADER = struct.Struct("<8sHHIQQQQIIQ")


def shape_ops_model():
    """Reshape/Transpose/Slice/Gather/Split/Concat/Expand/ReduceMean/Softmax with constant shape inputs."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = [numpy_helper.from_array(v, k) for k, v in {
        "shape": i64(2, 12, 2), "starts": i64(1), "ends": i64(11), "axes": i64(2), "idx": i64(0, 2, -1),
        "split": i64(4, 6), "exp": i64(2, 10, 2), "raxes": i64(-1)}.items()]
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Slice", ["t", "starts", "ends", "axes"], ["s"]),    # [2, 2, 10]
        helper.make_node("Transpose", ["s"], ["s2"], perm=[0, 2, 1]),        # [2, 10, 2]
        helper.make_node("Split", ["s2", "split"], ["a", "b"], axis=1),
        helper.make_node("Concat", ["b", "a"], ["c"], axis=1),
        helper.make_node("Gather", ["c", "idx"], ["g"], axis=1),
        helper.make_node("Expand", ["c", "exp"], ["e"]),
        helper.make_node("ReduceMean", ["e", "raxes"], ["m"]),
        helper.make_node("Softmax", ["g"], ["y1"]),
        helper.make_node("Add", ["m", "m"], ["y2"]),
    ]
    graph = helper.make_graph(nodes, "shape_ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 12])],
                              [helper.make_tensor_value_info("y1", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("y2", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def loop_model():
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "converter"))
    from test_control_flow import loop_model as build
    return build()


def fused_model():
    """What the fusion passes produce (format 1.4): Pad folded into Conv, Conv with a residual input and
    ReLU, a depthwise Conv, MatMul with a bias input and GELU."""
    rng = np.random.default_rng(5)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    c = lambda v: np.array(v, np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(v, k) for k, v in {
        "pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "w": f(4, 4, 3, 3), "dw": f(4, 1, 3, 3), "db": f(4),
        "fc": f(4, 6), "fb": f(6), "sqrt2": c(np.sqrt(2)), "one": c(1.0), "half": c(0.5)}.items()]
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"]), helper.make_node("Conv", ["p", "w"], ["c"]),
             helper.make_node("Add", ["c", "x"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Conv", ["r", "dw", "db"], ["d"], group=4, pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["d"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["t", "fc"], ["m"]), helper.make_node("Add", ["m", "fb"], ["h"]),
             helper.make_node("Div", ["h", "sqrt2"], ["g0"]), helper.make_node("Erf", ["g0"], ["g1"]),
             helper.make_node("Add", ["g1", "one"], ["g2"]), helper.make_node("Mul", ["h", "g2"], ["g3"]),
             helper.make_node("Mul", ["g3", "half"], ["y"])]
    graph = helper.make_graph(nodes, "fused", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    return {name: convert(build(), str(d), name) for name, build in
            {"cnn": small_cnn, "mlp": mlp, "shape_ops": shape_ops_model, "loop": loop_model,
             "fused": fused_model}.items()}


def test_fused_model_is_fused_and_matches(models):
    from ms_schema.Model import Model
    data = open(models["fused"], "rb").read()
    g = Model.GetRootAs(data[64:]).Graphs(0)
    ops = [g.Nodes(i).Op() for i in range(g.NodesLength())]
    from ms_schema.OpType import OpType
    assert ops == [OpType.Conv, OpType.Conv, OpType.Transpose, OpType.MatMul], ops
    from parity import assert_parity
    assert_parity(fused_model(), {"x": np.random.default_rng(6).standard_normal((1, 4, 8, 8)).astype(np.float32)})


# --- converter side --------------------------------------------------------------------------------
def test_not_an_onnx_file(tmp_path):
    bad = tmp_path / "garbage.onnx"
    bad.write_bytes(os.urandom(256) + b"definitely not protobuf")
    with pytest.raises(converter.ConverterError, match="not a valid ONNX model"):
        converter.Converter().convert("ONNX", str(bad), str(tmp_path / "out"))
    assert not (tmp_path / "out.ms").exists()


def test_missing_file(tmp_path):
    with pytest.raises(converter.ConverterError, match="does not exist"):
        converter.Converter().convert("ONNX", str(tmp_path / "nope.onnx"), str(tmp_path / "out"))


def test_unsupported_attribute_values_are_all_listed(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 4])
    nodes = [helper.make_node("Pad", ["x", "p"], ["a"], name="pad1", mode="bogus"),
             helper.make_node("DepthToSpace", ["a"], ["b"], name="d2s1", blocksize=2, mode="XYZ"),
             helper.make_node("Relu", ["b"], ["y"], name="relu1")]
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.zeros(8, np.int64), "p")])
    path = tmp_path / "a.onnx"
    import onnx
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(converter.ConverterError) as e:
        converter.Converter().convert("ONNX", str(path), str(tmp_path / "a"))
    msg = str(e.value)
    assert "node 'pad1' (Pad): mode 'bogus'" in msg and "node 'd2s1' (DepthToSpace): mode 'XYZ'" in msg


def test_unsupported_operators_are_listed_with_nodes(tmp_path):
    nodes = [helper.make_node("Det", ["x"], ["a"], name="det1"),
             helper.make_node("Unique", ["x"], ["v"], name="unique1"),
             helper.make_node("Det", ["v"], ["y"], name="det2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([2], np.int64), "k")])
    path = tmp_path / "u.onnx"
    import onnx
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(converter.ConverterError) as e:
        converter.Converter().convert("ONNX", str(path), str(tmp_path / "u"))
    msg = str(e.value)
    assert "Det (nodes: det1, det2)" in msg and "Unique (nodes: unique1)" in msg
    assert not (tmp_path / "u.ms").exists()


# --- runtime: broken files -------------------------------------------------------------------------
def test_truncated_files_are_rejected(models, tmp_path):
    data = open(models["cnn"], "rb").read()
    graph_end = HEADER.unpack_from(data)[4] + HEADER.unpack_from(data)[5]
    for cut in sorted({0, 1, 8, 63, 64, 100, graph_end // 2, graph_end - 1, graph_end + 10, len(data) - 1}):
        p = tmp_path / f"cut{cut}.ms"
        p.write_bytes(data[:cut])
        with pytest.raises(lite.ModelFormatError, match="invalid|empty"):
            load(str(p))


def test_wrong_format_version(models, tmp_path):
    data = bytearray(open(models["mlp"], "rb").read())
    fields = list(HEADER.unpack_from(data))
    fields[1] = 2   # major version from the future
    HEADER.pack_into(data, 0, *fields)
    p = tmp_path / "v2.ms"
    p.write_bytes(bytes(data))
    with pytest.raises(lite.ModelFormatError, match=r"format version 2\.\d+ is not supported"):
        load(str(p))


def test_bad_magic_and_checksum(models, tmp_path):
    data = bytearray(open(models["mlp"], "rb").read())
    p = tmp_path / "m.ms"
    p.write_bytes(b"ONNX" + bytes(data[4:]))
    with pytest.raises(lite.ModelFormatError, match="bad magic"):
        load(str(p))
    data[HEADER.size + 20] ^= 0x10
    p.write_bytes(bytes(data))
    with pytest.raises(lite.ModelFormatError, match="checksum"):
        load(str(p))


def test_weight_reference_out_of_bounds(models, tmp_path):
    """A hostile header that shrinks the weight section below what tensors reference."""
    data = bytearray(open(models["cnn"], "rb").read())
    fields = list(HEADER.unpack_from(data))
    fields[7] = 64   # weights_size
    HEADER.pack_into(data, 0, *fields)
    p = tmp_path / "w.ms"
    p.write_bytes(bytes(data[: fields[6] + 64]))
    with pytest.raises(lite.ModelFormatError, match="outside the weight section"):
        load(str(p))


def test_missing_model_file():
    with pytest.raises(FileNotFoundError):
        lite.Model().build_from_file("/nonexistent/model.ms")


@pytest.mark.parametrize("model_name", ["cnn", "shape_ops", "loop", "fused"])
@pytest.mark.parametrize("mode", ["corrupt", "hostile"])
def test_random_mutations_never_crash(models, model_name, mode):
    """200 mutated files per (model, mode), each loaded (and run if it loads) in a subprocess."""
    worker = os.path.join(os.path.dirname(__file__), "fuzz_worker.py")
    seed = {"cnn": 1, "shape_ops": 2, "loop": 3, "fused": 4}[model_name] * 10 + (mode == "hostile")
    proc = subprocess.run([sys.executable, worker, models[model_name], str(seed), "200", mode],
                          capture_output=True, text=True, timeout=300)
    last = proc.stdout.strip().splitlines()[-1:] if proc.stdout else []
    assert proc.returncode == 0, f"crashed (exit {proc.returncode}) at {last}: {proc.stderr[-2000:]}"
    outcomes = eval(proc.stdout.strip().splitlines()[-1].split(" ", 1)[1])
    assert sum(outcomes.values()) > 0
    if mode == "hostile":   # with a valid checksum many mutations load and run: the verifier is exercised
        assert outcomes["loaded"] > 0 and outcomes["ran"] > 0, outcomes


def test_unmutated_models_load_and_run(models):
    for path in models.values():
        m = load(path)
        m.predict([np.ones([d if d >= 0 else 2 for d in t.shape], lite._lite.numpy_dtype(t.dtype))
                   for t in m.get_inputs()])


# --- runtime: wrong predict() arguments -------------------------------------------------------------
def test_predict_wrong_count(models):
    m = load(models["cnn"])
    with pytest.raises(ValueError, match="expects 1 inputs"):
        m.predict([np.zeros((1, 3, 32, 32), np.float32)] * 2)


def test_predict_wrong_dtype(models):
    m = load(models["cnn"])
    with pytest.raises(TypeError, match="input 'x': expected dtype float32, got float64"):
        m.predict([np.zeros((1, 3, 32, 32), np.float64)])


def test_predict_wrong_shape(models):
    m = load(models["cnn"])
    with pytest.raises(ValueError, match=r"input 'x': expected shape \[-1, 3, 32, 32\].*got \[1, 3, 31, 32\]"):
        m.predict([np.zeros((1, 3, 31, 32), np.float32)])
    with pytest.raises(ValueError, match="input 'x'"):
        m.predict([np.zeros((3, 32, 32), np.float32)])


def test_predict_dict_names(models):
    m = load(models["cnn"])
    with pytest.raises(ValueError, match=r"unknown names \['y'\], missing \['x'\]"):
        m.predict({"y": np.zeros((1, 3, 32, 32), np.float32)})
    out = m.predict({"x": np.zeros((1, 3, 32, 32), np.float32)})
    assert out[0].shape == [1, 10]


def test_predict_non_array(models):
    m = load(models["cnn"])
    with pytest.raises(TypeError, match="numpy array"):
        m.predict([[0.0] * 10])


def test_tensor_set_data_checks(models):
    m = load(models["cnn"])
    t = m.get_inputs()[0]
    with pytest.raises(TypeError, match="expected dtype float32"):
        t.set_data_from_numpy(np.zeros((1, 3, 32, 32), np.int64))
    with pytest.raises(ValueError, match="expected shape"):
        t.set_data_from_numpy(np.zeros((1, 4, 32, 32), np.float32))


def test_noncontiguous_input_is_accepted(models):
    m = load(models["cnn"])
    x = np.random.default_rng(0).standard_normal((1, 32, 32, 3)).astype(np.float32)
    a = m.predict([x.transpose(0, 3, 1, 2)])[0].get_data_to_numpy()
    b = m.predict([np.ascontiguousarray(x.transpose(0, 3, 1, 2))])[0].get_data_to_numpy()
    np.testing.assert_array_equal(a, b)


def test_bad_context():
    ctx = lite.Context()
    ctx.cpu.thread_num = 0
    with pytest.raises(ValueError, match="thread_num"):
        lite.Model().build_from_file(__file__, lite.ModelType.MINDIR_LITE, ctx)
    ctx = lite.Context()
    ctx.target = ["ascend"]
    with pytest.raises(NotImplementedError, match="ascend"):
        ctx._core()


def test_runtime_error_names_node_and_shapes(tmp_path):
    """A shape error found at predict names the operator, node and shapes."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    w = numpy_helper.from_array(np.ones((3, 5), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="bad_add")], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    import onnx
    path = tmp_path / "a.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    m = load(converter.Converter().convert("ONNX", str(path), str(tmp_path / "a")).output_file)
    with pytest.raises(ValueError, match=r"node 'bad_add' \(Add\): shapes \[2, 4\] and \[3, 5\] do not broadcast"):
        m.predict([np.zeros((2, 4), np.float32)])


def test_empty_input_with_huge_other_dims_is_refused(tmp_path):
    """An empty tensor's other dims must multiply within int64 too: kernels derive strides from every dim (the
    sanitizer fuzz found Slice's strides overflowing behind an input of shape [0, 2^40, 2^31 - 1]). Empty inputs of
    sane dims still run."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["a", "b", "c"])
    inits = [numpy_helper.from_array(np.ones((50, 8), np.float32), "table"),
             numpy_helper.from_array(np.array([1], np.int64), "starts"),
             numpy_helper.from_array(np.array([3], np.int64), "ends"),
             numpy_helper.from_array(np.array([1], np.int64), "axes")]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
             helper.make_node("Slice", ["e", "starts", "ends", "axes"], ["y"])]
    graph = helper.make_graph(nodes, "g", [ids], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    import onnx
    path = tmp_path / "g.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    m = load(converter.Converter().convert("ONNX", str(path), str(tmp_path / "g")).output_file)
    inputs = m.get_inputs()
    with pytest.raises(ValueError, match=r"shape \[0, 1099511627776, 2147483647\] has too many elements"):
        m.resize(inputs, [[0, 1 << 40, (1 << 31) - 1]])
    y = m.predict([np.zeros((0, 4, 5), np.int64)])[0].get_data_to_numpy()
    assert y.shape == (0, 2, 5, 8)
    y = m.predict([np.ones((2, 4, 5), np.int64)])[0].get_data_to_numpy()
    assert y.shape == (2, 2, 5, 8) and (y == 1).all()
