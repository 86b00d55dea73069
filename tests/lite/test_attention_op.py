"""The Attention operator (ONNX opset 23 form) against ONNX Runtime, and its fused kernel's edge cases against a
NumPy reference: layouts, grouped-query heads, masks, causal, several key/query tiles, fully masked rows."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from parity import assert_parity, convert, load

rng = np.random.default_rng(7)
F32 = np.finfo(np.float32)


def attention_model(feeds: dict[str, np.ndarray], **attrs) -> onnx.ModelProto:
    names = ["q", "k", "v"] + (["mask"] if "mask" in feeds else [])
    elem = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.bool_): TensorProto.BOOL}
    node = helper.make_node("Attention", names, ["y"], name="attention", **attrs)
    graph = helper.make_graph([node], "attention",
                              [helper.make_tensor_value_info(n, elem[feeds[n].dtype], list(feeds[n].shape)) for n in names],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    return model


def qkv(b, hq, hkv, s, l, d, dv=None, layout="4d"):
    dv = dv or d
    if layout == "4d":
        return {"q": rng.standard_normal((b, hq, s, d), np.float32), "k": rng.standard_normal((b, hkv, l, d), np.float32),
                "v": rng.standard_normal((b, hkv, l, dv), np.float32)}
    return {"q": rng.standard_normal((b, s, hq * d), np.float32), "k": rng.standard_normal((b, l, hkv * d), np.float32),
            "v": rng.standard_normal((b, l, hkv * dv), np.float32)}


def causal_float_mask(s, l, fill):
    return np.where(np.tril(np.ones((s, l), bool)), 0.0, fill).astype(np.float32)[None, None]


CASES = {
    "mha_4d": lambda: (qkv(2, 4, 4, 37, 37, 16), {}),
    "gqa_4d": lambda: (qkv(1, 8, 2, 20, 20, 32), {}),
    "gqa_3d": lambda: (qkv(2, 6, 3, 11, 11, 8, layout="3d"), {"q_num_heads": 6, "kv_num_heads": 3}),
    "cross_lengths_value_dim": lambda: (qkv(1, 2, 2, 5, 600, 24, dv=40), {}),
    "scale": lambda: (qkv(1, 2, 1, 9, 13, 16), {"scale": 0.05}),
    "causal_multi_tile": lambda: (qkv(1, 2, 1, 300, 300, 64), {"is_causal": 1}),
    "causal_query_shorter": lambda: (qkv(1, 2, 2, 5, 9, 8), {"is_causal": 1}),
    "float_mask": lambda: ({**qkv(2, 3, 3, 17, 290, 16), "mask": rng.standard_normal((2, 1, 17, 290), np.float32)}, {}),
    "bool_padding_mask": lambda: ({**qkv(2, 4, 4, 33, 33, 16),
                                   "mask": np.broadcast_to(np.arange(33)[None, None, None, :] <
                                                           np.array([33, 20])[:, None, None, None], (2, 1, 33, 33)).copy()},
                                  {}),
    "finfo_min_causal_mask_skips_tiles": lambda: ({**qkv(1, 2, 2, 700, 700, 32), "mask": causal_float_mask(700, 700, F32.min)},
                                                  {}),
    "inf_causal_mask_and_causal": lambda: ({**qkv(1, 1, 1, 520, 520, 16), "mask": causal_float_mask(520, 520, -np.inf)},
                                           {"is_causal": 1}),
    "long_head_dim": lambda: (qkv(1, 1, 1, 10, 40, 300), {}),
    # one query per sample (an encoder-decoder step's cross-attention): keys / values read in place, by key rows for
    # one or two query heads per key head, by transposed tiles for more; odd head sizes, several runs of 16 keys
    "decode_cross_3d": lambda: (qkv(2, 12, 12, 1, 1500, 64, layout="3d"), {"q_num_heads": 12, "kv_num_heads": 12}),
    "decode_gqa_pairs_3d": lambda: (qkv(1, 6, 3, 1, 301, 40, layout="3d"), {"q_num_heads": 6, "kv_num_heads": 3}),
    "decode_gqa_groups": lambda: (qkv(2, 8, 2, 1, 77, 32), {}),
    "decode_value_dim": lambda: (qkv(1, 3, 3, 1, 45, 24, dv=40), {}),
    "decode_long_head_dim": lambda: (qkv(1, 1, 1, 1, 40, 300), {}),
    "decode_single_key": lambda: (qkv(3, 2, 2, 1, 1, 8), {}),
    # a few queries per sample, non-causal, one query head per key head: the queries take the group's place
    "decode_few_queries_3d": lambda: (qkv(2, 12, 12, 4, 1500, 64, layout="3d"), {"q_num_heads": 12, "kv_num_heads": 12}),
    "decode_eight_queries": lambda: (qkv(1, 3, 3, 8, 100, 24, dv=40), {}),
    "few_queries_gqa_tiled": lambda: (qkv(1, 4, 2, 3, 70, 16), {}),
    "few_queries_causal_tiled": lambda: (qkv(1, 2, 2, 3, 70, 16), {"is_causal": 1}),
    # later key tiles whose scores rise past the running maxima by more than the lazy-rescaling margin (the tile is
    # redone against its new maxima), and by less (exponentiated against the maxima as they stand)
    "maxima_rise_past_the_margin": lambda: (rising_keys(qkv(1, 2, 2, 94, 900, 64), [1, 1, 12, 40]), {}),
    "maxima_rise_within_the_margin": lambda: (rising_keys(qkv(2, 3, 3, 100, 700, 32), [1, 1.3, 1.6]), {}),
}


def rising_keys(feeds, scales):
    """The keys of each 256-key tile scaled by the next of `scales`: scores grow tile by tile."""
    k = feeds["k"]
    for t, scale in enumerate(scales):
        k[:, :, 256 * t:256 * (t + 1)] *= np.float32(scale)
    return feeds


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_attention_matches_onnxruntime(case, threads):
    feeds, attrs = CASES[case]()
    assert_parity(attention_model(feeds, **attrs), feeds, threads=threads, rtol=1e-4, atol=2e-5)


def reference(q, k, v, mask=None, scale=None, causal=False):
    """BNSD NumPy attention in float64; rows with no attended key are NaN."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * (scale or 1 / np.sqrt(q.shape[-1]))
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + mask
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(-1, keepdims=True))
        return (p / p.sum(-1, keepdims=True)) @ v


