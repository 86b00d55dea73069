"""com.microsoft operators that ONNX Runtime's transformer optimiser writes, against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity import assert_parity

rng = np.random.default_rng(5)


def f32(*shape):
    return rng.uniform(-2, 2, shape).astype(np.float32)


def contrib(op, feeds, consts, attrs=None, inputs=None, outputs=("y",), out_shapes=None, domain="com.microsoft"):
    inputs = inputs if inputs is not None else list(feeds) + list(consts)
    node = helper.make_node(op, inputs, list(outputs), name=f"{op}_node", domain=domain, **(attrs or {}))
    first = next(iter(feeds.values()))
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, (out_shapes or {}).get(o, list(first.shape)))
            for o in outputs if o]
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
                                           for k, v in feeds.items()], outs,
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets), feeds


def attention(mask=False, causal=False, sizes=None):
    b, s, d_in, n = 2, 6, 12, 4
    q_size, v_size = (sizes or [16, 16, 16])[0], (sizes or [16, 16, 16])[2]
    consts = {"w": f32(d_in, 2 * q_size + v_size) * 0.3, "bias": f32(2 * q_size + v_size)}
    attrs = {"num_heads": n, **({"unidirectional": 1} if causal else {}), **({"qkv_hidden_sizes": sizes} if sizes else {})}
    names = ["x", "w", "bias"] + (["mask"] if mask else [])
    model, feeds = contrib("Attention", {"x": f32(b, s, d_in)}, consts, attrs=attrs, inputs=names,
                           out_shapes={"y": [b, s, v_size]})
    if mask:
        m = np.ones((b, s), np.int32)
        m[0, 4:] = 0
        model.graph.initializer.append(numpy_helper.from_array(m, "mask"))
    return model, feeds


def mha(bias=False, mask=False, attn_bias=False, scale=None, causal=False):
    b, s, l, d, n = 2, 5, 7, 16, 4
    feeds = {"q": f32(b, s, d), "k": f32(b, l, d), "v": f32(b, l, d)}
    consts, names = {}, ["q", "k", "v", "", "", ""]
    if bias:
        consts["bias"] = f32(3 * d)
        names[3] = "bias"
    if mask:
        m = np.ones((b, l), np.int32)
        m[1, 4:] = 0
        consts["mask"] = m
        names[4] = "mask"
    if attn_bias:
        feeds["ab"] = f32(1, n, s, l)
        names[5] = "ab"
    while names and not names[-1]:
        names.pop()
    attrs = {"num_heads": n, **({"scale": scale} if scale else {}), **({"unidirectional": 1} if causal else {})}
    model, _ = contrib("MultiHeadAttention", feeds, {k: v for k, v in consts.items() if k != "mask"}, attrs=attrs,
                       inputs=names, out_shapes={"y": [b, s, d]})
    if mask:
        model.graph.initializer.append(numpy_helper.from_array(consts["mask"], "mask"))
    return model, feeds


def rope(layout4d=True, interleaved=False, rot=0, offset=False):
    b, n, s, h, max_pos = 2, 3, 5, 8, 16
    x = f32(b, n, s, h) if layout4d else f32(b, s, n * h)
    r = rot or h
    inv = 1.0 / (10000 ** (np.arange(0, r, 2) / r))
    ang = np.arange(max_pos)[:, None] * inv[None, :]
    consts = {"cos": np.cos(ang).astype(np.float32), "sin": np.sin(ang).astype(np.float32)}
    pos = np.array([3], np.int64) if offset else np.stack([np.arange(s), np.arange(2, 2 + s)]).astype(np.int64)
    attrs = {"interleaved": int(interleaved)}
    if not layout4d:
        attrs["num_heads"] = n
    if rot:
        attrs["rotary_embedding_dim"] = rot
        attrs.setdefault("num_heads", n)
    model, _ = contrib("RotaryEmbedding", {"x": x}, consts, attrs=attrs, inputs=["x", "pos", "cos", "sin"])
    model.graph.initializer.append(numpy_helper.from_array(pos, "pos"))
    return model, {"x": x}


CASES = {
    "rope_4d": lambda: rope(),
    "rope_3d_interleaved": lambda: rope(layout4d=False, interleaved=True),
    "rope_partial_rotary": lambda: rope(rot=4),
    "rope_position_offset": lambda: rope(offset=True),
    "mha_plain": lambda: mha(),
    "attention_packed": lambda: attention(),
    "attention_mask": lambda: attention(mask=True),
    "attention_causal": lambda: attention(causal=True),
    "attention_qkv_sizes": lambda: attention(sizes=[8, 8, 12]),
    "mha_bias_mask": lambda: mha(bias=True, mask=True),
    "mha_attention_bias_scale": lambda: mha(attn_bias=True, scale=0.2),
    "fastgelu": lambda: contrib("FastGelu", {"x": f32(2, 3, 8)}, {}),
    "fastgelu_bias": lambda: contrib("FastGelu", {"x": f32(2, 3, 8)}, {"b": f32(8)}),
    "biasgelu": lambda: contrib("BiasGelu", {"x": f32(2, 3, 8)}, {"b": f32(8)}),
    "quickgelu": lambda: contrib("QuickGelu", {"x": f32(2, 8)}, {}, attrs={"alpha": 1.5}),
    "fusedmatmul_transb_alpha": lambda: contrib("FusedMatMul", {"a": f32(2, 3, 4)}, {"b": f32(2, 5, 4)},
                                                attrs={"transB": 1, "alpha": 0.5}, out_shapes={"y": [2, 3, 5]}),
    "fusedmatmul_transa": lambda: contrib("FusedMatMul", {"a": f32(4, 3)}, {"b": f32(4, 5)}, attrs={"transA": 1},
                                          out_shapes={"y": [3, 5]}),
    "skiplayernorm": lambda: contrib("SkipLayerNormalization", {"x": f32(2, 3, 8), "s": f32(2, 3, 8)},
                                     {"g": f32(8), "b": f32(8)}, attrs={"epsilon": 1e-5}),
    "skiplayernorm_bias_sum_output": lambda: contrib(
        "SkipLayerNormalization", {"x": f32(2, 3, 8), "s": f32(2, 3, 8)}, {"g": f32(8), "b": f32(8), "bias": f32(8)},
        outputs=("y", "", "", "sum")),
    "simplified_layernorm": lambda: contrib("SimplifiedLayerNormalization", {"x": f32(2, 3, 8)}, {"g": f32(8)},
                                            attrs={"epsilon": 1e-6}, domain=""),
    "skip_simplified_layernorm": lambda: contrib("SkipSimplifiedLayerNormalization",
                                                 {"x": f32(2, 3, 8), "s": f32(2, 3, 8)}, {"g": f32(8)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_contrib_operator_matches_onnxruntime(case):
    model, feeds = CASES[case]()
    assert_parity(model, feeds)


def test_mha_unidirectional_is_rejected_clearly(tmp_path):
    import converter
    model, _ = mha(causal=True)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(converter.ConverterError, match="MultiHeadAttention.*unidirectional=1"):
        converter.Converter().convert("ONNX", str(path), str(tmp_path / "m"))


def add_rotary(consts, names, attrs, h, interleaved):
    """GroupQueryAttention's own rotary: cos/sin caches of 32 positions for head size h, and the attributes."""
    inv = 1.0 / (10000 ** (np.arange(0, h, 2) / h))
    ang = np.arange(32)[:, None] * inv[None, :]
    consts.update(cos=np.cos(ang).astype(np.float32), sin=np.sin(ang).astype(np.float32))
    names += ["cos", "sin"]
    attrs.update(do_rotary=1, rotary_interleaved=int(interleaved))


