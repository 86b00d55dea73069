"""BLIP captioning (transformers BlipForConditionalGeneration) built from a checkpoint's tensors, already fused, in the
converter's IR, as two graphs:

- head "vision": the ViT (patch Conv with bias, class token, learned positions, pre-LayerNorm blocks with a fused qkv
  projection, GELU MLP, post_layernorm): input pixel_values [1, 3, S, S]; outputs image_embeds [1, 1 + patches, D]
  and, computed once per image, every text-decoder layer's cross-attention keys and values (cross_k.i, cross_v.i
  [1, 1 + patches, text hidden]).
- head "text": the BERT-style text decoder over a whole token prefix (word + learned position embeddings and
  LayerNorm; post-LayerNorm layers of causal self-attention, cross-attention to the image and a GELU FFN; the
  prediction head's dense + GELU + LayerNorm and the word-embedding decoder with its bias): inputs input_ids [1, T]
  and the cross keys / values; output logits [1, V] of the last token. Captions are short, so the caption loop
  (lite.blip) re-runs the prefix each step instead of keeping a self-attention cache; the image side never reruns."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.deferred import take_rows
from converter.ir import ConverterError, Graph

from ..encoders.clip_text_graph import _ACT
from ..graph_builder import F32, I64, GraphBuilder


def _cfg(config: Mapping, key: str) -> dict:
    return dict(config.get(key) or {})


def _layer_norm(b: GraphBuilder, x: str, prefix: str, size: int, eps: float, hint: str) -> str:
    return b.node("LayerNormalization", [x, b.const(f"{hint}_w", b.weight(prefix + ".weight", (size,))),
                                         b.const(f"{hint}_b", b.weight(prefix + ".bias", (size,)))],
                  {"axis": -1, "epsilon": eps}, hint=hint)


def text_prefix(weights: Mapping) -> str:
    """Where the checkpoint keeps its text transformer: a captioner's decoder (BlipForConditionalGeneration) or a
    retrieval model's encoder (BlipForImageTextRetrieval)."""
    for prefix in ("text_decoder.bert.", "text_encoder."):
        if prefix + "embeddings.word_embeddings.weight" in weights:
            return prefix
    raise ConverterError("not a BLIP checkpoint: no text_decoder.bert.* or text_encoder.*")


def _cross_kv(b: GraphBuilder, image: str, text_cfg: Mapping, vision_width: int, prefix: str) -> list[str]:
    """Every text layer's cross-attention key and value rows of the image embeddings."""
    H = int(text_cfg["hidden_size"])
    outs = []
    for i in range(int(text_cfg["num_hidden_layers"])):
        p = f"{prefix}encoder.layer.{i}.crossattention.self."
        for n in ("key", "value"):
            outs.append(b.rename(b.linear(image, p + n, f"cross_{n}{i}", vision_width, H),
                                 f"cross_{'k' if n == 'key' else 'v'}.{i}"))
    return outs