def run_lite(feeds, tmp_path, threads=1, **attrs):
    path = convert(attention_model(feeds, **attrs), str(tmp_path))
    return load(path, threads).predict(feeds)[0].get_data_to_numpy()


def test_fully_masked_rows_give_zero(tmp_path):
    """ONNX Attention: a query that may attend no key outputs 0 (the spec's fully-masked-row guard, and ONNX
    Runtime), not softmax's NaN; a query whose keys are all in a later tile is unaffected."""
    feeds = qkv(1, 2, 2, 6, 300, 8)
    mask = np.ones((1, 1, 6, 300), bool)
    mask[0, 0, 2] = False                      # query 2 sees nothing
    mask[0, 0, 4, :256] = False                # query 4 sees only the second key tile
    feeds["mask"] = mask
    got = run_lite(feeds, tmp_path)
    want = reference(feeds["q"], feeds["k"], feeds["v"], mask)
    assert (got[:, :, 2] == 0).all()
    keep = np.ones(6, bool)
    keep[2] = False
    np.testing.assert_allclose(got[:, :, keep], want[:, :, keep], rtol=1e-4, atol=1e-5)


def test_uniform_rows_under_finfo_min_mask(tmp_path):
    """A row masked everywhere with finfo.min (not -inf) averages V, as the unfused graph's softmax does; the
    tile skipping must not drop its later tiles."""
    feeds = qkv(1, 1, 1, 12, 600, 16)
    mask = np.zeros((1, 1, 12, 600), np.float32)
    mask[..., 3, :] = F32.min
    feeds["mask"] = mask
    got = run_lite(feeds, tmp_path, threads=2)
    np.testing.assert_allclose(got[0, 0, 3], feeds["v"][0, 0].mean(0), rtol=1e-4, atol=1e-5)
    want = reference(feeds["q"], feeds["k"], feeds["v"], mask)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 1, 1, 300), (300,), (1, 4, 1, 1), (2, 4, 9, 300)])