def gqa(do_rotary=False, padded=False, heads=4, kv_heads=2, interleaved=False):
    b, s, h = 2, 6, 16 if do_rotary else 8   # ONNX Runtime's rotary needs head_size % 16 == 0
    feeds = {"q": f32(b, s, heads * h), "k": f32(b, s, kv_heads * h), "v": f32(b, s, kv_heads * h)}
    lens = np.array([s - 1, (s - 3) if padded else s - 1], np.int32)   # seqlens_k = length - 1
    consts = {"seqlens_k": lens, "total": np.array(s, np.int32)}
    names = ["q", "k", "v", "", "", "seqlens_k", "total"]
    attrs = {"num_heads": heads, "kv_num_heads": kv_heads}
    if do_rotary:
        add_rotary(consts, names, attrs, h, interleaved)
    outputs = {"y": [b, s, heads * h], "pk": [b, kv_heads, s, h], "pv": [b, kv_heads, s, h]}
    return cached_model("GroupQueryAttention", names, feeds, consts, attrs, outputs), feeds


@pytest.mark.parametrize("kwargs", [{}, {"do_rotary": True}, {"do_rotary": True, "interleaved": True},
                                    {"heads": 2, "kv_heads": 2}])
def test_group_query_attention_prompt(kwargs, tmp_path):
    from parity import convert, load, run_ort
    model, feeds = gqa(**kwargs)
    got = [t.get_data_to_numpy() for t in load(convert(model, str(tmp_path))).predict(feeds)]
    want = run_ort(model, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_group_query_attention_right_padding(tmp_path):
    """Rows of a padded sample past its length are undefined; the valid rows must match."""
    from parity import convert, load, run_ort
    model, feeds = gqa(padded=True)
    got = load(convert(model, str(tmp_path))).predict(feeds)[0].get_data_to_numpy()
    want = run_ort(model, feeds)[0]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1, :4], want[1, :4], rtol=1e-4, atol=1e-5)


