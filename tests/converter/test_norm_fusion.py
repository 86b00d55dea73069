"""LayerNorm and RMSNorm fusion (every exported form becomes one LayerNormalization / RMSNormalization node,
and the passes stay away when they cannot prove equivalence), the ONNX opset-23 RMSNormalization operator,
and the runtime kernels against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.frontends.onnx_frontend import import_onnx
from converter.passes import run_pipeline
from parity import assert_parity, convert, load

rng = np.random.default_rng(23)
HIDDEN = 24


def make(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def const(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def fused(model, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    g = import_onnx(str(path), None)
    report = run_pipeline(g, "general")
    return g, report


def rms_nodes(form, square="pow", weight="after", axes=(-1,), eps=1e-6):
    """x -> y through RMSNorm written out as exporters do."""
    inits = [const("eps", eps), const("axes", list(axes), np.int64), const("two", 2.0), const("one", 1.0),
             const("mhalf", -0.5), const("w", rng.uniform(0.5, 1.5, HIDDEN))]
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]) if square == "pow"
             else helper.make_node("Mul", ["x", "x"], ["sq"]),
             helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["var"])]
    if form == "reciprocal":     # Qwen2 / Llama
        nodes += [helper.make_node("Sqrt", ["var"], ["sd"]), helper.make_node("Reciprocal", ["sd"], ["inv"]),
                  helper.make_node("Mul", ["x", "inv"], ["n"])]
    elif form == "div":
        nodes += [helper.make_node("Sqrt", ["var"], ["sd"]), helper.make_node("Div", ["x", "sd"], ["n"])]
    elif form == "one_over":     # T5
        nodes += [helper.make_node("Sqrt", ["var"], ["sd"]), helper.make_node("Div", ["one", "sd"], ["inv"]),
                  helper.make_node("Mul", ["inv", "x"], ["n"])]
    elif form == "pow_half":
        nodes += [helper.make_node("Pow", ["var", "mhalf"], ["inv"]), helper.make_node("Mul", ["x", "inv"], ["n"])]
    if weight == "after":
        nodes.append(helper.make_node("Mul", ["n", "w"], ["y"]))
    elif weight == "before":
        nodes.append(helper.make_node("Mul", ["w", "n"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", ["n"], ["y"]))
    return nodes, inits


@pytest.mark.parametrize("form", ["reciprocal", "div", "one_over", "pow_half"])
@pytest.mark.parametrize("square", ["pow", "mul"])
@pytest.mark.parametrize("weight", ["after", "before", "none"])
def test_rmsnorm_forms_fuse_to_one_node(tmp_path, form, square, weight):
    nodes, inits = rms_nodes(form, square, weight)
    model = make(nodes, [vi("x", ["B", 5, HIDDEN])], [vi("y", None)], inits)
    g, report = fused(model, tmp_path)
    assert report.fired["rms_norm_fusion"] == 1
    assert [n.op_type for n in g.nodes] == ["RMSNormalization"]
    assert g.nodes[0].attrs["axis"] == 2 and abs(g.nodes[0].attrs["epsilon"] - 1e-6) < 1e-12
    x = rng.standard_normal((3, 5, HIDDEN)).astype(np.float32) * 4
    assert_parity(model, {"x": x})
    assert_parity(model, {"x": x[:1]}, threads=2)


def test_rmsnorm_over_two_trailing_axes(tmp_path):
    nodes, inits = rms_nodes("reciprocal", weight="none", axes=(-2, -1))
    model = make(nodes, [vi("x", [2, 3, 4, HIDDEN])], [vi("y", None)], inits)
    g, report = fused(model, tmp_path)
    assert [n.op_type for n in g.nodes] == ["RMSNormalization"] and g.nodes[0].attrs["axis"] == 2
    assert_parity(model, {"x": rng.standard_normal((2, 3, 4, HIDDEN)).astype(np.float32)})


@pytest.mark.parametrize("case", ["middle_axis", "no_keepdims", "cube", "eps_reused", "sum_not_mean"])
def test_rmsnorm_left_alone_when_not_equivalent(tmp_path, case):
    nodes, inits = rms_nodes("reciprocal", weight="none")
    inputs, outputs = [vi("x", [2, 5, HIDDEN])], [vi("y", None)]
    if case == "middle_axis":      # mean over axis 1 of 3: not the trailing axes
        inits[1] = const("axes", [1], np.int64)
    elif case == "no_keepdims":
        nodes[1] = helper.make_node("ReduceMean", ["sq", "axes"], ["ms0"], keepdims=0)
        nodes.insert(2, helper.make_node("Unsqueeze", ["ms0", "axes"], ["ms"]))
    elif case == "cube":           # x^3: not a square
        inits[2] = const("two", 3.0)
    elif case == "eps_reused":     # the mean square is also a graph output
        outputs.append(vi("ms", None))
    elif case == "sum_not_mean":
        nodes[1] = helper.make_node("ReduceSum", ["sq", "axes"], ["ms"], keepdims=1)
    g, report = fused(make(nodes, inputs, outputs, inits), tmp_path)
    assert report.fired["rms_norm_fusion"] == 0
    assert "RMSNormalization" not in [n.op_type for n in g.nodes]
    feeds = {"x": rng.standard_normal((2, 5, HIDDEN)).astype(np.float32)}
    if case != "no_keepdims":
        assert_parity(make(nodes, inputs, outputs, inits), feeds)


def test_float16_model_fuses_after_lowering_to_float32(tmp_path):
    """A float16 graph is lowered to float32 compute first (the CPU kernels are float32), so its RMSNorm
    fuses like a float32 one; outputs stay float16 and are closer to exact than float16 step by step."""
    nodes, inits = rms_nodes("reciprocal")
    f16 = [const(i.name, numpy_helper.to_array(i), np.float16) if i.data_type == TensorProto.FLOAT else i
           for i in inits]
    model = make(nodes, [vi("x", [2, 5, HIDDEN], TensorProto.FLOAT16)], [vi("y", None, TensorProto.FLOAT16)], f16)
    g, report = fused(model, tmp_path)
    assert report.fired["rms_norm_fusion"] == 1
    x = rng.standard_normal((2, 5, HIDDEN)).astype(np.float16)
    assert_parity(model, {"x": x}, rtol=1e-2, atol=1e-2)


def test_weight_that_broadcasts_over_rows_is_not_folded(tmp_path):
    """A per-row weight (5, 1) is not a scale of the normalised axis: RMSNorm fuses, the Mul stays."""
    nodes, inits = rms_nodes("reciprocal")
    inits[-1] = const("w", rng.uniform(0.5, 1.5, (5, 1)))
    model = make(nodes, [vi("x", [2, 5, HIDDEN])], [vi("y", None)], inits)
    g, report = fused(model, tmp_path)
    assert [n.op_type for n in g.nodes] == ["RMSNormalization", "Mul"]
    assert_parity(model, {"x": rng.standard_normal((2, 5, HIDDEN)).astype(np.float32)})


@pytest.mark.parametrize("axis", [-1, 1])
def test_onnx_rmsnormalization_operator(tmp_path, axis):
    """The opset-23 operator converts to the same node and matches ONNX Runtime."""
    scale_shape = [HIDDEN] if axis == -1 else [4, HIDDEN]
    model = make([helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis, epsilon=1e-5)],
                 [vi("x", [3, 4, HIDDEN])], [vi("y", None)], [const("s", rng.uniform(0.5, 1.5, scale_shape))],
                 opset=23)
    x = rng.standard_normal((3, 4, HIDDEN)).astype(np.float32)
    assert_parity(model, {"x": x})
    g, _ = fused(model, tmp_path)
    assert [n.op_type for n in g.nodes] == ["RMSNormalization"]


def test_runtime_rejects_a_scale_of_the_wrong_shape(tmp_path):
    model = make([helper.make_node("RMSNormalization", ["x", "s"], ["y"])], [vi("x", [3, HIDDEN])], [vi("y", None)],
                 [const("s", np.ones(HIDDEN + 1))], opset=23)
    with pytest.raises(Exception, match="scale"):
        load(convert(model, str(tmp_path)))


def test_transformer_exports_keep_one_node_per_norm(cache_dir, tmp_path):
    """Qwen2, Llama and T5 as exported by PyTorch: each RMSNorm (2 per layer + the final one) is one node."""
    pytest.importorskip("transformers")
    import json

    import converter
    from model_zoo.hf_tiny import export_onnx
    for name in ("qwen2", "llama", "t5_encoder"):
        dump = tmp_path / f"{name}.json"
        result = converter.Converter().convert("ONNX", export_onnx(name, cache_dir), str(tmp_path / name),
                                               dump_graph=str(dump))
        report = json.loads(dump.read_text())   # what `converter_lite --dumpGraph` writes
        assert result.passes["rms_norm_fusion"] == 5, name
        assert {"name": "rms_norm_fusion", "fired": 5} == {k: v for k, v in next(
            p for p in report["passes"] if p["name"] == "rms_norm_fusion").items() if k != "ms"}
        after = report["op_counts_after"]
        assert after["RMSNormalization"] == 5 and report["op_counts_before"]["ReduceMean"] == 5, name
        assert not {"Pow", "ReduceMean", "Sqrt", "Reciprocal"} & set(after), (name, sorted(after))


def layer_norm_nodes(form="div", scale=True, bias=True, axes=(-1,), eps=1e-5):
    """x -> y through LayerNorm as PyTorch exports it below opset 17."""
    inits = [const("eps", eps), const("axes", list(axes), np.int64), const("two", 2.0),
             const("g", rng.uniform(0.5, 1.5, HIDDEN)), const("b", rng.uniform(-1, 1, HIDDEN))]
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["mu"], keepdims=1),
             helper.make_node("Sub", ["x", "mu"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq", "axes"], ["var"], keepdims=1),
             helper.make_node("Add", ["var", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["sd"])]
    if form == "div":
        nodes.append(helper.make_node("Div", ["d", "sd"], ["n"]))
    else:
        nodes += [helper.make_node("Reciprocal", ["sd"], ["inv"]), helper.make_node("Mul", ["d", "inv"], ["n"])]
    last = "n"
    if scale:
        nodes.append(helper.make_node("Mul", [last, "g"], ["s"]))
        last = "s"
    if bias:
        nodes.append(helper.make_node("Add", ["b", last], ["t"]))
        last = "t"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    return nodes, inits


@pytest.mark.parametrize("form", ["div", "reciprocal"])
@pytest.mark.parametrize("scale,bias", [(True, True), (True, False), (False, False)])
def test_layernorm_decomposed_fuses_to_one_node(tmp_path, form, scale, bias):
    nodes, inits = layer_norm_nodes(form, scale, bias)
    model = make(nodes, [vi("x", ["B", 7, HIDDEN])], [vi("y", None)], inits)
    g, report = fused(model, tmp_path)
    assert report.fired["layer_norm_fusion"] == 1 and report.fired["rms_norm_fusion"] == 0
    assert [n.op_type for n in g.nodes] == ["LayerNormalization"]
    assert len(g.nodes[0].inputs) == (3 if bias else 2)
    x = rng.standard_normal((2, 7, HIDDEN)).astype(np.float32) * 3 + 5   # a large mean: LayerNorm, not RMS
    assert_parity(model, {"x": x})


def test_layernorm_over_two_axes_and_shared_center_left_alone(tmp_path):
    nodes, inits = layer_norm_nodes(axes=(-2, -1), scale=False, bias=False)
    model = make(nodes, [vi("x", [2, 3, HIDDEN])], [vi("y", None)], inits)
    g, report = fused(model, tmp_path)
    assert [n.op_type for n in g.nodes] == ["LayerNormalization"] and g.nodes[0].attrs["axis"] == 1
    assert_parity(model, {"x": rng.standard_normal((2, 3, HIDDEN)).astype(np.float32)})
    nodes, inits = layer_norm_nodes()
    nodes.append(helper.make_node("Neg", ["d"], ["z"]))   # the centred value has a third reader
    model = make(nodes, [vi("x", [2, 3, HIDDEN])], [vi("y", None), vi("z", None)], inits)
    g, report = fused(model, tmp_path)
    assert report.fired["layer_norm_fusion"] == 0
    assert_parity(model, {"x": rng.standard_normal((2, 3, HIDDEN)).astype(np.float32)})


@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # the TorchScript exporter, the one that writes opset 14
def test_torch_layernorm_exported_at_opset_14(tmp_path):
    """PyTorch writes nn.LayerNorm out as nine ops below opset 17; they come back as one node."""
    torch = pytest.importorskip("torch")
    module = torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.LayerNorm(HIDDEN), torch.nn.GELU())
    torch.manual_seed(0)
    for p in module.parameters():
        torch.nn.init.normal_(p, std=0.5)
    path = tmp_path / "ln.onnx"
    torch.onnx.export(module, (torch.randn(2, 5, HIDDEN),), str(path), opset_version=14, dynamo=False,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "B"}})
    model = onnx.load(str(path))
    assert "LayerNormalization" not in [n.op_type for n in model.graph.node]
    g, report = fused(model, tmp_path)
    assert report.fired["layer_norm_fusion"] == 1
    assert [n.op_type for n in g.nodes] == ["MatMul", "LayerNormalization", "Gelu"]
    assert_parity(model, {"x": rng.standard_normal((3, 5, HIDDEN)).astype(np.float32)})
