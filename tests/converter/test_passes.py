"""Converter frontend and passes: opsets, Constant nodes, external data, folding, dead code,
Identity/Dropout removal, BatchNorm folding into Conv and Gemm. Each checked for structure and parity."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
from converter.frontends.onnx_frontend import import_onnx
from converter.passes import run_pipeline
from parity import assert_parity

rng = np.random.default_rng(3)


def make(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def graph_after(model, tmp_path, optimize="general", **kw):
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    g = import_onnx(str(path), kw.get("input_shapes"))
    report = run_pipeline(g, optimize)
    return g, report


def conv_bn_model(opset=17):
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    bn = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in
          {"s": rng.random(4) + .5, "b": rng.random(4), "m": rng.random(4), "v": rng.random(4) + .5}.items()]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"], epsilon=1e-3)]
    return make(nodes, [vi("x", ["N", 3, 8, 8])], [vi("y", None)], [w] + bn, opset)


@pytest.mark.parametrize("opset", [11, 13, 15, 17, 19, 21, onnx.defs.onnx_opset_version()])
def test_opsets_11_to_newest(opset):
    assert_parity(conv_bn_model(opset), {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)})


def test_opset_10_is_upgraded(tmp_path):
    path = tmp_path / "old.onnx"
    onnx.save(make([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])], opset=10), str(path))
    with pytest.warns(UserWarning, match="opset 10; upgraded to opset 11"):
        converter.Converter().convert("ONNX", str(path), str(tmp_path / "o"))


def test_opset_the_version_converter_cannot_upgrade_is_refused_with_its_reason(tmp_path, monkeypatch):
    from onnx import version_converter

    def fail(model, target):
        raise RuntimeError("No Adapter For Relu")
    monkeypatch.setattr(version_converter, "convert_version", fail)
    path = tmp_path / "old.onnx"
    onnx.save(make([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])], opset=10), str(path))
    with pytest.raises(converter.ConverterError, match="opset 10 .*cannot upgrade it: No Adapter For Relu"):
        converter.Converter().convert("ONNX", str(path), str(tmp_path / "o"))
    assert not (tmp_path / "o.ms").exists()


def test_batchnorm_folds_into_conv(tmp_path):
    g, report = graph_after(conv_bn_model(), tmp_path)
    assert [n.op_type for n in g.nodes] == ["Conv"]
    assert report.fired["batchnorm_folding"] == 1
    assert_parity(conv_bn_model(), {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)})


@pytest.mark.parametrize("trans_b", [0, 1])
def test_batchnorm_folds_into_gemm(tmp_path, trans_b):
    w = rng.standard_normal((5, 6) if trans_b else (6, 5)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "c")]
    inits += [numpy_helper.from_array(v.astype(np.float32), k) for k, v in
              {"s": rng.random(5) + .5, "b": rng.random(5), "m": rng.random(5), "v": rng.random(5) + .5}.items()]
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["g"], transB=trans_b, alpha=0.7, beta=1.3),
             helper.make_node("BatchNormalization", ["g", "s", "b", "m", "v"], ["y"])]
    model = make(nodes, [vi("x", ["N", 6])], [vi("y", None)], inits)
    g, _ = graph_after(model, tmp_path)
    assert [n.op_type for n in g.nodes] == ["Gemm"]
    assert_parity(model, {"x": rng.standard_normal((3, 6)).astype(np.float32)})


def test_shared_conv_output_blocks_bn_folding(tmp_path):
    model = conv_bn_model()
    model.graph.node.append(helper.make_node("Relu", ["c"], ["r"]))
    model.graph.output.append(vi("r", None))
    g, report = graph_after(model, tmp_path)
    assert report.fired["batchnorm_folding"] == 0
    assert_parity(model, {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)})


def test_identity_dropout_and_dead_nodes_removed(tmp_path):
    nodes = [helper.make_node("Identity", ["x"], ["i"]),
             helper.make_node("Dropout", ["i"], ["d"]),
             helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("Sigmoid", ["x"], ["unused"]),
             helper.make_node("Identity", ["r"], ["y"])]
    model = make(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])])
    g, report = graph_after(model, tmp_path)
    assert [n.op_type for n in g.nodes] == ["Relu"]
    assert g.outputs == ["y"] and g.nodes[0].outputs == ["y"]   # output name kept
    assert report.fired["identity_removal"] == 3 and report.fired["dead_code"] == 1
    assert_parity(model, {"x": rng.standard_normal((2, 3)).astype(np.float32)})


def test_identity_of_graph_input_to_output_is_a_copy(tmp_path):
    model = make([helper.make_node("Identity", ["x"], ["y"])], [vi("x", [3])], [vi("y", [3])])
    assert_parity(model, {"x": rng.standard_normal(3).astype(np.float32)})


def test_constant_nodes_and_shape_subgraph_folding(tmp_path):
    """Reshape(x, Concat(Shape(x)[0], Constant(-1))) folds to a constant shape when x is static."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array([0], np.int64))),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Constant", [], ["m1"], value_ints=[-1]),
             helper.make_node("Concat", ["n", "m1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = make(nodes, [vi("x", ["N", 3, 4])], [vi("y", None)])
    g_dyn, _ = graph_after(model, tmp_path)
    assert "Shape" in [n.op_type for n in g_dyn.nodes]     # dynamic batch: computed at prepare
    g_fix, report = graph_after(model, tmp_path, input_shapes={"x": [2, 3, 4]})
    assert [n.op_type for n in g_fix.nodes] == ["Reshape"]
    assert report.fired["constant_folding"] == 3
    assert_parity(model, {"x": rng.standard_normal((5, 3, 4)).astype(np.float32)})


def test_constant_only_graph_folds_completely(tmp_path):
    a = numpy_helper.from_array(rng.standard_normal((2, 3)).astype(np.float32), "a")
    nodes = [helper.make_node("Mul", ["a", "a"], ["sq"]), helper.make_node("Add", ["sq", "x"], ["y"])]
    model = make(nodes, [vi("x", [2, 3])], [vi("y", None)], [a])
    g, _ = graph_after(model, tmp_path)
    assert [n.op_type for n in g.nodes] == ["Add"]


def test_external_data(tmp_path):
    w = rng.standard_normal((64, 32)).astype(np.float32)
    model = make([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", ["N", 64])], [vi("y", None)],
                 [numpy_helper.from_array(w, "w")])
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="ext.bin",
              size_threshold=0)
    assert (tmp_path / "ext.bin").exists()
    x = rng.standard_normal((3, 64)).astype(np.float32)
    from parity import load, run_ort
    r = converter.Converter().convert("ONNX", str(path), str(tmp_path / "ext"))
    got = load(r.output_file).predict([x])[0].get_data_to_numpy()
    np.testing.assert_allclose(got, run_ort(str(path), {"x": x})[0], rtol=1e-4, atol=1e-5)
    (tmp_path / "ext.bin").unlink()
    with pytest.raises(converter.ConverterError, match="external data"):
        converter.Converter().convert("ONNX", str(path), str(tmp_path / "ext2"))


def test_dynamic_dims_kept_unless_fixed(tmp_path):
    model = make([helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["batch", 3, "h", "w"])], [vi("y", None)])
    g, _ = graph_after(model, tmp_path)
    assert g.tensors["x"].shape == [-1, 3, -1, -1]
    g, _ = graph_after(model, tmp_path, input_shapes={"x": [1, 3, 8, 8]})
    assert g.tensors["x"].shape == [1, 3, 8, 8]


def test_unsupported_attribute_value_is_named(tmp_path):
    model = make([helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="WRONG")], [vi("x", [1, 1, 4, 4])],
                 [vi("y", None)], [numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w")])
    path = tmp_path / "bad.onnx"
    onnx.save(model, str(path))
    with pytest.raises(converter.ConverterError, match="auto_pad 'WRONG'"):
        converter.Converter().convert("ONNX", str(path), str(tmp_path / "bad"))


def test_maxpool_indices_output_rejected(tmp_path):
    model = make([helper.make_node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2, 2], name="mp")],
                 [vi("x", [1, 1, 4, 4])], [vi("y", None), vi("idx", None, TensorProto.INT64)])
    path = tmp_path / "mp.onnx"
    onnx.save(model, str(path))
    with pytest.raises(converter.ConverterError, match="node 'mp' \\(MaxPool\\): the Indices output"):
        converter.Converter().convert("ONNX", str(path), str(tmp_path / "mp"))