def gqa_with_past(s, past, total, lens, do_rotary=False, packed=False, heads=4, kv_heads=2):
    """A step continuing a KV cache: past (B, kv_heads, past, h), seqlens_k = lens - 1 (each sequence's length with
    this step's s tokens), total_sequence_length = total; present rows = max(past, total)."""
    b, h = len(lens), 16
    names = ["q", "k", "v", "past_k", "past_v", "seqlens_k", "total"]
    feeds = {"q": f32(b, s, heads * h), "k": f32(b, s, kv_heads * h), "v": f32(b, s, kv_heads * h),
             "past_k": f32(b, kv_heads, past, h), "past_v": f32(b, kv_heads, past, h)}
    if packed:
        feeds["q"] = np.concatenate([feeds.pop("q"), feeds.pop("k"), feeds.pop("v")], axis=-1)
        names[1:3] = ["", ""]
    consts = {"seqlens_k": np.array(lens, np.int32) - 1, "total": np.array(total, np.int32)}
    attrs = {"num_heads": heads, "kv_num_heads": kv_heads}
    if do_rotary:
        add_rotary(consts, names, attrs, h, False)
    rows = max(past, total)
    outputs = {"y": [b, s, heads * h], "pk": [b, kv_heads, rows, h], "pv": [b, kv_heads, rows, h]}
    return cached_model("GroupQueryAttention", names, feeds, consts, attrs, outputs), feeds


@pytest.mark.parametrize("case", [
    dict(s=1, past=5, total=6, lens=[6, 6]),                            # a decode step, present of its own
    dict(s=1, past=5, total=6, lens=[6, 6], do_rotary=True),
    dict(s=1, past=5, total=6, lens=[6, 6], packed=True, do_rotary=True),
    dict(s=3, past=4, total=7, lens=[7], do_rotary=True),               # a later prompt chunk (ORT: batch 1)
    dict(s=1, past=10, total=7, lens=[7, 4], do_rotary=True),           # one buffer for past and present, lengths differ
    dict(s=2, past=10, total=9, lens=[9]),
    dict(s=1, past=6, total=7, lens=[7, 7], heads=3, kv_heads=3),
])
def test_group_query_attention_with_a_kv_cache(case, tmp_path):
    """Every position a sequence has (its first lens[b] rows of present, its s output rows) equals ONNX Runtime's."""
    from parity import convert, load, run_ort
    model, feeds = gqa_with_past(**case)
    got = [t.get_data_to_numpy() for t in load(convert(model, str(tmp_path))).predict(feeds)]
    want = run_ort(model, feeds)
    assert got[1].shape == want[1].shape == (len(case["lens"]), case.get("kv_heads", 2), max(case["past"], case["total"]), 16)
    for b, n in enumerate(case["lens"]):
        np.testing.assert_allclose(got[0][b], want[0][b], rtol=1e-4, atol=1e-5)
        for g, w in zip(got[1:], want[1:]):
            np.testing.assert_allclose(g[b, :, :n], w[b, :, :n], rtol=1e-4, atol=1e-5)


