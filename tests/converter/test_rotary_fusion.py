"""Rotary fusion: transformers' rotate_half RoPE (Slice/Neg/Concat/Mul/Add) becomes one RotaryEmbedding for q and
one for k per layer, reading half tables cut once for the whole model; it matches ONNX Runtime on hand-written
graphs and leaves alone what it cannot prove equal (tables with unequal halves, other slices, shared
intermediates, reduced precision)."""
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
from parity import assert_parity

rng = np.random.default_rng(23)
B, N, S, D = 2, 3, 5, 8


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_decoders_get_one_rotary_node_for_q_and_k_per_layer(name, cache_dir, tmp_path):
    out = tmp_path / "g.json"
    converter.Converter().convert("ONNX", export_onnx(name, cache_dir), str(tmp_path / name), dump_graph=str(out))
    d = json.loads(out.read_text())
    after, before = d["op_counts_after"], d["op_counts_before"]
    assert after.get("RotaryEmbedding") == 4 and "Neg" not in after and before.get("Neg", 0) >= 4   # 2 layers
    nodes = d["graph"]["nodes"]
    prod = {o: n for n in nodes for o in n["outputs"]}
    ropes = [n for n in nodes if n["op"] == "RotaryEmbedding"]
    assert len({tuple(n["inputs"][1:]) for n in ropes}) == 1   # every layer reads the same two half tables
    for node in (n for n in nodes if n["op"] == "Attention"):
        assert prod[node["inputs"][0]]["op"] == "RotaryEmbedding" and prod[node["inputs"][1]]["op"] == "RotaryEmbedding"