def test_float16_model_runs_with_float16_interface(tmp_path):
    """float16 inputs, weights and outputs: computed in float32 inside, float16 at the edges."""
    w = rng.standard_normal((8, 4)).astype(np.float16)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Cast", ["r"], ["c32"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["c32"], ["y"], to=TensorProto.FLOAT16)]
    model = make(nodes, [vi("x", ["N", 8], TensorProto.FLOAT16)], [vi("y", None, TensorProto.FLOAT16)],
                 [numpy_helper.from_array(w, "w")])
    x = rng.standard_normal((3, 8)).astype(np.float16)
    from parity import convert, load, run_ort
    m = load(convert(model, str(tmp_path)))
    assert m.get_inputs()[0].dtype.name == "FLOAT16"
    got = m.predict([x])[0].get_data_to_numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), run_ort(model, {"x": x})[0].astype(np.float32),
                               rtol=2e-3, atol=2e-3)   # float16 output rounding


def test_wrong_declared_shapes_are_hints(tmp_path):
    """A model declaring wrong intermediate/output shapes still runs right; the converter warns."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]), helper.make_node("Relu", ["t"], ["y"])]
    model = make(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])])   # really [3, 2]
    model.graph.value_info.append(vi("t", [7, 7]))
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.warns(UserWarning, match="declared shape"):
        r = converter.Converter().convert("ONNX", str(path), str(tmp_path / "m"))
    from parity import load
    x = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(load(r.output_file).predict([x])[0].get_data_to_numpy(), np.maximum(x.T, 0))


@pytest.mark.parametrize("flag", [True, False])
def test_if_with_constant_condition_is_inlined(tmp_path, flag):
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t_out"])], "then", [], [vi("t_out", [2, 3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e_out"]),
                                helper.make_node("Mul", ["e_out", "k"], ["e2"])], "else", [], [vi("e2", [2, 3])],
                               [numpy_helper.from_array(np.array(3.0, np.float32), "k")])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="branch")]
    model = make(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])], [numpy_helper.from_array(np.array(flag), "c")])
    g, _ = graph_after(model, tmp_path)
    assert "If" not in [n.op_type for n in g.nodes]
    assert_parity(model, {"x": rng.standard_normal((2, 3)).astype(np.float32)})


def test_if_on_shape_arithmetic_folds_when_shapes_are_fixed(tmp_path):
    """cond = (Shape(x)[0] == 2): constant once --inputShape fixes the batch."""
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t_out"])], "then", [], [vi("t_out", None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e_out"])], "else", [], [vi("e_out", None)])
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Equal", ["n", "two"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(2, np.int64), "two")]
    model = make(nodes, [vi("x", ["N", 3])], [vi("y", None)], inits)
    path = tmp_path / "if.onnx"
    onnx.save(model, str(path))
    g_dyn, _ = graph_after(model, tmp_path)
    assert "If" in [n.op_type for n in g_dyn.nodes]          # decided at run time
    g_fix, _ = graph_after(model, tmp_path, input_shapes={"x": [2, 3]})
    assert "If" not in [n.op_type for n in g_fix.nodes]      # inlined
    from parity import load
    dyn = load(converter.Converter().convert("ONNX", str(path), str(tmp_path / "dyn")).output_file)
    fixed = load(converter.Converter().convert("ONNX", str(path), str(tmp_path / "fixed"), input_shape="x:2,3").output_file)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(fixed.predict([x])[0].get_data_to_numpy(), np.maximum(x, 0))
    np.testing.assert_array_equal(dyn.predict([x])[0].get_data_to_numpy(), np.maximum(x, 0))
    x3 = rng.standard_normal((3, 3)).astype(np.float32)
    np.testing.assert_array_equal(dyn.predict([x3])[0].get_data_to_numpy(), -x3)


@pytest.mark.parametrize("act,extra", [("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("HardSwish", {}),
                                       ("Clip", {"min": 0.0, "max": 6.0})])
def test_activation_fused_into_conv_and_gemm(tmp_path, act, extra):
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((4 * 6 * 6, 5)).astype(np.float32) * 0.1, "fc")]
    clip_in = []
    if act == "Clip":
        inits += [numpy_helper.from_array(np.array(extra["min"], np.float32), "lo"),
                  numpy_helper.from_array(np.array(extra["max"], np.float32), "hi")]
        clip_in = ["lo", "hi"]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node(act, ["c"] + clip_in, ["a"]),
             helper.make_node("Flatten", ["a"], ["f"]), helper.make_node("Gemm", ["f", "fc"], ["g"]),
             helper.make_node(act, ["g"] + clip_in, ["y"])]
    model = make(nodes, [vi("x", ["N", 3, 8, 8])], [vi("y", None)], inits)
    g, report = graph_after(model, tmp_path)
    assert act not in [n.op_type for n in g.nodes] and report.fired["activation_fusion"] == 2
    assert_parity(model, {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32) * 3})


def test_activation_not_fused_when_conv_output_is_shared(tmp_path):
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Add", ["c", "r"], ["y"])]
    model = make(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", None)], inits)
    g, report = graph_after(model, tmp_path)
    assert report.fired["activation_fusion"] == 0
    assert_parity(model, {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)})


def _pad_conv_model(pads, value=None, mode="constant", opset=17):
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    pad_in = ["x", "pads"]
    if value is not None:
        inits.append(numpy_helper.from_array(np.array(value, np.float32), "v"))
        pad_in.append("v")
    nodes = [helper.make_node("Pad", pad_in, ["p"], mode=mode),
             helper.make_node("Conv", ["p", "w"], ["y"], strides=[2, 2], pads=[1, 0, 0, 1])]
    return make(nodes, [vi("x", [1, 3, 9, 10])], [vi("y", None)], inits, opset)


@pytest.mark.parametrize("pads,value", [([0, 0, 0, 1, 0, 0, 1, 0], None), ([0, 0, 2, 1, 0, 0, 1, 3], 0.0)])
def test_zero_pad_folds_into_conv(tmp_path, pads, value):
    model = _pad_conv_model(pads, value)
    g, report = graph_after(model, tmp_path)
    assert report.fired["pad_folding"] == 1 and [n.op_type for n in g.nodes] == ["Conv"]
    assert_parity(model, {"x": rng.standard_normal((1, 3, 9, 10)).astype(np.float32)})


@pytest.mark.parametrize("pads,value,mode", [([0, 1, 0, 0, 0, 1, 0, 0], None, "constant"),   # channel padding
                                             ([0, 0, 1, 1, 0, 0, 1, 1], 0.5, "constant"),    # non-zero value
                                             ([0, 0, 1, 1, 0, 0, 1, 1], None, "reflect")])
def test_pad_not_folded_when_not_equivalent(tmp_path, pads, value, mode):
    model = _pad_conv_model(pads, value, mode)
    if pads[1]:   # padded channels need a matching weight
        model.graph.initializer[0].CopyFrom(numpy_helper.from_array(
            rng.standard_normal((4, 5, 3, 3)).astype(np.float32), "w"))
    g, report = graph_after(model, tmp_path)
    assert report.fired["pad_folding"] == 0 and "Pad" in [n.op_type for n in g.nodes]
    assert_parity(model, {"x": rng.standard_normal((1, 3, 9, 10)).astype(np.float32)})


def _residual_model(other_shape):
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["r", "c"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    return make(nodes, [vi("x", [2, 3, 8, 8]), vi("r", other_shape)], [vi("y", None)], inits)


def test_residual_add_and_relu_fuse_into_conv(tmp_path):
    model = _residual_model([2, 4, 8, 8])
    g, report = graph_after(model, tmp_path)
    assert report.fired["residual_fusion"] == 1 and report.fired["activation_fusion"] == 1
    (conv,) = g.nodes
    assert conv.op_type == "Conv" and conv.inputs[3] == "r" and conv.attrs["activation"] == "relu"
    feeds = {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32),
             "r": rng.standard_normal((2, 4, 8, 8)).astype(np.float32)}
    assert_parity(model, feeds)
    assert_parity(model, feeds, threads=2)


def test_broadcasting_add_is_not_fused_into_conv(tmp_path):
    model = _residual_model([4, 1, 1])
    g, report = graph_after(model, tmp_path)
    assert report.fired["residual_fusion"] == 0 and "Add" in [n.op_type for n in g.nodes]
    assert_parity(model, {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32),
                          "r": rng.standard_normal((4, 1, 1)).astype(np.float32)})


def test_residual_fusion_when_the_other_branch_comes_later(tmp_path):
    """ResNet's projection shortcut: Add(main branch conv, shortcut conv), the shortcut listed last."""
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (4, 3, 3, 3)), ("w2", (4, 4, 1, 1)), ("ws", (4, 3, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w2"], ["b"]), helper.make_node("Conv", ["x", "ws"], ["s"]),
             helper.make_node("Add", ["b", "s"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    model = make(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", None)], inits)
    g, report = graph_after(model, tmp_path)
    assert report.fired["residual_fusion"] == 1 and [n.op_type for n in g.nodes] == ["Conv"] * 3
    assert_parity(model, {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)})


def test_residual_fuses_after_a_computed_pad_once_shapes_are_completed(tmp_path):
    """Hugging Face MobileNetV2's pattern: padding computed from the input's shape leaves every later dim unknown
    in the ONNX file; with a fixed input shape the Pad folds into the Conv, static_shapes recomputes the Conv's
    output shape, and the block's Add fuses as the Conv's residual."""
    i64 = lambda v, n: numpy_helper.from_array(np.array(v, np.int64), n)  # noqa: E731
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2, "w"),
             i64([0], "zero_i"), i64([0, 0, 1, 1, 0, 0, 1, 1], "base_pads")]
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero_i"], ["n"]),
             helper.make_node("Mul", ["n", "zero_i"], ["z"]), helper.make_node("Add", ["base_pads", "z"], ["pads"]),
             helper.make_node("Pad", ["x", "pads"], ["xp"]), helper.make_node("Conv", ["xp", "w"], ["c"]),
             helper.make_node("Add", ["c", "x"], ["y"])]
    model = make(nodes, [vi("x", ["N", 8, "H", "W"])], [vi("y", None)], inits)
    g, report = graph_after(model, tmp_path, input_shapes={"x": [1, 8, 10, 10]})
    assert report.fired["static_shapes"] >= 1 and report.fired["residual_fusion"] == 1
    (conv,) = g.nodes
    assert conv.op_type == "Conv" and conv.inputs[3] == "x" and g.tensors[conv.outputs[0]].shape == [1, 8, 10, 10]
    assert_parity(model, {"x": rng.standard_normal((1, 8, 10, 10)).astype(np.float32)})


def test_static_shapes_never_override_a_stated_dim():
    from converter.ir import Graph, Node, Tensor
    from converter.passes.static_shapes import complete_static_shapes
    g = Graph(inputs=["x"], outputs=["y", "z"])
    g.tensors["x"] = Tensor("x", np.dtype(np.float32), [1, 4, 9, 9])
    g.tensors["w"] = Tensor("w", np.dtype(np.float32), [6, 4, 3, 3], np.zeros((6, 4, 3, 3), np.float32))
    g.tensors["y"] = Tensor("y", np.dtype(np.float32), [-1, 6, -1, -1])
    g.tensors["z"] = Tensor("z", np.dtype(np.float32), [-1, 6, 5, -1])   # disagrees with the arithmetic (4 x 4)
    g.nodes = [Node("c1", "Conv", ["x", "w"], ["y"], {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
               Node("c2", "Conv", ["x", "w"], ["z"], {"strides": [2, 2]})]
    assert complete_static_shapes(g) == 1
    assert g.tensors["y"].shape == [1, 6, 5, 5] and g.tensors["z"].shape == [-1, 6, 5, -1]


def _gelu_nodes(x, out, order):
    """GELU as exporters write it: PyTorch/transformers `x * (1 + erf(x / sqrt2))) * 0.5` or `(x * 0.5) * ...`."""
    c = lambda v, n: numpy_helper.from_array(np.array(v, np.float32), n)  # noqa: E731
    inits = [c(np.sqrt(2.0), "sqrt2"), c(1.0, "one"), c(0.5, "half"), c(1 / np.sqrt(2.0), "rsqrt2")]
    if order == "div_then_half":
        nodes = [helper.make_node("Div", [x, "sqrt2"], ["g0"]), helper.make_node("Erf", ["g0"], ["g1"]),
                 helper.make_node("Add", ["g1", "one"], ["g2"]), helper.make_node("Mul", [x, "g2"], ["g3"]),
                 helper.make_node("Mul", ["g3", "half"], [out])]
    else:   # mul by 1/sqrt2, half first
        nodes = [helper.make_node("Mul", ["rsqrt2", x], ["g0"]), helper.make_node("Erf", ["g0"], ["g1"]),
                 helper.make_node("Add", ["one", "g1"], ["g2"]), helper.make_node("Mul", [x, "half"], ["h"]),
                 helper.make_node("Mul", ["h", "g2"], [out])]
    return nodes, inits


@pytest.mark.parametrize("order", ["div_then_half", "half_first"])
def test_gelu_pattern_fuses_into_matmul_with_bias_and_layer_scale(tmp_path, order):
    """ConvNeXt's MLP: MatMul + bias, GELU, MatMul + bias, layer-scale Mul: two MatMul nodes remain."""
    w1 = numpy_helper.from_array(rng.standard_normal((8, 32)).astype(np.float32) * 0.3, "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np.float32) * 0.3, "w2")
    b2 = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b2")
    gamma = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "gamma")
    gelu, consts = _gelu_nodes("h1", "a", order)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["b1", "m1"], ["h1"]), *gelu,
             helper.make_node("MatMul", ["a", "w2"], ["m2"]), helper.make_node("Add", ["m2", "b2"], ["h2"]),
             helper.make_node("Mul", ["gamma", "h2"], ["y"])]
    model = make(nodes, [vi("x", [2, 5, 7, 8])], [vi("y", None)], [w1, b1, w2, b2, gamma] + consts)
    g, report = graph_after(model, tmp_path)
    assert report.fired["gelu_fusion"] == 1 and report.fired["linear_epilogue"] == 3
    assert [n.op_type for n in g.nodes] == ["MatMul", "MatMul"] and g.nodes[0].attrs["activation"] == "gelu"
    x = rng.standard_normal((2, 5, 7, 8)).astype(np.float32)
    assert_parity(model, {"x": x})
    assert_parity(model, {"x": x}, threads=2)


def test_gelu_not_fused_with_wrong_constant_or_shared_value(tmp_path):
    gelu, consts = _gelu_nodes("x", "y", "div_then_half")
    consts[0] = numpy_helper.from_array(np.array(1.4, np.float32), "sqrt2")   # not sqrt(2)
    model = make(gelu, [vi("x", [3, 4])], [vi("y", None)], consts)
    g, report = graph_after(model, tmp_path)
    assert report.fired["gelu_fusion"] == 0
    assert_parity(model, {"x": rng.standard_normal((3, 4)).astype(np.float32)})
    gelu, consts = _gelu_nodes("x", "y", "div_then_half")
    gelu.append(helper.make_node("Neg", ["g1"], ["z"]))   # erf output read twice
    model = make(gelu, [vi("x", [3, 4])], [vi("y", None), vi("z", None)], consts)
    g, report = graph_after(model, tmp_path)
    assert report.fired["gelu_fusion"] == 0
    assert_parity(model, {"x": rng.standard_normal((3, 4)).astype(np.float32)})


@pytest.mark.parametrize("producer", ["Conv", "MatMul"])
def test_silu_fuses_into_producer(tmp_path, producer):
    if producer == "Conv":
        inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")]
        first, shape = helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), [1, 3, 6, 6]
    else:
        inits = [numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "w")]
        first, shape = helper.make_node("MatMul", ["x", "w"], ["c"]), [3, 6]
    nodes = [first, helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["s", "c"], ["y"])]
    model = make(nodes, [vi("x", shape)], [vi("y", None)], inits)
    g, report = graph_after(model, tmp_path)
    assert [n.op_type for n in g.nodes] == [producer] and g.nodes[0].attrs["activation"] == "silu"
    assert_parity(model, {"x": rng.standard_normal(shape).astype(np.float32)})


