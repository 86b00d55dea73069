"""CLIP vision towers (transformers `CLIPVisionModel` / `CLIPVisionModelWithProjection`: Wan 2.1 I2V's image encoder,
SD's image variations) built from a checkpoint's tensors, already fused, in the converter's IR.

Input: pixel_values [batch, channels, image_size, image_size] (already resized and normalised by the checkpoint's
image processor). Outputs: last_hidden_state [batch, 1 + patches, hidden], penultimate_hidden_state (the last
layer's input: Wan's image context), pooler_output (post_layernorm of the class token) and, with a projection,
image_embeds. The patch Conv (no bias), the class token and learned positions, pre_layrnorm, pre-LayerNorm blocks
with bidirectional attention and a quick-GELU MLP. Head "image_context": penultimate_hidden_state alone, the last
block never built (Wan 2.1 I2V reads nothing else)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from .clip_text_graph import _ACT, clip_encoder, clip_layer_norm
from ..graph_builder import F32, I64, GraphBuilder


def clip_vision_embeddings(b: GraphBuilder, pixels: str, p: str, cfg: Mapping) -> str:
    """[batch, 1 + patches, hidden]: the patch Conv, the class token, learned positions and pre_layrnorm (the
    encoder's input; `p` the tensors' prefix)."""
    H, patch, size = int(cfg["hidden_size"]), int(cfg["patch_size"]), int(cfg["image_size"])
    channels, eps = int(cfg.get("num_channels", 3)), float(cfg.get("layer_norm_eps", 1e-5))
    patches = (size // patch) ** 2
    w = b.const("patch_w", b.weight(p + "embeddings.patch_embedding.weight", (H, channels, patch, patch)))
    x = b.node("Conv", [pixels, w], {"kernel_shape": [patch, patch], "strides": [patch, patch], "pads": [0] * 4,
                                     "dilations": [1, 1], "group": 1}, hint="patches")
    x = b.node("Transpose", [b.node("Reshape", [x, b.const("flat", np.array([0, H, patches], np.int64))],
                                    hint="patch_flat")], {"perm": [0, 2, 1]}, hint="patch_rows")
    batch = b.node("Gather", [b.node("Shape", [pixels], hint="pixel_shape", dtype=I64),
                              b.const("zero_index", np.array([0], np.int64))], {"axis": 0}, hint="batch", dtype=I64)
    cls = b.node("Expand", [b.const("class_token", b.weight(p + "embeddings.class_embedding", (H,)).reshape(1, 1, H)),
                            b.node("Concat", [batch, b.const("cls_rest", np.array([1, H], np.int64))], {"axis": 0},
                                   hint="cls_shape", dtype=I64)], hint="cls")
    x = b.node("Concat", [cls, x], {"axis": 1}, hint="tokens")
    positions = b.weight(p + "embeddings.position_embedding.weight", (patches + 1, H))
    x = b.node("Add", [x, b.const("positions", positions[None])], hint="embeddings")
    return clip_layer_norm(b, x, p + "pre_layrnorm", H, eps, "pre_ln")


def build_clip_vision_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                            group_size: int = 32, head: str | None = None, **_) -> Graph:
    if head not in (None, "image_context"):
        raise ValueError(f"a CLIP vision tower's head is image_context or none (all outputs), not {head!r}")
    cfg = dict(config.get("vision_config") or config)
    H, L = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    if head == "image_context" and L < 1:
        raise ConverterError("head image_context needs at least one layer (it is the last layer's input)")
    patch, size, channels = int(cfg["patch_size"]), int(cfg["image_size"]), int(cfg.get("num_channels", 3))
    eps = float(cfg.get("layer_norm_eps", 1e-5))
    act = _ACT.get(cfg.get("hidden_act", "quick_gelu"))
    if act is None:
        raise NotImplementedError(f"CLIP hidden_act {cfg.get('hidden_act')!r} is not supported")
    if size % patch:
        raise ConverterError(f"image_size {size} is not a multiple of patch_size {patch}")
    b = GraphBuilder("clip_vision", weights, weight_format, group_size)
    p = "vision_model." if "vision_model.embeddings.class_embedding" in b.w else ""   # transformers 5 saves without
    pixels = b.input("pixel_values", [-1, channels, size, size], F32)

    def layer_norm(x: str, prefix: str, hint: str) -> str:
        return clip_layer_norm(b, x, prefix, H, eps, hint)

    x = clip_vision_embeddings(b, pixels, p, cfg)
    if head == "image_context":
        x, _ = clip_encoder(b, x, p, {**cfg, "num_hidden_layers": L - 1}, act, causal=False)
        b.g.outputs.append(b.rename(x, "penultimate_hidden_state"))
        b.g.metadata.update({"producer": "model_zoo.encoders.clip_vision_graph", "architecture": "CLIPVisionModel",
                             "image_size": str(size), "weight_format": weight_format, "head": head})
        return b.g
    x, penultimate = clip_encoder(b, x, p, cfg, act, causal=False)
    pooled = layer_norm(b.node("Gather", [x, b.const("cls_index", np.array(0, np.int64))], {"axis": 1},
                               hint="cls_row"), p + "post_layernorm", "post_ln")
    outputs = [b.rename(x, "last_hidden_state"), b.rename(pooled, "pooler_output")]
    if L > 0:
        outputs.append(b.rename(penultimate, "penultimate_hidden_state"))
    if "visual_projection.weight" in b.w:
        dim = b.w_shape("visual_projection.weight")[0]
        outputs.append(b.rename(b.linear("pooler_output", "visual_projection", "visual_proj", H, dim),
                                "image_embeds"))
    b.g.outputs.extend(outputs)
    b.g.metadata.update({"producer": "model_zoo.encoders.clip_vision_graph", "architecture": "CLIPVisionModel",
                         "image_size": str(size), "weight_format": weight_format})
    return b.g