def test_masks_broadcast_over_any_dims(shape, tmp_path):
    feeds = qkv(2, 4, 2, 9, 300, 16)
    feeds["mask"] = rng.standard_normal(shape).astype(np.float32) * 3
    got = run_lite(feeds, tmp_path, threads=2)
    want = reference(feeds["q"], feeds["k"], feeds["v"], feeds["mask"])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_empty_and_single_query(tmp_path):
    feeds = qkv(1, 2, 1, 1, 33, 8)
    np.testing.assert_allclose(run_lite(feeds, tmp_path), reference(feeds["q"], feeds["k"], feeds["v"]), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("feeds,attrs,message", [
    (lambda: qkv(1, 3, 2, 4, 4, 8), {}, "not a multiple of the key/value heads"),
    (lambda: {**qkv(1, 2, 2, 4, 4, 8), "k": rng.standard_normal((1, 2, 4, 6), np.float32)}, {}, "head size"),
    (lambda: {**qkv(1, 2, 2, 4, 4, 8), "mask": np.zeros((1, 1, 4, 5), np.float32)}, {}, "does not broadcast"),
])
def test_bad_operands_are_named(feeds, attrs, message, tmp_path):
    f = feeds()
    model = attention_model(f, **attrs)
    with pytest.raises(Exception, match=message):
        path = convert(model, str(tmp_path))
        load(path).predict(f)


def test_unsupported_attention_features_are_rejected(tmp_path):
    import converter
    feeds = qkv(1, 2, 2, 4, 4, 8)
    with pytest.raises(converter.ConverterError, match="softcap must be a finite value"):
        convert(attention_model(feeds, softcap=-1.0), str(tmp_path))
    with pytest.raises(converter.ConverterError, match="qk_matmul_output_mode 1 is not supported"):
        convert(attention_model(feeds, qk_matmul_output_mode=1), str(tmp_path))


def block_sparse_model(tmp_path, q_len, kv_len, heads, dim, block, zero_rows=False, mask_shape=None, name="bs"):
    """An Attention node with a block mask (format 1.15: block_size and input 9), built in the converter's IR."""
    from converter.ir import Graph, Node, Tensor
    from converter.writer import write_ms
    g = Graph(name="block_sparse")
    shapes = {"q": [1, q_len, heads * dim], "k": [1, kv_len, heads * dim], "v": [1, kv_len, heads * dim]}
    for n, s in shapes.items():
        g.tensors[n] = Tensor(n, np.dtype(np.float32), s)
        g.inputs.append(n)
    blocks = mask_shape or [1, heads, -(-q_len // block), -(-kv_len // block)]
    g.tensors["blocks"] = Tensor("blocks", np.dtype(np.bool_), blocks)
    g.inputs.append("blocks")
    g.tensors["y"] = Tensor("y", np.dtype(np.float32), None)
    g.nodes.append(Node("attention", "Attention", ["q", "k", "v", "", "", "", "", "", "", "blocks"], ["y"],
                        {"q_num_heads": heads, "kv_num_heads": heads, "q_layout": "BSND", "k_layout": "BSND",
                         "v_layout": "BSND", "out_layout": "BSND", "block_size": block,
                         "zero_masked_rows": zero_rows}))
    g.outputs.append("y")
    path = str(tmp_path / f"{name}.ms")
    write_ms(g, path)
    return path


@pytest.mark.parametrize("q_len,kv_len,threads", [(64, 64, 1), (40, 70, 2)])
def test_block_mask_attends_only_the_selected_blocks(tmp_path, q_len, kv_len, threads):
    """Input 9 (a bool [batch, heads, query blocks, key blocks] selection of 16 x 16 tiles) equals dense attention
    under the expanded mask: partial last blocks, a query block that selects nothing (NaN, or 0 with
    zero_masked_rows), per-head selections."""
    heads, dim, block = 2, 8, 16
    qb, kb = -(-q_len // block), -(-kv_len // block)
    blocks = np.random.default_rng(3).random((1, heads, qb, kb)) < 0.5
    blocks[0, 0, 0] = False                                  # head 0's first query block attends nothing
    blocks[0, 1, 0] = True
    feeds = {n: rng.standard_normal((1, L, heads * dim), np.float32) for n, L in (("q", q_len), ("k", kv_len),
                                                                                  ("v", kv_len))}
    feeds["blocks"] = blocks
    dense = blocks.repeat(block, 2).repeat(block, 3)[:, :, :q_len, :kv_len]
    split = lambda x: x.reshape(1, x.shape[1], heads, dim).transpose(0, 2, 1, 3)
    want = reference(split(feeds["q"]), split(feeds["k"]), split(feeds["v"]), dense).transpose(0, 2, 1, 3)
    want = want.reshape(1, q_len, heads * dim)
    for zero_rows in (False, True):
        got = load(block_sparse_model(tmp_path, q_len, kv_len, heads, dim, block, zero_rows, name=f"z{zero_rows}"),
                   threads).predict(feeds)[0].get_data_to_numpy()
        empty = np.zeros((1, q_len, heads * dim), bool)
        empty[0, :block, :dim] = True
        assert (np.isnan(got[empty]).all() if not zero_rows else (got[empty] == 0).all())
        np.testing.assert_allclose(got[~empty], want[~empty], rtol=1e-4, atol=1e-5)


def test_block_mask_of_the_wrong_shape_is_named(tmp_path):
    path = block_sparse_model(tmp_path, 32, 32, 2, 8, 16, mask_shape=[1, 2, 2, 3])
    feeds = {n: np.zeros((1, 32, 16), np.float32) for n in "qkv"}
    feeds["blocks"] = np.ones((1, 2, 2, 3), bool)
    with pytest.raises(Exception, match=r"block mask must be bool \[1, 2, 2, 2\]"):
        load(path, 1).predict(feeds)