@pytest.mark.parametrize("threads", [1, 2])
def test_silu_in_full_gemm_tiles_matches_ort(tmp_path, threads):
    """Full register tiles apply a fused SiLU in registers (16-lane exp), partial ones after the store: 64 x 200 outputs
    (6-row tiles and a 4-row tail, 64-column tiles and an 8-column tail) spanning -60..60, past exp's clamps."""
    inits = [numpy_helper.from_array((rng.standard_normal((96, 200)) * 2).astype(np.float32), "w")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["c"]), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["y"])]
    model = make(nodes, [vi("x", [64, 96])], [vi("y", None)], inits)
    g, _ = graph_after(model, tmp_path)
    assert [n.op_type for n in g.nodes] == ["MatMul"] and g.nodes[0].attrs["activation"] == "silu"
    x = rng.standard_normal((64, 96)).astype(np.float32)
    x[5] *= 0.01   # a row of small outputs, where silu(x) ~ x / 2
    assert_parity(model, {"x": x}, threads=threads)


@pytest.mark.parametrize("order", ["x_first", "x_second"])
@pytest.mark.parametrize("producer", ["Conv", "MatMul"])
def test_quick_gelu_fuses_into_producer(tmp_path, producer, order):
    """CLIP's QuickGELU, x * sigmoid(1.702 x), in both operand orders -> the producer's quick_gelu epilogue."""
    if producer == "Conv":
        inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")]
        first, shape = helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), [1, 3, 6, 6]
    else:   # 19 columns: a full 16-column panel and a half-width tail
        inits = [numpy_helper.from_array(rng.standard_normal((6, 19)).astype(np.float32), "w")]
        first, shape = helper.make_node("MatMul", ["x", "w"], ["c"]), [13, 6]
    inits.append(numpy_helper.from_array(np.array(1.702, np.float32), "alpha"))
    pair = (["c", "alpha"], ["c", "s"]) if order == "x_first" else (["alpha", "c"], ["s", "c"])
    nodes = [first, helper.make_node("Mul", pair[0], ["z"]), helper.make_node("Sigmoid", ["z"], ["s"]),
             helper.make_node("Mul", pair[1], ["y"])]
    model = make(nodes, [vi("x", shape)], [vi("y", None)], inits)
    g, report = graph_after(model, tmp_path)
    assert [n.op_type for n in g.nodes] == [producer] and g.nodes[0].attrs["activation"] == "quick_gelu"
    assert_parity(model, {"x": rng.standard_normal(shape).astype(np.float32)})


