"""The engine's step graph for an OPT decoder (transformers OPTForCausalLM; BLIP-2's language model): learned
positions (the table offset by 2), LayerNorm with biases before (or, OPT-350m, after) attention and the MLP, biased
q / k / v / out projections, multi-head attention without rotation, a ReLU MLP, the final LayerNorm, the optional
project_in / project_out between word_embed_proj_dim and the hidden width, and the tied language-model head.

It has the same step inputs as model_zoo.language.decoder_graph's graph (tokens of many sequences, their positions, the
paged KV cache's block tables and one key and one value cache per layer) and the same output (each sequence's last
token's logits), so LLMEngine runs it as it runs the Llama-style ones."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from .decoder_graph import checked_step_options
from ..graph_builder import F32, I64, GraphBuilder

_ACTS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh"}


def _layer_norm(b: GraphBuilder, x: str, prefix: str, size: int, hint: str) -> str:
    return b.node("LayerNormalization", [x, b.const(f"{hint}_w", b.weight(prefix + ".weight", (size,))),
                                         b.const(f"{hint}_b", b.weight(prefix + ".bias", (size,)))],
                  {"axis": -1, "epsilon": 1e-5}, hint=hint)


def build_opt_decoder_graph(config: Mapping, weights: Mapping[str, np.ndarray], block_size: int,
                            kv_cache_dtype: str = "float32", weight_format: str = "float32", group_size: int = 32,
                            head: str = "logits", image_rows: bool = False, prefix: str = "model.decoder.",
                            lm_head: str = "lm_head.weight") -> Graph:
    """`weights` holds the decoder under `prefix` and the head at `lm_head` (else tied to the embedding table);
    `image_rows`: inputs embed_rows / embeds replace token embeddings (rows of word_embed_proj_dim, as
    Blip2ForConditionalGeneration's language_projection gives them)."""
    cache_dt = checked_step_options(kv_cache_dtype, weight_format, head)
    if head != "logits":
        raise NotImplementedError(f"head {head!r} for an OPT decoder (it has the language-model head only)")
    get = config.get
    H, L, heads = int(config["hidden_size"]), int(config["num_hidden_layers"]), int(config["num_attention_heads"])
    inner, vocab = int(config["ffn_dim"]), int(config["vocab_size"])
    word = int(get("word_embed_proj_dim") or H)
    positions_max = int(get("max_position_embeddings", 2048))
    act = _ACTS.get(get("activation_function", "relu"))
    if act is None:
        raise NotImplementedError(f"OPT activation_function {get('activation_function')!r}")
    if H % heads:
        raise ConverterError(f"hidden_size {H} is not a multiple of num_attention_heads {heads}")
    if not get("enable_bias", True) or not get("layer_norm_elementwise_affine", True):
        raise NotImplementedError("OPT without biases or LayerNorm weights (enable_bias / layer_norm_elementwise_affine"
                                  " false)")
    pre_norm = bool(get("do_layer_norm_before", True))
    D = H // heads
    b = GraphBuilder("decoder_step", weights, weight_format, group_size)
    ids, positions, tables, seq_lens, query_lens, last = (b.input(name, shape, I64) for name, shape in (
        ("input_ids", [-1]), ("positions", [-1]), ("block_tables", [-1, -1]), ("seq_lens", [-1]),
        ("query_lens", [-1]), ("last_token_index", [-1])))
    row = D + (4 if kv_cache_dtype == "int8" else 0)
    caches = [(b.input(f"key_cache.{i}", [-1, heads, block_size, row], cache_dt),
               b.input(f"value_cache.{i}", [-1, heads, block_size, row], cache_dt)) for i in range(L)]
    p = prefix
    embed_name = p + "embed_tokens.weight"
    table = b.stored("embed", b.source(embed_name, (vocab, word)), reduce_axis=1)
    x = b.node("Gather", [table, ids], {"axis": 0}, hint="embed")
    if image_rows:
        x = b.node("ScatterND", [x, b.input("embed_rows", [-1, 1], I64), b.input("embeds", [-1, word], F32)],
                   hint="embed_mm")
    if word != H:
        x = b.linear(x, p + "project_in", "project_in", word, H)
    # OPT's learned positions start at row 2 of the table (its padding offset)
    pos_table = b.const("position_table", b.weight(p + "embed_positions.weight", (positions_max + 2, H))[2:])
    x = b.node("Add", [x, b.node("Gather", [pos_table, positions], {"axis": 0}, hint="pos")], hint="embedded")
    for i in range(L):
        lp = f"{p}layers.{i}."
        h = _layer_norm(b, x, lp + "self_attn_layer_norm", H, f"ln1_{i}") if pre_norm else x
        q, k, v = (b.linear(h, f"{lp}self_attn.{n}_proj", f"{n}{i}", H, H) for n in "qkv")
        attn = b.node("Attention", [q, k, v, "", caches[i][0], caches[i][1], tables, seq_lens, query_lens],
                      {"paged": True, "q_num_heads": heads, "kv_num_heads": heads, "scale": 0.0, "is_causal": True,
                       "zero_masked_rows": True, "left_window_size": -1, "softcap": 0.0}, hint=f"attn{i}")
        if i == L - 1:   # past the last attention only the rows whose logits are read matter (decoder_graph's why)
            attn = b.node("Gather", [attn, last], {"axis": 0}, hint="last_attn")
            x = b.node("Gather", [x, last], {"axis": 0}, hint="last_rows")
        x = b.linear(attn, lp + "self_attn.out_proj", f"o{i}", H, H, residual=x)
        if not pre_norm:
            x = _layer_norm(b, x, lp + "self_attn_layer_norm", H, f"ln1_{i}")
        h = _layer_norm(b, x, lp + "final_layer_norm", H, f"ln2_{i}") if pre_norm else x
        x = b.linear(b.linear(h, lp + "fc1", f"fc1_{i}", H, inner, activation=act), lp + "fc2", f"fc2_{i}", inner, H,
                     residual=x)
        if not pre_norm:
            x = _layer_norm(b, x, lp + "final_layer_norm", H, f"ln2_{i}")
    if p + "final_layer_norm.weight" in weights:   # (absent when _remove_final_layer_norm)
        x = _layer_norm(b, x, p + "final_layer_norm", H, "norm")
    if word != H:
        x = b.linear(x, p + "project_out", "project_out", H, word)
    name = lm_head if lm_head in weights and not get("tie_word_embeddings", True) else embed_name
    if name == embed_name and weight_format == "float32":
        x = b.node("MatMul", [x, table], {"b_transposed": True}, hint="logits")
    else:
        w, attrs = b.linear_weight("lm_head", b.source(name, (vocab, word)))
        x = b.node("MatMul", [x, w], attrs, hint="logits")
    b.g.outputs.append(x)
    b.g.metadata.update({"producer": "model_zoo.language.opt_decoder_graph", "architecture": "OPT decoder step (paged)",
                         "kv_block_size": str(block_size), "num_layers": str(L), "weight_format": weight_format})
    return b.g
