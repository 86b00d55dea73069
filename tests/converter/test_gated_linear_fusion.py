"""Gated linear fusion: SwiGLU's `silu(gate) * up` (and GeGLU's) becomes the up projection's fifth input, multiplied
into its output tiles after bias and activation. Matches ONNX Runtime across tile edges, with 1 and 2 threads, with
and without integer arithmetic; a Mul that broadcasts or a product read elsewhere is left alone."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
from converter.frontends.onnx_frontend import import_onnx
from converter.passes import run_pipeline
from model_zoo.hf_tiny import export_onnx
from parity import assert_parity, convert, load, run_ort

rng = np.random.default_rng(41)
B, S, H, I = 2, 14, 32, 40   # 28 rows: 6-row tiles and a 4-row tail; 40 columns: 16-column panels and a tail


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_decoder_mlps_lose_their_gating_mul(name, cache_dir, tmp_path):
    out = tmp_path / "g.json"
    converter.Converter().convert("ONNX", export_onnx(name, cache_dir), str(tmp_path / name), dump_graph=str(out))
    d = json.loads(out.read_text())
    fired = {p["name"]: p["fired"] for p in d["passes"]}
    assert fired["gated_linear_fusion"] == 2   # one MLP per layer, 2 layers
    nodes = d["graph"]["nodes"]
    prod = {o: n for n in nodes for o in n["outputs"]}
    gated = [n for n in nodes if n["op"] == "MatMul" and len(n["inputs"]) == 5]
    assert len(gated) == 2
    for n in gated:
        gate = prod[n["inputs"][4]]
        assert gate["op"] == "MatMul" and gate["attrs"].get("activation") == "silu"


def glu_graph(gate_act="silu", up_bias=False, broadcast=False, share_up=False, share_gate=False, up_act=None):
    w = lambda *s: numpy_helper.from_array((rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32), f"w{len(inits)}")  # noqa: E731
    inits = []
    for shape in ((H, I), (H, I), (I, H)):
        inits.append(w(*shape))
    nodes = [helper.make_node("MatMul", ["x", inits[0].name], ["g"])]
    if gate_act == "silu":
        nodes += [helper.make_node("Sigmoid", ["g"], ["gs"]), helper.make_node("Mul", ["g", "gs"], ["ga"])]
    else:
        nodes += [helper.make_node("Gelu", ["g"], ["ga"])]
    nodes.append(helper.make_node("MatMul", ["x", inits[1].name], ["u0"]))
    up = "u0"
    if up_bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(I).astype(np.float32), "ub"))
        nodes.append(helper.make_node("Add", ["u0", "ub"], ["u1"]))
        up = "u1"
    if up_act:
        nodes.append(helper.make_node(up_act, [up], ["u2"]))
        up = "u2"
    gate = "ga"
    if broadcast:
        nodes.append(helper.make_node("ReduceMean", ["ga", "axes"], ["gm"], keepdims=1))
        inits.append(numpy_helper.from_array(np.array([1], np.int64), "axes"))
        gate = "gm"   # (B, 1, I): the Mul broadcasts
    nodes += [helper.make_node("Mul", [gate, up], ["h"]), helper.make_node("MatMul", ["h", inits[2].name], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, H])]
    if share_up:
        outputs.append(helper.make_tensor_value_info(up, TensorProto.FLOAT, [B, S, I]))
    if share_gate:
        outputs.append(helper.make_tensor_value_info(gate, TensorProto.FLOAT, [B, S, I]))
    graph = helper.make_graph(nodes, "glu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, H])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def fired(model, tmp_path) -> int:
    onnx.save(model, tmp_path / "m.onnx")
    return run_pipeline(import_onnx(str(tmp_path / "m.onnx"), None)).fired["gated_linear_fusion"]


FEEDS = {"x": rng.standard_normal((B, S, H)).astype(np.float32)}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kwargs", [{}, {"gate_act": "gelu"}, {"up_bias": True}, {"up_act": "Tanh"},
                                    {"share_up": True}],
                         ids=["swiglu", "geglu", "up_bias", "up_activation_after_store", "folds_into_the_gate"])
def test_gated_unit_fuses_and_matches(kwargs, threads, tmp_path):
    model = glu_graph(**kwargs)
    assert fired(model, tmp_path) == 1
    assert_parity(model, FEEDS, threads=threads, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kwargs, why", [(dict(broadcast=True), "the gate broadcasts over the rows"),
                                         (dict(share_up=True, share_gate=True), "both products are graph outputs")])
def test_what_cannot_fold_is_left_alone(kwargs, why, tmp_path):
    model = glu_graph(**kwargs)
    assert fired(model, tmp_path) == 0, why
    assert_parity(model, FEEDS, rtol=1e-4, atol=1e-5)


def test_integer_arithmetic_applies_the_multiplier(tmp_path):
    """DYNAMIC_QUANT: the fused up projection runs on the integer kernel and still multiplies by the gate."""
    model = glu_graph()
    onnx.save(model, tmp_path / "m.onnx")
    cfg = tmp_path / "q.cfg"
    cfg.write_text("[common_quant_param]\nquant_type=DYNAMIC_QUANT\nbit_num=8\n")
    res = converter.Converter().convert("ONNX", str(tmp_path / "m.onnx"), str(tmp_path / "q"), config_file=str(cfg))
    assert res.passes["gated_linear_fusion"] == 1
    got = load(res.output_file, 2).predict(FEEDS)[0].get_data_to_numpy()
    want = run_ort(model, FEEDS)[0]
    # 7-bit weights and 8-bit activations through three chained products: a few percent; without the gate the
    # output would be unrelated (error ~ 100%).
    assert np.sqrt(np.mean((got - want) ** 2)) < 0.08 * np.sqrt(np.mean(want ** 2))


def shapeless_glu(same_input: bool) -> onnx.ModelProto:
    """SwiGLU over inputs of unknown leading dims (nothing to compare them by): the gate and up products of x, or of x
    and y."""
    w = [numpy_helper.from_array((rng.standard_normal((H, I)) / np.sqrt(H)).astype(np.float32), f"w{i}")
         for i in range(2)]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["g"]), helper.make_node("Sigmoid", ["g"], ["gs"]),
             helper.make_node("Mul", ["g", "gs"], ["ga"]),
             helper.make_node("MatMul", ["x" if same_input else "y", "w1"], ["u"]),
             helper.make_node("Mul", ["ga", "u"], ["h"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, None, H]) for n in ("x", "y")]
    output = helper.make_tensor_value_info("h", TensorProto.FLOAT, [None, None, I])
    graph = helper.make_graph(nodes, "glu", inputs, [output], w)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def test_products_of_one_input_fold_without_known_shapes(tmp_path):
    """Two products of the same input by weights of one shape have one shape whatever the input's (the LLM step
    graph, built for any number of tokens); products of two inputs might broadcast and are left alone."""
    feeds = {n: rng.standard_normal((B, S, H)).astype(np.float32) for n in ("x", "y")}
    for same, want in ((True, 1), (False, 0)):
        model = shapeless_glu(same)
        assert fired(model, tmp_path) == want
        assert_parity(model, feeds, rtol=1e-4, atol=1e-5)
