"""CLIP text towers (transformers `CLIPTextModel` / `CLIPTextModelWithProjection`: the text encoders of Stable
Diffusion, SDXL and FLUX) built from a checkpoint's tensors, already fused, in the converter's IR.

Input: input_ids [batch, sequence] int64 (at most max_position_embeddings). Outputs: last_hidden_state [batch,
sequence, hidden], pooler_output [batch, hidden] (the final-norm state at each row's first end-of-text token, or at
its largest id for configs with the legacy eos_token_id 2, as transformers pools), penultimate_hidden_state (the
last layer's input, which SD 2.x and SDXL condition on) and, with a projection, text_embeds [batch, projection_dim].
Pre-LayerNorm blocks with causal attention and a quick-GELU (or GELU) MLP."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, I64, GraphBuilder

_ACT = {"quick_gelu": "quick_gelu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


def clip_layer_norm(b: GraphBuilder, x: str, prefix: str, size: int, eps: float, hint: str) -> str:
    return b.node("LayerNormalization", [x, b.const(f"{hint}_w", b.weight(prefix + ".weight", (size,))),
                                         b.const(f"{hint}_b", b.weight(prefix + ".bias", (size,)))],
                  {"axis": -1, "epsilon": eps}, hint=hint)


def clip_encoder(b: GraphBuilder, x: str, prefix: str, cfg: Mapping, act: str, causal: bool) -> tuple[str, str]:
    """CLIP's pre-LayerNorm blocks (text: causal; vision: bidirectional) under `prefix` + "encoder.layers.i.";
    returns (the last block's output, its input: the penultimate hidden state)."""
    H, heads, inner = int(cfg["hidden_size"]), int(cfg["num_attention_heads"]), int(cfg["intermediate_size"])
    eps = float(cfg.get("layer_norm_eps", 1e-5))
    penultimate = x
    for i in range(int(cfg["num_hidden_layers"])):
        lp = f"{prefix}encoder.layers.{i}."
        penultimate = x
        h = clip_layer_norm(b, x, lp + "layer_norm1", H, eps, f"ln1_{i}")
        q, k, v = (b.linear(h, f"{lp}self_attn.{n}_proj", f"{n}{i}", H, H) for n in "qkv")
        a = b.mha([q, k, v], heads, f"attn{i}", causal=causal)
        x = b.linear(a, lp + "self_attn.out_proj", f"o{i}", H, H, residual=x)
        h = clip_layer_norm(b, x, lp + "layer_norm2", H, eps, f"ln2_{i}")
        x = b.linear(b.linear(h, lp + "mlp.fc1", f"fc1_{i}", H, inner, activation=act), lp + "mlp.fc2", f"fc2_{i}",
                     inner, H, residual=x)
    return x, penultimate


def build_clip_text_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                          group_size: int = 32, **_) -> Graph:
    cfg = dict(config.get("text_config") or config)
    H, L = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    heads = int(cfg["num_attention_heads"])
    vocab, positions = int(cfg["vocab_size"]), int(cfg.get("max_position_embeddings", 77))
    eps, eos = float(cfg.get("layer_norm_eps", 1e-5)), int(cfg.get("eos_token_id", 2))
    act = _ACT.get(cfg.get("hidden_act", "quick_gelu"))
    if act is None:
        raise NotImplementedError(f"CLIP hidden_act {cfg.get('hidden_act')!r} is not supported")
    if H % heads:
        raise ConverterError(f"hidden_size {H} is not a multiple of num_attention_heads {heads}")
    b = GraphBuilder("clip_text", weights, weight_format, group_size)
    p = "text_model." if "text_model.embeddings.token_embedding.weight" in b.w else ""
    ids = b.input("input_ids", [-1, -1], I64)

    def i64(hint, v):
        return b.const(hint, np.array(v, np.int64))

    table = b.stored("token_embedding", b.source(p + "embeddings.token_embedding.weight", (vocab, H)), reduce_axis=1)
    x = b.node("Gather", [table, ids], {"axis": 0}, hint="tokens")
    length = b.node("Gather", [b.node("Shape", [ids], hint="ids_shape", dtype=I64), i64("one", 1)], {"axis": 0},
                    hint="length", dtype=I64)
    pos = b.node("Range", [i64("zero", 0), length, i64("step", 1)], hint="positions", dtype=I64)
    pos_table = b.const("position_embedding", b.weight(p + "embeddings.position_embedding.weight", (positions, H)))
    x = b.node("Add", [x, b.node("Gather", [pos_table, pos], {"axis": 0}, hint="pos")], hint="embeddings")
    x, penultimate = clip_encoder(b, x, p, cfg, act, causal=True)
    last = clip_layer_norm(b, x, p + "final_layer_norm", H, eps, "final_ln")
    # pooling: the row's first end-of-text token (transformers; eos_token_id 2 marks old configs: the largest id)
    key = ids if eos == 2 else b.node("Cast", [b.node("Equal", [ids, i64("eos", eos)], hint="is_eos",
                                                      dtype=np.dtype(np.bool_))], {"to": I64}, hint="eos_i", dtype=I64)
    where = b.node("ArgMax", [key], {"axis": -1, "keepdims": True, "select_last_index": False}, hint="pool_at",
                   dtype=I64)                                                     # [B, 1]
    one_hot = b.node("Cast", [b.node("Equal", [b.node("Unsqueeze", [pos, i64("pos_axis", [0])], hint="pos_row",
                                                      dtype=I64), where], hint="at", dtype=np.dtype(np.bool_))],
                     {"to": F32}, hint="one_hot")                                 # [B, S]
    pooled = b.node("MatMul", [b.node("Unsqueeze", [one_hot, i64("oh_axis", [1])], hint="one_hot_row"), last],
                    hint="pooled_3d")                                             # [B, 1, H]
    pooled = b.node("Reshape", [pooled, i64("pooled_shape", [0, H])], hint="pooled")
    outputs = [b.rename(last, "last_hidden_state"), b.rename(pooled, "pooler_output")]
    if L > 0:
        outputs.append(b.rename(penultimate, "penultimate_hidden_state"))
    if "text_projection.weight" in b.w:
        proj_dim = b.w_shape("text_projection.weight")[0]
        outputs.append(b.rename(b.linear("pooler_output", "text_projection", "text_proj", H, proj_dim), "text_embeds"))
    b.g.outputs.extend(outputs)
    b.g.metadata.update({"producer": "model_zoo.encoders.clip_text_graph", "architecture": "CLIPTextModel",
                         "weight_format": weight_format})
    return b.g
