"""T5 / UMT5 text encoders (transformers `T5EncoderModel` / `UMT5EncoderModel`: the text towers of Wan, FLUX and
others) built from a checkpoint's tensors, already fused, in the converter's IR.

Inputs: input_ids and attention_mask [batch, sequence] int64 (any length). Output: last_hidden_state [batch,
sequence, d_model]. Per layer: RMSNorm (T5's LayerNorm: no mean, no bias), unscaled attention whose additive mask is
the relative-position bias (UMT5: a bucket table per layer; T5: layer 0's, shared) plus the padding mask, and a
gated-GELU (or ReLU) MLP. The position buckets are computed in the graph from the sequence length (bidirectional
buckets: half for keys after the query, exact below num_buckets / 4, logarithmic up to max_distance)."""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, I64, GraphBuilder

_BOOL = np.dtype(np.bool_)


def _position_buckets(b: GraphBuilder, ids: str, num_buckets: int, max_distance: int) -> str:
    """bucket[q, k] of relative position k - q, [S, S] int64 (transformers' _relative_position_bucket, encoder)."""
    def c(hint, v, dtype=np.int64):
        return b.const(hint, np.array(v, dtype))
    length = b.node("Gather", [b.node("Shape", [ids], hint="ids_shape", dtype=I64), c("one_idx", 1)], {"axis": 0},
                    hint="seq_len", dtype=I64)
    pos = b.node("Range", [c("r0", 0), length, c("r1", 1)], hint="positions", dtype=I64)
    rel = b.node("Sub", [b.node("Unsqueeze", [pos, c("row_axis", [0])], hint="key_pos", dtype=I64),
                         b.node("Unsqueeze", [pos, c("col_axis", [1])], hint="query_pos", dtype=I64)],
                 hint="relative", dtype=I64)                                      # [S, S]: key - query
    half = num_buckets // 2
    after = b.node("Cast", [b.node("Greater", [rel, c("zero", 0)], hint="key_after", dtype=_BOOL)], {"to": I64},
                   hint="key_after_i", dtype=I64)
    base = b.node("Mul", [after, c("half", half)], hint="bucket_base", dtype=I64)
    dist = b.node("Abs", [rel], hint="distance", dtype=I64)
    max_exact = half // 2
    # the logarithmic buckets, from distances clamped to >= max_exact (the rest take the exact bucket below)
    far = b.node("Cast", [b.node("Max", [dist, c("max_exact", max_exact)], hint="far_dist", dtype=I64)],
                 {"to": F32}, hint="far_f")
    scale = (half - max_exact) / math.log(max_distance / max_exact)
    log = b.node("Mul", [b.node("Log", [b.node("Div", [far, c("exact_f", max_exact, np.float32)], hint="ratio")],
                                hint="log_ratio"), c("log_scale", scale, np.float32)], hint="log_bucket")
    large = b.node("Add", [b.node("Cast", [log], {"to": I64}, hint="log_i", dtype=I64), c("exact_i", max_exact)],
                   hint="large", dtype=I64)
    large = b.node("Min", [large, c("last_bucket", half - 1)], hint="large_clamped", dtype=I64)
    small = b.node("Less", [dist, c("exact_lim", max_exact)], hint="is_small", dtype=_BOOL)
    return b.node("Add", [base, b.node("Where", [small, dist, large], hint="offset", dtype=I64)], hint="buckets",
                  dtype=I64)