def vit_embeds(b: GraphBuilder, cfg: Mapping, default_eps: float) -> tuple[str, int]:
    """BLIP's and BLIP-2's ViT (the same layout under vision_model.*: patch Conv with bias, class token, learned
    positions, pre-LayerNorm blocks with a fused qkv projection, GELU MLP, post_layernorm) on a new input
    pixel_values [1, 3, S, S]; returns (the post-LayerNorm tokens [1, 1 + patches, D], D)."""
    D, L, heads = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
    inner, eps = int(cfg["intermediate_size"]), float(cfg.get("layer_norm_eps", default_eps))
    size, patch = int(cfg["image_size"]), int(cfg["patch_size"])
    act = _ACT.get(cfg.get("hidden_act", "gelu"))
    if act is None:
        raise NotImplementedError(f"BLIP vision hidden_act {cfg.get('hidden_act')!r}")
    if size % patch:
        raise ConverterError(f"image_size {size} is not a multiple of patch_size {patch}")
    if "vision_model.embeddings.class_embedding" not in b.w:
        raise ConverterError("not a BLIP / BLIP-2 checkpoint: no vision_model.embeddings.*")
    patches = (size // patch) ** 2
    pixels = b.input("pixel_values", [1, 3, size, size], F32)
    p = "vision_model."
    w = b.const("patch_w", b.weight(p + "embeddings.patch_embedding.weight", (D, 3, patch, patch)))
    bias = b.const("patch_b", b.weight(p + "embeddings.patch_embedding.bias", (D,)))
    x = b.node("Conv", [pixels, w, bias], {"kernel_shape": [patch, patch], "strides": [patch, patch], "pads": [0] * 4,
                                           "dilations": [1, 1], "group": 1}, hint="patches")
    x = b.node("Transpose", [b.node("Reshape", [x, b.const("flat", np.array([1, D, patches], np.int64))],
                                    hint="patch_flat")], {"perm": [0, 2, 1]}, hint="patch_rows")
    cls = b.const("class_token", b.weight(p + "embeddings.class_embedding", (1, 1, D)))
    x = b.node("Concat", [cls, x], {"axis": 1}, hint="tokens")
    x = b.node("Add", [x, b.const("positions", b.weight(p + "embeddings.position_embedding", (1, patches + 1, D)))],
               hint="embedded")
    for i in range(L):
        lp = f"{p}encoder.layers.{i}."
        h = _layer_norm(b, x, lp + "layer_norm1", D, eps, f"ln1_{i}")
        qkv_w = b.source(lp + "self_attn.qkv.weight", (3 * D, D))
        qkv_b = b.weight(lp + "self_attn.qkv.bias", (3 * D,)) if lp + "self_attn.qkv.bias" in b.w else None
        parts = []
        for j, n in enumerate("qkv"):   # the fused projection's thirds
            wj, attrs = b.linear_weight(f"{n}{i}_w", take_rows(qkv_w, np.arange(j * D, (j + 1) * D)))
            bj = "" if qkv_b is None else b.const(f"{n}{i}_b", qkv_b[j * D:(j + 1) * D])
            parts.append(b.node("MatMul", [h, wj, bj], attrs, hint=f"{n}{i}"))
        a = b.mha(parts, heads, f"attn{i}")
        x = b.linear(a, lp + "self_attn.projection", f"o{i}", D, D, residual=x)
        h = _layer_norm(b, x, lp + "layer_norm2", D, eps, f"ln2_{i}")
        x = b.linear(b.linear(h, lp + "mlp.fc1", f"fc1_{i}", D, inner, activation=act), lp + "mlp.fc2", f"fc2_{i}",
                     inner, D, residual=x)
    return _layer_norm(b, x, p + "post_layernorm", D, eps, "post_ln"), D


def build_blip_vision_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                            group_size: int = 32) -> Graph:
    cfg, text = _cfg(config, "vision_config"), _cfg(config, "text_config")
    size = int(cfg["image_size"])
    b = GraphBuilder("blip_vision", weights, weight_format, group_size)
    x, D = vit_embeds(b, cfg, 1e-5)
    x = b.rename(x, "image_embeds")
    b.g.outputs.append(x)
    b.g.outputs.extend(_cross_kv(b, x, text, D, text_prefix(weights)))
    if "vision_proj.weight" in weights:   # retrieval: the class token's projection (not normalised)
        cls_row = b.node("Gather", [x, b.const("cls_index", np.array(0, np.int64))], {"axis": 1}, hint="cls_row")
        dim = b.w_shape("vision_proj.weight")[0]
        b.g.outputs.append(b.rename(b.linear(cls_row, "vision_proj", "vision_proj", D, dim), "image_feat"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.blip_graphs", "architecture": "BlipVisionModel",
                         "head": "vision", "image_size": str(size), "weight_format": weight_format})
    return b.g