def cached_model(op, inputs, feeds, consts, attrs, outputs):
    """One com.microsoft node with named outputs of known shapes (outputs: name -> shape): the attention operators
    with their present key/value outputs."""
    node = helper.make_node(op, inputs, list(outputs), name=f"{op}_node", domain="com.microsoft", **attrs)
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in feeds.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, shape) for k, shape in outputs.items()],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


@pytest.mark.parametrize("s,past,mask", [(1, 6, False), (3, 4, True), (2, 0, False)])
def test_multi_head_attention_with_a_kv_cache(s, past, mask, tmp_path):
    """past_key/past_value (B, N, P, H) before this step's keys and values; present_key/value are both."""
    from parity import convert, load, run_ort
    b, d, n = 2, 16, 4
    feeds = {"q": f32(b, s, d), "k": f32(b, s, d), "v": f32(b, s, d), "pk": f32(b, n, past, d // n),
             "pv": f32(b, n, past, d // n)}
    consts = {"bias": f32(3 * d)}
    names = ["q", "k", "v", "bias", "", "", "pk", "pv"]
    if mask:
        consts["mask"] = np.ones((b, past + s), np.int32)
        consts["mask"][1, 1] = 0
        names[4] = "mask"
    model = cached_model("MultiHeadAttention", names, feeds, consts, {"num_heads": n},
                         {"y": [b, s, d], "present_k": [b, n, past + s, d // n], "present_v": [b, n, past + s, d // n]})
    got = [t.get_data_to_numpy() for t in load(convert(model, str(tmp_path))).predict(feeds)]
    for g, w in zip(got, run_ort(model, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("s,past,causal", [(1, 5, True), (3, 4, True), (2, 3, False)])
def test_attention_with_a_kv_cache(s, past, causal, tmp_path):
    """com.microsoft Attention's past (2, B, N, P, H): keys then values; present the same with this step's rows;
    unidirectional: query i sees keys j <= P + i."""
    from parity import convert, load, run_ort
    b, d_in, d, n = 2, 12, 16, 4
    feeds = {"x": f32(b, s, d_in), "past": f32(2, b, n, past, d // n)}
    consts = {"w": f32(d_in, 3 * d) * 0.3, "bias": f32(3 * d)}
    model = cached_model("Attention", ["x", "w", "bias", "", "past"], feeds, consts,
                         {"num_heads": n, **({"unidirectional": 1} if causal else {})},
                         {"y": [b, s, d], "present": [2, b, n, past + s, d // n]})
    got = [t.get_data_to_numpy() for t in load(convert(model, str(tmp_path))).predict(feeds)]
    for g, w in zip(got, run_ort(model, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["rope_4d", "rope_3d_interleaved", "rope_position_offset"])
def test_contrib_rotary_imports_as_one_rotary_node(case, tmp_path):
    from converter.frontends.onnx_frontend import import_onnx
    model, _ = CASES[case]()
    onnx.save(model, tmp_path / "m.onnx")
    ops = [n.op_type for n in import_onnx(str(tmp_path / "m.onnx"), None).nodes]
    assert ops.count("RotaryEmbedding") == 1 and "Neg" not in ops and "Sub" not in ops and "Mul" not in ops
