"""BLIP-2 (transformers Blip2ForConditionalGeneration) built from a checkpoint's tensors in the converter's IR:

- head "vision": the image side in one graph, run once per image: the EVA ViT (BLIP's ViT layout, model_zoo.
  blip_graphs.vit_embeds), the Q-Former (num_query_tokens learned queries through LayerNorm, then BERT-style
  post-LayerNorm layers: self-attention over the queries, cross-attention to the image tokens every
  cross_attention_frequency-th layer, the query FFN) and language_projection: input pixel_values [1, 3, S, S], output
  image_embeds [queries, text width], the rows that replace the prompt's image tokens.
- the language model's step graph (model_zoo.language.opt_decoder_graph for OPT; the engine's paged KV cache), with the
  image rows at the image tokens' ordinary positions."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from .blip_graphs import _cfg, _layer_norm, vit_embeds
from ..encoders.clip_text_graph import _ACT
from ..graph_builder import GraphBuilder


def _qformer_attention(b: GraphBuilder, x: str, context: str | None, prefix: str, hidden: int, context_width: int,
                       heads: int, eps: float, hint: str) -> str:
    """BERT-style attention block: q from x, k / v from the context (x itself for self-attention), the output
    dense with the residual, then LayerNorm."""
    source = x if context is None else context
    q = b.linear(x, prefix + "attention.query", f"{hint}_q", hidden, hidden)
    k = b.linear(source, prefix + "attention.key", f"{hint}_k", context_width, hidden)
    v = b.linear(source, prefix + "attention.value", f"{hint}_v", context_width, hidden)
    a = b.mha([q, k, v], heads, hint)
    return _layer_norm(b, b.linear(a, prefix + "output.dense", f"{hint}_out", hidden, hidden, residual=x),
                       prefix + "output.LayerNorm", hidden, eps, f"{hint}_ln")


def build_blip2_vision_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                             group_size: int = 32) -> Graph:
    vision, qformer, text = _cfg(config, "vision_config"), _cfg(config, "qformer_config"), _cfg(config, "text_config")
    if "query_tokens" not in weights or "qformer.layernorm.weight" not in weights:
        raise ConverterError("not a Blip2ForConditionalGeneration checkpoint: no query_tokens / qformer.*")
    queries = int(config.get("num_query_tokens", 32))
    H, L = int(qformer.get("hidden_size", 768)), int(qformer.get("num_hidden_layers", 12))
    heads, inner = int(qformer.get("num_attention_heads", 12)), int(qformer.get("intermediate_size", 3072))
    eps, every = float(qformer.get("layer_norm_eps", 1e-12)), int(qformer.get("cross_attention_frequency", 2))
    act = _ACT.get(qformer.get("hidden_act", "gelu"))
    if act is None:
        raise NotImplementedError(f"Q-Former hidden_act {qformer.get('hidden_act')!r}")
    out_width = int(text.get("word_embed_proj_dim") or text.get("hidden_size"))
    b = GraphBuilder("blip2_vision", weights, weight_format, group_size)
    image, D = vit_embeds(b, vision, 1e-6)
    context_width = int(qformer.get("encoder_hidden_size", D))
    if context_width != D:
        raise ConverterError(f"Q-Former encoder_hidden_size {context_width} differs from the ViT's width {D}")
    x = b.const("query_tokens", b.weight("query_tokens", (1, queries, H)))
    x = _layer_norm(b, x, "qformer.layernorm", H, eps, "query_ln")
    for i in range(L):
        p = f"qformer.encoder.layer.{i}."
        x = _qformer_attention(b, x, None, p + "attention.", H, H, heads, eps, f"self{i}")
        if i % every == 0:
            x = _qformer_attention(b, x, image, p + "crossattention.", H, D, heads, eps, f"cross{i}")
        h = b.linear(x, p + "intermediate_query.dense", f"ffn_in{i}", H, inner, activation=act)
        x = _layer_norm(b, b.linear(h, p + "output_query.dense", f"ffn_out{i}", inner, H, residual=x),
                        p + "output_query.LayerNorm", H, eps, f"ffn_ln{i}")
    rows = b.linear(x, "language_projection", "projection", H, out_width)
    rows = b.node("Reshape", [rows, b.const("rows_shape", np.array([queries, out_width], np.int64))], hint="rows")
    b.g.outputs.append(b.rename(rows, "image_embeds"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.blip2_graphs",
                         "architecture": "Blip2VisionModel + Blip2QFormerModel",
                         "head": "vision", "image_size": str(vision["image_size"]), "weight_format": weight_format})
    return b.g