def build_blip_text_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                          group_size: int = 32, cross: bool = True) -> Graph:
    """A captioner's decoder (causal; the last token's logits) or a retrieval model's text encoder (bidirectional;
    with `cross` the image-text matching logits [no, yes] of the first token, without it the first token's text_proj
    features for the contrastive similarity)."""
    cfg = _cfg(config, "text_config")
    H, L, heads = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
    inner, eps = int(cfg["intermediate_size"]), float(cfg.get("layer_norm_eps", 1e-12))
    vocab, positions = int(cfg["vocab_size"]), int(cfg.get("max_position_embeddings", 512))
    act = _ACT.get(cfg.get("hidden_act", "gelu"))
    if act is None:
        raise NotImplementedError(f"BLIP text hidden_act {cfg.get('hidden_act')!r}")
    p = text_prefix(weights)
    captioner = p == "text_decoder.bert."
    cross = cross or captioner
    b = GraphBuilder("blip_text", weights, weight_format, group_size)
    ids = b.input("input_ids", [1, -1], I64)
    crosses = [(b.input(f"cross_k.{i}", [1, -1, H], F32), b.input(f"cross_v.{i}", [1, -1, H], F32))
               for i in range(L)] if cross else []

    def i64(hint, v):
        return b.const(hint, np.array(v, np.int64))

    table = b.stored("word_embeddings", b.source(p + "embeddings.word_embeddings.weight", (vocab, H)), reduce_axis=1)
    x = b.node("Gather", [table, ids], {"axis": 0}, hint="words")
    length = b.node("Gather", [b.node("Shape", [ids], hint="ids_shape", dtype=I64), i64("one", 1)], {"axis": 0},
                    hint="length", dtype=I64)
    pos = b.node("Range", [i64("zero", 0), length, i64("step", 1)], hint="positions", dtype=I64)
    pos_table = b.const("position_embeddings", b.weight(p + "embeddings.position_embeddings.weight", (positions, H)))
    x = b.node("Add", [x, b.node("Gather", [pos_table, pos], {"axis": 0}, hint="pos")], hint="embedded")
    x = _layer_norm(b, x, p + "embeddings.LayerNorm", H, eps, "emb_ln")
    for i in range(L):
        lp = f"{p}encoder.layer.{i}."
        q, k, v = (b.linear(x, f"{lp}attention.self.{n}", f"{n}{i}", H, H) for n in ("query", "key", "value"))
        a = b.mha([q, k, v], heads, f"self{i}", causal=captioner)
        x = _layer_norm(b, b.linear(a, lp + "attention.output.dense", f"so{i}", H, H, residual=x),
                        lp + "attention.output.LayerNorm", H, eps, f"ln_self{i}")
        if cross:
            q = b.linear(x, lp + "crossattention.self.query", f"cq{i}", H, H)
            a = b.mha([q, crosses[i][0], crosses[i][1]], heads, f"cross{i}")
            x = _layer_norm(b, b.linear(a, lp + "crossattention.output.dense", f"co{i}", H, H, residual=x),
                            lp + "crossattention.output.LayerNorm", H, eps, f"ln_cross{i}")
        h = b.linear(x, lp + "intermediate.dense", f"ffn_in{i}", H, inner, activation=act)
        x = _layer_norm(b, b.linear(h, lp + "output.dense", f"ffn_out{i}", inner, H, residual=x),
                        lp + "output.LayerNorm", H, eps, f"ln_ffn{i}")
    if not captioner:   # retrieval: the first ([CLS]) token's state
        first = b.node("Gather", [x, i64("first_index", 0)], {"axis": 1}, hint="cls_state")   # [1, H]
        if cross:
            out = b.linear(first, "itm_head", "itm", H, 2)
            name = "itm_logits"
        else:
            out = b.linear(first, "text_proj", "text_proj", H, b.w_shape("text_proj.weight")[0])
            name = "text_feat"
        b.g.outputs.append(b.rename(out, name))
        b.g.metadata.update({"producer": "model_zoo.multimodal.blip_graphs", "architecture": "BlipTextModel",
                             "head": "text" if cross else "text_features", "weight_format": weight_format})
        return b.g
    last = b.node("Gather", [x, b.node("Sub", [length, i64("one_back", 1)], hint="last_index", dtype=I64)],
                  {"axis": 1}, hint="last_state")                                  # [1, H]
    head = "text_decoder.cls.predictions."
    h = b.linear(last, head + "transform.dense", "head_dense", H, H, activation=act)
    h = _layer_norm(b, h, head + "transform.LayerNorm", H, eps, "head_ln")
    decoder = head + "decoder.weight" if head + "decoder.weight" in weights else p + "embeddings.word_embeddings.weight"
    w, attrs = b.linear_weight("decoder_w", b.source(decoder, (vocab, H)))
    bias_name = head + "bias" if head + "bias" in weights else head + "decoder.bias"
    logits = b.node("MatMul", [h, w, b.const("decoder_b", b.weight(bias_name, (vocab,)))], attrs, hint="lm_head")
    b.g.outputs.append(b.rename(logits, "logits"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.blip_graphs", "architecture": "BlipTextLMHeadModel",
                         "head": "text", "weight_format": weight_format})
    return b.g
