"""DeBERTa-v2 / v3 encoders (transformers DebertaV2Model) built from a checkpoint's tensors, one sequence at a time:
word embeddings (and their projection when embedding_size differs) and LayerNorm, then post-LayerNorm blocks whose
attention adds DeBERTa's disentangled terms to the content scores: content-to-position (each query against the
relative-position keys of its distance to every key) and position-to-content (each key against the relative-position
queries of the reverse distance), over log-bucketed relative positions. Those terms enter the fused Attention as its
additive mask, all three scaled by 1 / sqrt(3 * head_dim) as transformers scales them.

The relative-position projections depend on the weights only, so they are computed here once per layer (LayerNorm
of rel_embeddings, then the layer's key / query projection, as share_att_key has it) and stored as constants
[heads, head_dim, 2 * span]; the step's bucket indices come in as inputs (`relative_position_indices`), so the graph
serves every length."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError

from ..graph_builder import I64, GraphBuilder


def log_bucket_positions(length: int, bucket_size: int, max_position: int) -> np.ndarray:
    """transformers' build_relative_position for a sequence of `length`: rel[i, j] = i - j, log-bucketed beyond
    bucket_size / 2 when both sizes are positive. int64 [length, length]."""
    rel = np.arange(length, dtype=np.int64)[:, None] - np.arange(length, dtype=np.int64)[None, :]
    if bucket_size <= 0 or max_position <= 0:
        return rel
    mid = bucket_size // 2
    sign = np.sign(rel)
    abs_pos = np.where((rel < mid) & (rel > -mid), mid - 1, np.abs(rel)).astype(np.float64)
    # (float32 as torch computes it: the ceil of a value that lands on an integer must round the same way)
    log_pos = np.ceil((np.log((abs_pos / mid).astype(np.float32)) /
                       np.log(np.float32((max_position - 1) / mid)) * np.float32(mid - 1)).astype(np.float32)) + mid
    return np.where(abs_pos <= mid, rel, log_pos * sign).astype(np.int64)


def relative_position_indices(length: int, config: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """The graph's c2p_index and p2c_index inputs for a sequence of `length` (int64 [length, length])."""
    span, buckets, max_rel = attention_span(config)
    rel = log_bucket_positions(length, buckets, max_rel)
    return np.clip(rel + span, 0, 2 * span - 1), np.clip(-rel + span, 0, 2 * span - 1)


def attention_span(config: Mapping) -> tuple[int, int, int]:
    """(span, position_buckets, max_relative_positions) as DisentangledSelfAttention derives them."""
    max_rel = int(config.get("max_relative_positions", -1) or -1)
    if max_rel < 1:
        max_rel = int(config.get("max_position_embeddings", 512))
    buckets = int(config.get("position_buckets", -1) or -1)
    return (buckets if buckets > 0 else max_rel), buckets, max_rel


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return ((x - mu) / np.sqrt(var + eps) * w + b).astype(np.float32)


