"""The step graph of an encoder-decoder's text decoder (Whisper, FireRedASR-AED): B sequences decoded in lock step
(the same number of new tokens each: the decoder prompt, then one token a step), token embeddings (x a scale) plus
absolute positions from a table, pre-LayerNorm layers of causal self-attention on the paged KV cache (the engine's
Attention; the cache inputs are written in place), cross-attention to keys and values the encoder graph computed
once per input (inputs cross_k.i / cross_v.i [B, S, D]) and a two-layer MLP; the final LayerNorm and the output
projection give each sequence's last-token logits [B, vocab]. A `CrossDecoderLayout` names the checkpoint's
tensors."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from converter.ir import Graph

from ..graph_builder import F32, I64, GraphBuilder
from .decoder_graph import checked_step_options


@dataclass(frozen=True)
class CrossDecoderLayout:
    """Tensor names: `layer` is formatted with the layer index; the others are full names or prefixes."""
    embed: str                 # the token table [vocab, d]
    layer: str                 # prefix of layer i, e.g. "model.decoder.layers.{}."
    self_norm: str
    self_q: str
    self_k: str
    self_v: str
    self_out: str
    cross_norm: str
    cross_q: str
    cross_out: str
    mlp_norm: str
    mlp_in: str
    mlp_out: str
    final_norm: str
    head: str | None = None    # the output projection's weight; None: tied to the embedding


def _layer_norm(b: GraphBuilder, x: str, prefix: str, size: int, hint: str) -> str:
    return b.node("LayerNormalization", [x, b.const(f"{hint}_w", b.weight(prefix + ".weight", (size,))),
                                         b.const(f"{hint}_b", b.weight(prefix + ".bias", (size,)))],
                  {"axis": -1, "epsilon": 1e-5}, hint=hint)


def build_cross_decoder_step(name: str, layout: CrossDecoderLayout, weights: Mapping[str, np.ndarray], d: int,
                             heads: int, layers: int, ffn: int, vocab: int, positions: np.ndarray,
                             embed_scale: float = 1.0, activation: str = "gelu", block_size: int = 16,
                             kv_cache_dtype: str = "float32", weight_format: str = "float32",
                             group_size: int = 32) -> Graph:
    """`positions`: the absolute position table [max positions, d] (learned or sinusoidal)."""
    cache_dt = checked_step_options(kv_cache_dtype, weight_format, "logits")
    b = GraphBuilder(name, weights, weight_format, group_size)
    ids, pos, tables, seq_lens, query_lens, last = (b.input(n, shape, I64) for n, shape in (
        ("input_ids", [-1]), ("positions", [-1]), ("block_tables", [-1, -1]), ("seq_lens", [-1]),
        ("query_lens", [-1]), ("last_token_index", [-1])))
    row = d // heads + (4 if kv_cache_dtype == "int8" else 0)
    caches = [(b.input(f"key_cache.{i}", [-1, heads, block_size, row], cache_dt),
               b.input(f"value_cache.{i}", [-1, heads, block_size, row], cache_dt)) for i in range(layers)]
    crosses = [(b.input(f"cross_k.{i}", [-1, -1, d], F32), b.input(f"cross_v.{i}", [-1, -1, d], F32))
               for i in range(layers)]
    table = b.stored("embed", b.source(layout.embed, (vocab, d)), reduce_axis=1)
    x = b.node("Gather", [table, ids], {"axis": 0}, hint="embed")
    if embed_scale != 1.0:
        x = b.node("Mul", [x, b.const("embed_scale", np.array(embed_scale, np.float32))], hint="embed_scaled")
    pos_table = b.const("position_table", np.ascontiguousarray(positions, np.float32))
    x = b.node("Add", [x, b.node("Gather", [pos_table, pos], {"axis": 0}, hint="pos")], hint="embedded")
    # The step's rows [B x T, d] as [B, T, d] for cross-attention (every sequence has T new tokens: lock step)
    batch = b.node("Slice", [b.node("Shape", [crosses[0][0]], hint="cross_shape", dtype=I64),
                             b.const("first", np.array([0], np.int64)), b.const("one", np.array([1], np.int64))],
                   hint="batch", dtype=I64)
    batched = b.node("Concat", [batch, b.const("rest", np.array([-1, d], np.int64))], {"axis": 0}, hint="batched",
                     dtype=I64)
    flat = b.const("flat", np.array([-1, d], np.int64))
    for i in range(layers):
        lp = layout.layer.format(i)
        h = _layer_norm(b, x, lp + layout.self_norm, d, f"ln1_{i}")
        q, k, v = (b.linear(h, lp + n, f"{t}{i}", d, d) for t, n in (("q", layout.self_q), ("k", layout.self_k),
                                                                     ("v", layout.self_v)))
        attn = b.node("Attention", [q, k, v, "", caches[i][0], caches[i][1], tables, seq_lens, query_lens],
                      {"paged": True, "q_num_heads": heads, "kv_num_heads": heads, "scale": 0.0, "is_causal": True,
                       "zero_masked_rows": True, "left_window_size": -1, "softcap": 0.0}, hint=f"self{i}")
        x = b.linear(attn, lp + layout.self_out, f"so{i}", d, d, residual=x)
        h = _layer_norm(b, x, lp + layout.cross_norm, d, f"ln_cross{i}")
        q = b.node("Reshape", [b.linear(h, lp + layout.cross_q, f"cq{i}", d, d), batched], hint=f"cq{i}_3d")
        a = b.node("Reshape", [b.mha([q, crosses[i][0], crosses[i][1]], heads, f"cross{i}"), flat], hint=f"ca{i}")
        x = b.linear(a, lp + layout.cross_out, f"co{i}", d, d, residual=x)
        if i == layers - 1:   # only the rows whose logits are read: the last MLP and the head on those alone
            x = b.node("Gather", [x, last], {"axis": 0}, hint="last_rows")
        h = _layer_norm(b, x, lp + layout.mlp_norm, d, f"ln2_{i}")
        x = b.linear(b.linear(h, lp + layout.mlp_in, f"fc1_{i}", d, ffn, activation=activation), lp + layout.mlp_out,
                     f"fc2_{i}", ffn, d, residual=x)
    x = _layer_norm(b, x, layout.final_norm, d, "final_ln")
    head = layout.head if layout.head and layout.head in weights else layout.embed
    if head == layout.embed and weight_format == "float32":
        x = b.node("MatMul", [x, table], {"b_transposed": True}, hint="lm_head")
    else:
        w, attrs = b.linear_weight("lm_head", b.source(head, (vocab, d)))
        x = b.node("MatMul", [x, w], attrs, hint="lm_head")
    b.g.outputs.append(b.rename(x, "logits"))
    b.g.metadata.update({"head": "decoder", "kv_block_size": str(block_size), "num_layers": str(layers),
                         "weight_format": weight_format})
    return b.g