def rope_graph(halves_equal=True, cut=D // 2, share_neg=False, constant_tables=False, dtype=TensorProto.FLOAT):
    """y = x * cos + concat(-x[..., cut:], x[..., :cut]) * sin, with cos/sin = unsqueeze(cos/sin(cat(f, f or g)))."""
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    inits = [c("h", [cut]), c("zero", [0]), c("end", [2 ** 62]), c("last", [-1]), c("one", [1])]
    nodes = []
    inputs = [helper.make_tensor_value_info("x", dtype, [B, N, S, D])]
    if constant_tables:
        f = rng.uniform(-3, 3, (1, 1, S, D // 2)).astype(np.float32)
        other = f if halves_equal else f + 0.5
        angles = np.concatenate([f, other], -1)
        inits += [numpy_helper.from_array(np.cos(angles), "cos_u"), numpy_helper.from_array(np.sin(angles), "sin_u")]
    else:
        inputs.append(helper.make_tensor_value_info("f", TensorProto.FLOAT, [B, S, D // 2]))
        second = "f"
        if not halves_equal:
            nodes.append(helper.make_node("Neg", ["f"], ["g"]))
            second = "g"
        nodes += [helper.make_node("Concat", ["f", second], ["emb"], axis=-1),
                  helper.make_node("Cos", ["emb"], ["cos"]), helper.make_node("Sin", ["emb"], ["sin"]),
                  helper.make_node("Unsqueeze", ["cos", "one"], ["cos_u"]),
                  helper.make_node("Unsqueeze", ["sin", "one"], ["sin_u"])]
    if dtype != TensorProto.FLOAT:
        nodes += [helper.make_node("Cast", [t], [t + "_c"], to=dtype) for t in ("cos_u", "sin_u")]
    cos, sin = ("cos_u_c", "sin_u_c") if dtype != TensorProto.FLOAT else ("cos_u", "sin_u")
    nodes += [helper.make_node("Mul", ["x", cos], ["xc"]),
              helper.make_node("Slice", ["x", "zero", "h", "last"], ["x1"]),
              helper.make_node("Slice", ["x", "h", "end", "last"], ["x2"]),
              helper.make_node("Neg", ["x2"], ["nx2"]),
              helper.make_node("Concat", ["nx2", "x1"], ["rot"], axis=-1),
              helper.make_node("Mul", ["rot", sin], ["rs"]),
              helper.make_node("Add", ["xc", "rs"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", dtype, [B, N, S, D])]
    if share_neg:
        outputs.append(helper.make_tensor_value_info("nx2", dtype, None))
    model = helper.make_model(helper.make_graph(nodes, "rope", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 18)])
    return model


def feeds(model):
    names = [i.name for i in model.graph.input]
    out = {"x": rng.standard_normal((B, N, S, D)).astype(np.float32)}
    if "f" in names:
        out["f"] = rng.uniform(-3, 3, (B, S, D // 2)).astype(np.float32)
    return out


def fused(model, tmp_path):
    path = tmp_path / "rope.onnx"
    onnx.save(model, path)
    g = import_onnx(str(path), None)
    return run_pipeline(g).fired.get("rotary_fusion", 0), g


@pytest.mark.parametrize("constant_tables", [False, True], ids=["computed_tables", "constant_tables"])
def test_hand_written_rotate_half_fuses_and_matches(constant_tables, tmp_path):
    model = rope_graph(constant_tables=constant_tables)
    count, g = fused(model, tmp_path)
    assert count == 1 and [n.op_type for n in g.nodes].count("RotaryEmbedding") == 1
    assert_parity(model, feeds(model), threads=2, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs, why", [
    (dict(halves_equal=False), "cos = cos(cat(f, -f)): the halves differ, the half table cannot stand for it"),
    (dict(halves_equal=False, constant_tables=True), "a constant table with unequal halves"),
    (dict(cut=D // 2 - 1), "the slices are not the two halves"),
    (dict(share_neg=True), "-x2 is also a graph output"),
])
def test_what_is_not_provably_rotary_is_left_alone(kwargs, why, tmp_path):
    model = rope_graph(**kwargs)
    count, g = fused(model, tmp_path)
    assert count == 0, why
    assert "RotaryEmbedding" not in [n.op_type for n in g.nodes]
    assert_parity(model, feeds(model), rtol=1e-5, atol=1e-6)


def test_float16_graph_fuses_after_lowering_and_stays_close(tmp_path):
    """A float16 graph is lowered to float32 compute first (its rounding points become float32's), then fused."""
    model = rope_graph(dtype=TensorProto.FLOAT16)
    count, _ = fused(model, tmp_path)
    assert count == 1
    f = feeds(model)
    f["x"] = f["x"].astype(np.float16)
    assert_parity(model, f, rtol=2e-3, atol=2e-3)


def every_two_graph(constant_tables=False, pairs_equal=True, swapped=False):
    """GPT-J's form on x (B, S, N, D): x * cos + flatten(stack(-x[..., 1::2], x[..., ::2])) * sin, the tables
    repeat_interleave(t[:, :, None], 2, -1) as torch exports them (Unsqueeze [2, 4], Expand, Reshape)."""
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    inits = [c("zero", [0]), c("one", [1]), c("end", [2 ** 62]), c("last", [-1]), c("ax3", [3]), c("two", [2]),
             c("x_shape", [B, S, N, D])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, N, D])]
    nodes = []
    if constant_tables:
        t = rng.uniform(-3, 3, (1, S, 1, D // 2)).astype(np.float32)
        angles = np.repeat(t, 2, axis=-1)
        if not pairs_equal:
            angles[..., 1::2] += 0.5
        inits += [numpy_helper.from_array(np.cos(angles), "cos_r"), numpy_helper.from_array(np.sin(angles), "sin_r")]
    else:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [B, S, D // 2]) for n in ("cos", "sin")]
        inits += [c("axes24", [2, 4]), c("rep", [1, 1, 1, 1, 2]), c("tbl", [B, S, 1, -1])]
        for t in ("cos", "sin"):
            nodes += [helper.make_node("Unsqueeze", [t, "axes24"], [t + "_u"]),
                      helper.make_node("Expand", [t + "_u", "rep"], [t + "_e"]),
                      helper.make_node("Reshape", [t + "_e", "tbl"], [t + "_r"])]
    first, second = ("one", "zero") if not swapped else ("zero", "one")
    nodes += [helper.make_node("Slice", ["x", second, "end", "ax3", "two"], ["even"]),
              helper.make_node("Slice", ["x", first, "end", "ax3", "two"], ["odd"]),
              helper.make_node("Neg", ["odd"], ["nodd"]),
              helper.make_node("Unsqueeze", ["nodd", "last"], ["a"]),
              helper.make_node("Unsqueeze", ["even", "last"], ["b"]),
              helper.make_node("Concat", ["a", "b"], ["ab"], axis=-1),
              helper.make_node("Reshape", ["ab", "x_shape"], ["rot"]),
              helper.make_node("Mul", ["x", "cos_r"], ["xc"]),
              helper.make_node("Mul", ["rot", "sin_r"], ["rs"]),
              helper.make_node("Add", ["xc", "rs"], ["y"])]
    graph = helper.make_graph(nodes, "rope2", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, N, D])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def every_two_feeds(model):
    names = [i.name for i in model.graph.input]
    out = {"x": rng.standard_normal((B, S, N, D)).astype(np.float32)}
    for t, fn in (("cos", np.cos), ("sin", np.sin)):
        if t in names:
            out[t] = fn(rng.uniform(-3, 3, (B, S, D // 2))).astype(np.float32)
    return out


@pytest.mark.parametrize("constant_tables", [False, True], ids=["computed_tables", "constant_tables"])
def test_gptj_rotate_every_two_fuses_as_interleaved(constant_tables, tmp_path):
    model = every_two_graph(constant_tables=constant_tables)
    count, g = fused(model, tmp_path)
    ropes = [n for n in g.nodes if n.op_type == "RotaryEmbedding"]
    assert count == 1 and len(ropes) == 1 and ropes[0].attrs["interleaved"] and ropes[0].attrs["num_heads"] == N
    assert_parity(model, every_two_feeds(model), threads=2, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs, why", [
    (dict(constant_tables=True, pairs_equal=False), "a constant table whose pairs differ"),
    (dict(swapped=True), "stack(-x[..., ::2], x[..., 1::2]) is not a rotation by these tables"),
])
def test_what_is_not_provably_interleaved_rotary_is_left_alone(kwargs, why, tmp_path):
    model = every_two_graph(**kwargs)
    count, _ = fused(model, tmp_path)
    assert count == 0, why
    assert_parity(model, every_two_feeds(model), rtol=1e-5, atol=1e-6)