def deberta_encoder(b: GraphBuilder, config: Mapping, prefix: str, ids: str, c2p_index: str, p2c_index: str) -> str:
    """The encoder's last hidden state [1, S, H] for input_ids `ids` [1, S]; `prefix` is where DebertaV2Model's
    tensors sit in the checkpoint (e.g. "deberta." or GLiNER's "token_rep_layer.bert_layer.model.")."""
    get = config.get
    H, layers, heads = int(config["hidden_size"]), int(config["num_hidden_layers"]), int(config["num_attention_heads"])
    inner, V = int(config["intermediate_size"]), int(config["vocab_size"])
    E = int(get("embedding_size") or H)
    eps = float(get("layer_norm_eps", 1e-7))
    d = H // heads
    act = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}.get(
        get("hidden_act", "gelu"))
    if act is None:
        raise NotImplementedError(f"DeBERTa hidden_act {get('hidden_act')!r} is not supported")
    if H % heads:
        raise ConverterError(f"hidden_size {H} is not a multiple of num_attention_heads {heads}")
    unsupported = []
    if get("position_biased_input", True):
        unsupported.append("position_biased_input (absolute position embeddings: DeBERTa-v2 base style)")
    if int(get("type_vocab_size", 0) or 0) > 0:
        unsupported.append("type_vocab_size > 0 (token types)")
    if int(get("conv_kernel_size", 0) or 0) > 0:
        unsupported.append("conv_kernel_size > 0 (the first layer's ConvLayer of DeBERTa-v2-xlarge)")
    if not get("relative_attention", False):
        unsupported.append("relative_attention = false")
    pos_types = list(get("pos_att_type") or [])
    if set(pos_types) - {"c2p", "p2c"}:
        unsupported.append(f"pos_att_type {pos_types} (c2p and p2c only)")
    if unsupported:
        raise NotImplementedError("DeBERTa encoder: " + "; ".join(unsupported) + " not supported yet")
    span, _, _ = attention_span(config)
    scale = 1.0 / float(np.sqrt(np.float32(d * (1 + len(pos_types)))))
    norm_rel = "layer_norm" in [s.strip() for s in str(get("norm_rel_ebd", "none")).lower().split("|")]
    share = bool(get("share_att_key", False))

    def layer_norm(x: str, p: str, hint: str, size: int = H) -> str:
        return b.node("LayerNormalization", [x, b.const(f"{hint}_w", b.weight(p + ".weight", (size,))),
                                             b.const(f"{hint}_b", b.weight(p + ".bias", (size,)))],
                      {"axis": -1, "epsilon": eps}, hint=hint)

    table = b.stored("word_embeddings", b.source(prefix + "embeddings.word_embeddings.weight", (V, E)), reduce_axis=1)
    x = b.node("Gather", [table, ids], {"axis": 0}, hint="word")
    if E != H:
        x = b.node("MatMul", [x, b.matmul_weight("embed_proj", b.source(prefix + "embeddings.embed_proj.weight",
                                                                          (H, E)).T)], hint="embed_proj")
    x = layer_norm(x, prefix + "embeddings.LayerNorm", "embeddings_ln")

    rel = b.weight(prefix + "encoder.rel_embeddings.weight")[:2 * span]
    if rel.shape != (2 * span, H):
        raise ConverterError(f"encoder.rel_embeddings.weight has shape {list(rel.shape)}, the config implies at "
                             f"least [{2 * span}, {H}]")
    if norm_rel:
        rel = _layer_norm(rel, b.weight(prefix + "encoder.LayerNorm.weight", (H,)),
                          b.weight(prefix + "encoder.LayerNorm.bias", (H,)), eps)
    # [heads, S, S] index tensors for GatherElements along the last axis
    expand = b.const("heads_shape", np.array([heads, 1, 1], np.int64))
    c2p_idx = b.node("Expand", [c2p_index, expand], hint="c2p_idx", dtype=I64)
    p2c_idx = b.node("Expand", [p2c_index, expand], hint="p2c_idx", dtype=I64)
    heads_first = b.const("to_heads", np.array([-1, heads, d], np.int64))

    def per_head(t: str, hint: str) -> str:   # [1, S, H] -> [heads, S, d]
        return b.node("Transpose", [b.node("Reshape", [t, heads_first], hint=f"{hint}_h")], {"perm": [1, 0, 2]},
                      hint=f"{hint}_t")

    def position_projection(p: str, hint: str) -> str:   # [heads, d, 2 span]: rel @ W^T + b, per head
        w, bias = b.weight(p + ".weight", (H, H)), b.weight(p + ".bias", (H,))
        proj = (rel.astype(np.float64) @ w.T.astype(np.float64) + bias).astype(np.float32)
        return b.const(hint, np.ascontiguousarray(proj.reshape(2 * span, heads, d).transpose(1, 2, 0)))

    for i in range(layers):
        lp = f"{prefix}encoder.layer.{i}."
        sp = lp + "attention.self."
        q = b.linear(x, sp + "query_proj", f"q{i}", H, H)
        k = b.linear(x, sp + "key_proj", f"k{i}", H, H)
        v = b.linear(x, sp + "value_proj", f"v{i}", H, H)
        terms = []
        if "c2p" in pos_types:
            pos_k = position_projection(sp + ("key_proj" if share else "pos_key_proj"), f"pos_key{i}")
            c2p = b.node("MatMul", [per_head(q, f"q{i}"), pos_k], hint=f"c2p_all{i}")   # [heads, S, 2 span]
            terms.append(b.node("GatherElements", [c2p, c2p_idx], {"axis": 2}, hint=f"c2p{i}"))
        if "p2c" in pos_types:
            pos_q = position_projection(sp + ("query_proj" if share else "pos_query_proj"), f"pos_query{i}")
            p2c = b.node("MatMul", [per_head(k, f"k{i}"), pos_q], hint=f"p2c_all{i}")
            p2c = b.node("GatherElements", [p2c, p2c_idx], {"axis": 2}, hint=f"p2c_keys{i}")
            terms.append(b.node("Transpose", [p2c], {"perm": [0, 2, 1]}, hint=f"p2c{i}"))
        bias = terms[0] if len(terms) == 1 else b.node("Add", terms, hint=f"rel{i}")
        bias = b.node("Mul", [bias, b.const(f"rel_scale{i}", np.array(scale, np.float32))], hint=f"rel_scaled{i}")
        bias = b.node("Unsqueeze", [bias, b.const(f"batch_axis{i}", np.array([0], np.int64))], hint=f"rel_bias{i}")
        attn = b.node("Attention", [q, k, v, bias], {"q_num_heads": heads, "kv_num_heads": heads, "scale": scale,
                                                     "q_layout": "BSND", "k_layout": "BSND", "v_layout": "BSND",
                                                     "out_layout": "BSND", "is_causal": False}, hint=f"attn{i}")
        x = b.linear(attn, lp + "attention.output.dense", f"o{i}", H, H, residual=x)
        x = layer_norm(x, lp + "attention.output.LayerNorm", f"attn_ln{i}")
        h = b.linear(x, lp + "intermediate.dense", f"up{i}", H, inner, activation=act)
        x = b.linear(h, lp + "output.dense", f"down{i}", inner, H, residual=x)
        x = layer_norm(x, lp + "output.LayerNorm", f"out_ln{i}")
    return x
