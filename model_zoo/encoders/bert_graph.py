"""BERT encoders built from a checkpoint's tensors (transformers' naming, `BertModel` or `BertForMaskedLM` /
`BertForPreTraining` with the `bert.` prefix), in the converter's IR and already fused: word + position + token-type
embeddings and LayerNorm, post-LayerNorm blocks (q/k/v products, one bidirectional `Attention` with the padding mask,
the output product with its residual, a GELU MLP with its residual), and the outputs: `last_hidden_state`, and with
the MLM head (`head="masked_lm"`) `logits` (dense + GELU + LayerNorm, then the decoder tied to the word embeddings
plus its bias). Inputs: input_ids, attention_mask and token_type_ids, each [batch, sequence] int64."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import I64, GraphBuilder

HEADS = ("masked_lm", "hidden")


def build_bert_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                     group_size: int = 32, head: str | None = None, **_) -> Graph:
    """`head`: "masked_lm" (logits and last_hidden_state; the default when the checkpoint has the MLM head) or
    "hidden" (last_hidden_state only)."""
    H, L = int(config["hidden_size"]), int(config["num_hidden_layers"])
    heads, inner, V = int(config["num_attention_heads"]), int(config["intermediate_size"]), int(config["vocab_size"])
    positions, types = int(config.get("max_position_embeddings", 512)), int(config.get("type_vocab_size", 2))
    eps = float(config.get("layer_norm_eps", 1e-12))
    act = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}.get(
        config.get("hidden_act", "gelu"))
    if act is None:
        raise NotImplementedError(f"BERT hidden_act {config.get('hidden_act')!r} is not supported")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise NotImplementedError(f"position_embedding_type {config['position_embedding_type']!r} (absolute only)")
    if H % heads:
        raise ConverterError(f"hidden_size {H} is not a multiple of num_attention_heads {heads}")
    p = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
    has_mlm = "cls.predictions.transform.dense.weight" in weights
    head = head or ("masked_lm" if has_mlm else "hidden")
    if head == "logits":
        head = "masked_lm"
    if head not in HEADS:
        raise ValueError(f"head must be one of {', '.join(HEADS)}, not {head!r}")
    if head == "masked_lm" and not has_mlm:
        raise ConverterError("head masked_lm: the checkpoint has no cls.predictions (MLM head) tensors")

    b = GraphBuilder("bert", weights, weight_format, group_size)
    ids = b.input("input_ids", [-1, -1], I64)
    mask = b.input("attention_mask", [-1, -1], I64)
    token_types = b.input("token_type_ids", [-1, -1], I64)

    def layer_norm(x: str, prefix: str, hint: str) -> str:
        return b.node("LayerNormalization", [x, b.const(f"{hint}_w", b.weight(prefix + ".weight", (H,))),
                                             b.const(f"{hint}_b", b.weight(prefix + ".bias", (H,)))],
                      {"axis": -1, "epsilon": eps}, hint=hint)

    word = b.stored("word_embeddings", b.source(p + "embeddings.word_embeddings.weight", (V, H)), reduce_axis=1)
    x = b.node("Gather", [word, ids], {"axis": 0}, hint="word")
    # positions 0..S-1 of this input's length
    length = b.node("Gather", [b.node("Shape", [ids], {"start": 0}, hint="ids_shape", dtype=I64),
                               b.const("one", np.array(1, np.int64))], {"axis": 0}, hint="length", dtype=I64)
    pos_ids = b.node("Range", [b.const("zero", np.array(0, np.int64)), length, b.const("step", np.array(1, np.int64))],
                     hint="position_ids", dtype=I64)
    pos_table = b.const("position_embeddings", b.weight(p + "embeddings.position_embeddings.weight", (positions, H)))
    x = b.node("Add", [x, b.node("Gather", [pos_table, pos_ids], {"axis": 0}, hint="positions")], hint="word_pos")
    type_table = b.const("token_type_embeddings", b.weight(p + "embeddings.token_type_embeddings.weight", (types, H)))
    x = b.node("Add", [x, b.node("Gather", [type_table, token_types], {"axis": 0}, hint="types")], hint="embeddings")
    x = layer_norm(x, p + "embeddings.LayerNorm", "embeddings_ln")
    # the padding mask: True where a key may be attended, [B, 1, 1, S]
    keep = b.node("Cast", [mask], {"to": np.dtype(np.bool_)}, hint="keep", dtype=np.dtype(np.bool_))
    keep = b.node("Unsqueeze", [keep, b.const("mask_axes", np.array([1, 2], np.int64))], hint="keep_4d",
                  dtype=np.dtype(np.bool_))
    for i in range(L):
        lp = f"{p}encoder.layer.{i}."
        q = b.linear(x, lp + "attention.self.query", f"q{i}", H, H)
        k = b.linear(x, lp + "attention.self.key", f"k{i}", H, H)
        v = b.linear(x, lp + "attention.self.value", f"v{i}", H, H)
        attn = b.node("Attention", [q, k, v, keep], {"q_num_heads": heads, "kv_num_heads": heads, "scale": 0.0,
                                                     "q_layout": "BSND", "k_layout": "BSND", "v_layout": "BSND",
                                                     "out_layout": "BSND",
                                                     "is_causal": False, "zero_masked_rows": True}, hint=f"attn{i}")
        x = b.linear(attn, lp + "attention.output.dense", f"o{i}", H, H, residual=x)
        x = layer_norm(x, lp + "attention.output.LayerNorm", f"attn_ln{i}")
        h = b.linear(x, lp + "intermediate.dense", f"up{i}", H, inner, activation=act)
        x = b.linear(h, lp + "output.dense", f"down{i}", inner, H, residual=x)
        x = layer_norm(x, lp + "output.LayerNorm", f"out_ln{i}")
    g = b.g
    x = b.rename(x, "last_hidden_state")
    g.outputs.append(x)
    outputs = {"last_hidden_state": x}
    if head == "masked_lm":
        t = b.linear(x, "cls.predictions.transform.dense", "mlm_dense", H, H, activation=act)
        t = layer_norm(t, "cls.predictions.transform.LayerNorm", "mlm_ln")
        decoder = "cls.predictions.decoder.weight"
        table = decoder if decoder in weights else p + "embeddings.word_embeddings.weight"
        bias = "cls.predictions.bias" if "cls.predictions.bias" in weights else "cls.predictions.decoder.bias"
        logits = b.node("MatMul", [t, b.matmul_weight("mlm_decoder", b.source(table, (V, H)).T),
                                   b.const("mlm_bias", b.weight(bias, (V,)))], hint="mlm_logits")
        logits = b.rename(logits, "logits")
        g.outputs.append(logits)
        outputs["logits"] = logits
    g.metadata.update({"producer": "model_zoo.encoders.bert_graph", "architecture": "BERT encoder", "head": head,
                       "weight_format": weight_format, "outputs": ",".join(outputs)})
    return g