def test_quick_gelu_with_another_constant_is_left_alone(tmp_path):
    inits = [numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(1.5, np.float32), "alpha")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["c"]), helper.make_node("Mul", ["c", "alpha"], ["z"]),
             helper.make_node("Sigmoid", ["z"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    model = make(nodes, [vi("x", [3, 6])], [vi("y", None)], inits)
    g, report = graph_after(model, tmp_path)
    assert [n.op_type for n in g.nodes] == ["MatMul", "Mul", "Sigmoid", "Mul"]
    assert not g.nodes[0].attrs.get("activation")
    assert_parity(model, {"x": rng.standard_normal((3, 6)).astype(np.float32)})


@pytest.mark.parametrize("threads", [1, 2])
def test_tanh_gelu_fuses_into_matmul(tmp_path, threads):
    """GPT-2's MLP: MatMul + bias + gelu_new (exported as elementary ops) -> one MatMul, tanh-GELU epilogue."""
    inits = [numpy_helper.from_array(rng.standard_normal((24, 40)).astype(np.float32) * 0.3, "w"),
             numpy_helper.from_array(rng.standard_normal(40).astype(np.float32), "b")]
    inits += [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in
              {"half": 0.5, "three": 3.0, "coef": 0.044715, "k": np.sqrt(2 / np.pi), "one": 1.0}.items()]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["v"]),
             helper.make_node("Mul", ["v", "half"], ["h"]), helper.make_node("Pow", ["v", "three"], ["c"]),
             helper.make_node("Mul", ["c", "coef"], ["cc"]), helper.make_node("Add", ["v", "cc"], ["a"]),
             helper.make_node("Mul", ["a", "k"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["u"]), helper.make_node("Mul", ["h", "u"], ["y"])]
    model = make(nodes, [vi("x", [2, 9, 24])], [vi("y", None)], inits)
    g, report = graph_after(model, tmp_path)
    assert [n.op_type for n in g.nodes] == ["MatMul"] and g.nodes[0].attrs["activation"] == "gelu_tanh"
    assert_parity(model, {"x": rng.standard_normal((2, 9, 24)).astype(np.float32)}, threads=threads)


def test_bias_with_batch_dims_is_not_folded(tmp_path):
    inits = [numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((2, 1, 5)).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    model = make(nodes, [vi("x", [3, 6])], [vi("y", None)], inits)
    g, report = graph_after(model, tmp_path)
    # Not a bias; the MatMul takes it as its broadcasting addend (product [3, 5] + [2, 1, 5] -> [2, 3, 5]).
    assert report.fired["linear_epilogue"] == 0 and report.fired["residual_fusion"] == 1
    assert [n.op_type for n in g.nodes] == ["MatMul"] and g.nodes[0].inputs[2:] == ["", "b"]
    assert_parity(model, {"x": rng.standard_normal((3, 6)).astype(np.float32)})


@pytest.mark.parametrize("case", ["residual_then_relu", "column_addend", "runtime_b_batched"])
@pytest.mark.parametrize("threads", [1, 2])
def test_residual_add_fuses_into_matmul(tmp_path, case, threads):
    """dense(x) + residual: the Add becomes the MatMul's addend (in the GEMM's registers when it has the
    product's shape; after the product when it broadcasts), with an activation after the sum."""
    x = rng.standard_normal((2, 7, 16)).astype(np.float32)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32) * 0.3, "w"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")]
    inputs, feeds = [vi("x", [2, 7, 16])], {"x": x}
    if case == "runtime_b_batched":   # attention-like: both operands are activations, 2 x 7 small products
        nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
                 helper.make_node("MatMul", ["xt", "x"], ["m"]), helper.make_node("Add", ["m", "r"], ["y"])]
        inputs.append(vi("r", [2, 16, 16]))
        feeds["r"] = rng.standard_normal((2, 16, 16)).astype(np.float32)
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m0"]), helper.make_node("Add", ["m0", "b"], ["m"]),
                 helper.make_node("Add", ["r", "m"], ["s"])]
        if case == "residual_then_relu":
            nodes.append(helper.make_node("Relu", ["s"], ["y"]))
            inputs.append(vi("r", [2, 7, 16]))
            feeds["r"] = rng.standard_normal((2, 7, 16)).astype(np.float32)
        else:
            nodes.append(helper.make_node("Identity", ["s"], ["y"]))
            inputs.append(vi("r", [7, 1]))
            feeds["r"] = rng.standard_normal((7, 1)).astype(np.float32)
    model = make(nodes, inputs, [vi("y", None)], inits)
    g, report = graph_after(model, tmp_path)
    assert report.fired["residual_fusion"] == 1 and "Add" not in [n.op_type for n in g.nodes]
    mm = next(n for n in g.nodes if n.op_type == "MatMul")
    assert mm.inputs[3] == "r" and (case != "residual_then_relu" or mm.attrs.get("activation") == "relu")
    assert_parity(model, feeds, threads=threads)