def build_t5_encoder_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                           group_size: int = 32, **_) -> Graph:
    d, heads, d_kv = int(config["d_model"]), int(config["num_heads"]), int(config["d_kv"])
    d_ff, layers, vocab = int(config["d_ff"]), int(config["num_layers"]), int(config["vocab_size"])
    eps = float(config.get("layer_norm_epsilon", 1e-6))
    buckets, max_distance = int(config.get("relative_attention_num_buckets", 32)), int(
        config.get("relative_attention_max_distance", 128))
    umt5 = config.get("model_type") == "umt5"
    proj = config.get("feed_forward_proj", "relu")
    gated, act = proj.startswith("gated-"), proj.split("-")[-1]
    act = {"gelu": "gelu_tanh", "gelu_new": "gelu_tanh", "relu": "relu"}.get(act)   # T5's "gelu" is gelu_new
    if act is None:
        raise NotImplementedError(f"feed_forward_proj {proj!r} is not supported (relu, gated-gelu, gated-relu)")
    if buckets // 4 < 1 or max_distance <= buckets // 4:
        raise ConverterError(f"relative attention buckets {buckets} / max distance {max_distance} are inconsistent")
    inner = heads * d_kv
    b = GraphBuilder("t5_encoder", weights, weight_format, group_size)
    ids = b.input("input_ids", [-1, -1], I64)
    mask = b.input("attention_mask", [-1, -1], I64)

    def rms(x: str, name: str, hint: str) -> str:
        return b.node("RMSNormalization", [x, b.const(hint, b.weight(name, (d,)))], {"axis": -1, "epsilon": eps},
                      hint=hint)

    table = "encoder.embed_tokens.weight" if "encoder.embed_tokens.weight" in b.w else "shared.weight"
    x = b.node("Gather", [b.stored("embed", b.source(table, (vocab, d)), reduce_axis=1), ids], {"axis": 0},
               hint="embed")
    bucket = _position_buckets(b, ids, buckets, max_distance)
    # padding: -inf-like where a key is padding, [B, 1, 1, S] (transformers adds finfo.min)
    pad = b.node("Mul", [b.node("Sub", [b.const("one_f", np.array(1.0, F32)),
                                        b.node("Cast", [mask], {"to": F32}, hint="mask_f")], hint="is_pad"),
                         b.const("neg", np.array(np.finfo(np.float32).min, F32))], hint="pad_add")
    pad = b.node("Unsqueeze", [pad, b.const("pad_axes", np.array([1, 2], np.int64))], hint="pad_4d")
    bias = None
    for i in range(layers):
        p = f"encoder.block.{i}.layer."
        if umt5 or i == 0:
            rel = b.const(f"rel_bias{i}", b.weight(p + "0.SelfAttention.relative_attention_bias.weight",
                                                   (buckets, heads)))
            per_head = b.node("Transpose", [b.node("Gather", [rel, bucket], {"axis": 0}, hint=f"rel{i}")],
                              {"perm": [2, 0, 1]}, hint=f"rel_heads{i}")          # [heads, S, S]
            bias = b.node("Add", [b.node("Unsqueeze", [per_head, b.const(f"b_axis{i}", np.array([0], np.int64))],
                                         hint=f"rel4d{i}"), pad], hint=f"attn_bias{i}")   # [B, heads, S, S]
        h = rms(x, p + "0.layer_norm.weight", f"ln1_{i}")
        q = b.linear(h, p + "0.SelfAttention.q", f"q{i}", d, inner)
        k = b.linear(h, p + "0.SelfAttention.k", f"k{i}", d, inner)
        v = b.linear(h, p + "0.SelfAttention.v", f"v{i}", d, inner)
        a = b.mha([q, k, v, bias], heads, f"attn{i}", scale=1.0)
        x = b.linear(a, p + "0.SelfAttention.o", f"o{i}", inner, d, residual=x)
        h = rms(x, p + "1.layer_norm.weight", f"ln2_{i}")
        ff = p + "1.DenseReluDense."
        if gated:
            up = b.linear(h, ff + "wi_1", f"up{i}", d, d_ff)
            h = b.linear(h, ff + "wi_0", f"gate{i}", d, d_ff, activation=act, multiplier=up)
        else:
            h = b.linear(h, ff + "wi", f"up{i}", d, d_ff, activation=act)
        x = b.linear(h, ff + "wo", f"down{i}", d_ff, d, residual=x)
    x = b.rename(rms(x, "encoder.final_layer_norm.weight", "final_ln"), "last_hidden_state")
    b.g.outputs.append(x)
    b.g.metadata.update({"producer": "model_zoo.encoders.t5_graph", "architecture": "UMT5EncoderModel" if umt5 else
                         "T5EncoderModel", "weight_format": weight_format})
    return b.g
