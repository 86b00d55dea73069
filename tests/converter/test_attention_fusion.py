"""Attention fusion: the exported attention of every transformer family becomes one Attention node per
attention layer (read in place: no head transposes, no repeat_kv copies), hand-written forms fuse with their
scales and masks folded in, and the pass stays away from what is not attention (or not provably so)."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
from converter.frontends.onnx_frontend import import_onnx
from converter.passes import run_pipeline
from model_zoo.hf_tiny import TINY_ARCHS, export_onnx
from parity import assert_parity

rng = np.random.default_rng(31)

# tiny architecture -> (attention layers, normalisation nodes allowed: embeddings/final norms + 2 per layer)
FAMILIES = {"bert": (2, 5), "vit": (2, 5), "gpt2": (2, 5), "qwen2": (2, 5), "llama": (2, 5), "clip_text": (2, 5),
            "whisper_encoder": (2, 5), "whisper_decoder": (4, 7), "t5_encoder": (2, 5)}


def dump(cache_dir, tmp_path, name):
    out = tmp_path / f"{name}.json"
    converter.Converter().convert("ONNX", export_onnx(name, cache_dir), str(tmp_path / name), dump_graph=str(out))
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_one_attention_node_per_attention_layer(name, cache_dir, tmp_path):
    layers, norms = FAMILIES[name]
    d = dump(cache_dir, tmp_path, name)
    after = d["op_counts_after"]
    assert after.get("Attention") == layers
    assert "Softmax" not in after
    assert after.get("LayerNormalization", 0) + after.get("RMSNormalization", 0) <= norms
    fired = {p["name"]: p["fired"] for p in d["passes"]} if isinstance(d["passes"], list) else d["passes"]
    assert str(layers) in json.dumps(fired.get("attention_fusion", fired))


def producers(d):
    return {o: n for n in d["graph"]["nodes"] for o in n["outputs"]}


@pytest.mark.parametrize("name", ["bert", "vit", "whisper_encoder"])
def test_encoders_read_one_merged_projection_in_place(name, cache_dir, tmp_path):
    """Q, K and V come from one merged GEMM, read in place; the output is written in the layout the output
    projection reads: no head transposes left around attention."""
    d = dump(cache_dir, tmp_path, name)
    prod = producers(d)
    for node in (n for n in d["graph"]["nodes"] if n["op"] == "Attention"):
        a = node["attrs"]
        assert node["inputs"][1:3] == ["", ""] and prod[node["inputs"][0]]["op"] == "MatMul"
        assert a["q_num_heads"] == a["kv_num_heads"] == 4 and a["out_layout"] == "BSND"
        if name == "bert":
            assert a["zero_masked_rows"] and abs(a["scale"] - 8 ** -0.5) < 1e-6 and len(node["inputs"]) == 4
    assert d["op_counts_after"].get("Transpose", 0) <= 1   # ViT/Whisper: the patch/conv layout transpose
    assert d["op_counts_after"]["MatMul"] == d["op_counts_before"]["MatMul"] - 2 * 2 * 2   # 2 layers: QK, PV, 2 of 3 projections


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_grouped_query_attention_reads_the_key_value_heads(name, cache_dir, tmp_path):
    d = dump(cache_dir, tmp_path, name)
    prod = producers(d)
    for node in (n for n in d["graph"]["nodes"] if n["op"] == "Attention"):
        k, v = node["inputs"][1:3]
        assert prod[k]["op"] != "Reshape" and "Expand" not in json.dumps([prod[k]["op"], prod[v]["op"]])
        assert node["attrs"]["out_layout"] == "BSND"
    assert "Expand" not in d["op_counts_after"] or d["op_counts_after"]["Expand"] < dump(
        cache_dir, tmp_path, name)["op_counts_before"].get("Expand", 0)


def test_fixed_input_shapes_still_fuse_grouped_query_attention(cache_dir, tmp_path):
    out = tmp_path / "q.json"
    converter.Converter().convert("ONNX", export_onnx("qwen2", cache_dir), str(tmp_path / "q"),
                                  input_shape="input_ids:1,9", dump_graph=str(out))
    d = json.loads(out.read_text())
    assert d["op_counts_after"]["Attention"] == 2 and "Expand" not in d["op_counts_after"]
    node = next(n for n in d["graph"]["nodes"] if n["op"] == "Attention")
    assert node["attrs"]["k_layout"] == "BNSD" and node["attrs"]["v_layout"] == "BSND"


# -- hand-written attention -----------------------------------------------------------------------------
B, H, S, L, D = 2, 3, 7, 9, 8


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def const(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def attention_graph(scale_where="q_and_k", mask=True, guard=False, softmax_axis=-1, mask_then_scale=False,
                    k_form="bnsd_transpose"):
    """softmax(Q K^T * scale + mask) V on BNSD inputs, written in one of the forms exporters use."""
    nodes, inits = [], [const("c", D ** -0.25), const("s", D ** -0.5), const("zero", 0.0)]
    q, kt = "q", "kt"
    if k_form == "bnsd_transpose":
        nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]))
        k_input = vi("k", [B, H, L, D])
    else:   # K already transposed: [B, H, D, L]
        kt, k_input = "k", vi("k", [B, H, D, L])
    if scale_where == "q_and_k":
        nodes += [helper.make_node("Mul", ["q", "c"], ["qs"]), helper.make_node("Mul", [kt, "c"], ["kts"])]
        q, kt = "qs", "kts"
    nodes.append(helper.make_node("MatMul", [q, kt], ["qk"]))
    scores = "qk"
    if scale_where == "scores_div":
        nodes.append(helper.make_node("Div", ["qk", "sqrt_d"], ["qk_scaled"]))
        inits.append(const("sqrt_d", D ** 0.5))
        scores = "qk_scaled"
    if mask and not mask_then_scale:
        nodes.append(helper.make_node("Add", [scores, "mask"], ["masked"]))
        scores = "masked"
    if mask_then_scale:
        nodes += [helper.make_node("Add", ["qk", "mask"], ["masked"]), helper.make_node("Mul", ["masked", "s"], ["ms"])]
        scores = "ms"
    nodes.append(helper.make_node("Softmax", [scores], ["p"], axis=softmax_axis))
    p = "p"
    if guard:
        nodes += [helper.make_node("IsNaN", ["p"], ["nan"]), helper.make_node("Where", ["nan", "zero", "p"], ["pg"])]
        p = "pg"
    nodes.append(helper.make_node("MatMul", [p, "v"], ["y"]))
    inputs = [vi("q", [B, H, S, D]), k_input, vi("v", [B, H, L, D])] + ([vi("mask", [B, 1, S, L])] if mask else [])
    model = helper.make_model(helper.make_graph(nodes, "attn", inputs, [vi("y", None)], inits),
                              opset_imports=[helper.make_opsetid("", 18)])
    feeds = {"q": rng.standard_normal((B, H, S, D), np.float32), "v": rng.standard_normal((B, H, L, D), np.float32),
             "k": rng.standard_normal((B, H, L, D) if k_form == "bnsd_transpose" else (B, H, D, L), np.float32)}
    if mask:
        feeds["mask"] = np.where(rng.random((B, 1, S, L)) < 0.3, -1e4, 0.0).astype(np.float32)
    return model, feeds


def op_counts(model, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    g = import_onnx(str(path), None)
    report = run_pipeline(g, "general")
    counts = {}
    for n in g.nodes:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts, report, g


@pytest.mark.parametrize("kwargs", [dict(), dict(scale_where="scores_div"), dict(scale_where="none", mask=False),
                                    dict(guard=True), dict(k_form="kt_input"), dict(softmax_axis=3)])
def test_hand_written_attention_fuses_and_matches(kwargs, tmp_path):
    model, feeds = attention_graph(**kwargs)
    counts, report, _ = op_counts(model, tmp_path)
    assert counts == {"Attention": 1} and report.fired["attention_fusion"] == 1
    assert_parity(model, feeds, workdir=str(tmp_path))


@pytest.mark.parametrize("kwargs,why", [
    (dict(mask_then_scale=True), "the scale applies to the mask too"),
    (dict(softmax_axis=2), "softmax over the queries"),
])
def test_not_attention_is_left_alone(kwargs, why, tmp_path):
    model, feeds = attention_graph(**kwargs)
    counts, report, _ = op_counts(model, tmp_path)
    assert "Attention" not in counts and counts.get("Softmax") == 1, why
    assert_parity(model, feeds, workdir=str(tmp_path))


def test_scores_read_elsewhere_are_not_fused(tmp_path):
    model, feeds = attention_graph(mask=False)
    model.graph.output.append(vi("p", None))   # the probabilities are a model output too
    counts, _, _ = op_counts(model, tmp_path)
    assert "Attention" not in counts


def flattened_transpose_model(back_order):
    """Reshape(x, [-1, s, d]) -> Transpose [0, 2, 1] -> Reshape(x's dims in back_order), shapes from Shape(x)."""
    nodes = [helper.make_node("Shape", ["x"], ["sh"]),
             helper.make_node("Slice", ["sh", "m2", "end"], ["sd"]),          # [s, d]
             helper.make_node("Slice", ["sh", "zero", "m2"], ["bh"]),         # [b, h]
             helper.make_node("Slice", ["sh", "m1", "end"], ["d"]),
             helper.make_node("Slice", ["sh", "m2", "m1"], ["s"]),
             helper.make_node("Concat", ["minus1", "sd"], ["flat"], axis=0),
             helper.make_node("Reshape", ["x", "flat"], ["x3"]),
             helper.make_node("Transpose", ["x3"], ["t3"], perm=[0, 2, 1])]
    back = {"swapped": ["bh", "d", "s"], "not_swapped": ["bh", "s", "d"]}[back_order]
    nodes += [helper.make_node("Concat", back, ["back"], axis=0), helper.make_node("Reshape", ["t3", "back"], ["y"])]
    inits = [const(n, [v], np.int64) for n, v in (("m2", -2), ("m1", -1), ("zero", 0), ("end", 2 ** 62), ("minus1", -1))]
    model = helper.make_model(helper.make_graph(nodes, "t", [vi("x", ["b", 3, "s", 5])], [vi("y", None)], inits),
                              opset_imports=[helper.make_opsetid("", 18)])
    return model, {"x": rng.standard_normal((2, 3, 4, 5), np.float32)}


@pytest.mark.parametrize("back_order,folds", [("swapped", True), ("not_swapped", False)])
def test_flattened_batched_transpose_becomes_one_transpose(back_order, folds, tmp_path):
    model, feeds = flattened_transpose_model(back_order)
    counts, _, g = op_counts(model, tmp_path)
    if folds:
        assert counts == {"Transpose": 1} and g.nodes[0].attrs["perm"] == [0, 1, 3, 2]
    else:
        assert counts.get("Reshape", 0) >= 1
    assert_parity(model, feeds, workdir=str(tmp_path))


def test_key_and_value_heads_stay_consistent(tmp_path):
    """Only K goes through repeat_kv (V already has every head): un-repeating K alone would leave K and V with
    different head counts, so the Attention reads the repeated K."""
    nodes = [helper.make_node("Unsqueeze", ["k", "two"], ["ku"]), helper.make_node("Expand", ["ku", "shape5"], ["ke"]),
             helper.make_node("Reshape", ["ke", "shape4"], ["kr"]),
             helper.make_node("Transpose", ["kr"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["qk"]), helper.make_node("Softmax", ["qk"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    inits = [const("two", [2], np.int64), const("shape5", [1, 1, 2, L, D], np.int64),
             const("shape4", [1, 2, L, D], np.int64)]
    model = helper.make_model(helper.make_graph(nodes, "g", [vi("q", [1, 2, S, D]), vi("k", [1, 1, L, D]),
                                                             vi("v", [1, 2, L, D])], [vi("y", None)], inits),
                              opset_imports=[helper.make_opsetid("", 18)])
    feeds = {"q": rng.standard_normal((1, 2, S, D), np.float32), "k": rng.standard_normal((1, 1, L, D), np.float32),
             "v": rng.standard_normal((1, 2, L, D), np.float32)}
    counts, _, _ = op_counts(model, tmp_path)
    assert counts.get("Attention") == 1
    assert_parity(model, feeds, workdir=str(tmp_path))