@pytest.mark.parametrize("coef,fuses", [(0.044715, True), (0.05, False)])
def test_tanh_gelu_pattern(tmp_path, coef, fuses):
    """GPT-2's gelu_new as exported: 0.5x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) -> one Gelu (tanh)."""
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in
             {"half": 0.5, "three": 3.0, "coef": coef, "k": np.sqrt(2 / np.pi), "one": 1.0}.items()]
    nodes = [helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Pow", ["x", "three"], ["c"]),
             helper.make_node("Mul", ["c", "coef"], ["cc"]), helper.make_node("Add", ["x", "cc"], ["a"]),
             helper.make_node("Mul", ["a", "k"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["u"]), helper.make_node("Mul", ["h", "u"], ["y"])]
    model = make(nodes, [vi("x", [3, 16])], [vi("y", None)], inits)
    g, report = graph_after(model, tmp_path)
    assert report.fired["gelu_fusion"] == (1 if fuses else 0)
    if fuses:
        assert [n.op_type for n in g.nodes] == ["Gelu"] and g.nodes[0].attrs["tanh_approximation"]
    assert_parity(model, {"x": rng.standard_normal((3, 16)).astype(np.float32) * 3})


def test_matmul_with_inner_dim_one_becomes_mul(tmp_path):
    """Rotary embeddings' outer product inv_freq[:, None] @ positions[None, :] (batch-broadcast, rank 3 x 2)."""
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"])]
    model = make(nodes, [vi("a", [2, 4, 1]), vi("b", [1, 5])], [vi("y", None)])
    g, report = graph_after(model, tmp_path)
    assert report.fired["unit_k_matmul"] == 1 and [n.op_type for n in g.nodes] == ["Mul"]
    feeds = {"a": rng.standard_normal((2, 4, 1)).astype(np.float32), "b": rng.standard_normal((1, 5)).astype(np.float32)}
    assert_parity(model, feeds, rtol=0, atol=0)   # one product per output: bit-identical
    model = make(nodes, [vi("a", [2, 4, 3]), vi("b", [3, 5])], [vi("y", None)])
    assert graph_after(model, tmp_path)[1].fired["unit_k_matmul"] == 0
