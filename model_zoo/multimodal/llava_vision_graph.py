"""LLaVA-1.5's and LLaVA-NeXT's image side (transformers LlavaForConditionalGeneration's / LlavaNextForConditional-
Generation's vision tower and multi-modal projector) built from a checkpoint's tensors, already fused, in the
converter's IR. LLaVA-NeXT's tiles are a batch of images here; its learned image_newline is a second output.

Input: pixel_values [images, 3, image_size, image_size] (CLIP-preprocessed). Output: image_embeds [images x tokens,
text hidden]: the CLIP tower's hidden state after `vision_feature_layer` (-2: the penultimate layer, the last block
never built), the class token dropped (strategy "default"; "full" keeps it), then linear_1 -> GELU -> linear_2.
Tensors are read under any of the layouts checkpoints use (vision_tower.vision_model.* on the Hub, vision_tower.* as
transformers 5.25 saves, either under model.; multi_modal_projector.* likewise)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..encoders.clip_text_graph import _ACT, clip_encoder
from ..encoders.clip_vision_graph import clip_vision_embeddings
from ..graph_builder import F32, GraphBuilder
from ..language.text_model_view import PrefixView


def feature_layers(config: Mapping) -> int:
    """How many CLIP blocks run before the features are read (hidden_states[vision_feature_layer])."""
    layer = config.get("vision_feature_layer", -2)
    if not isinstance(layer, int):
        raise NotImplementedError(f"vision_feature_layer {layer!r}: several layers concatenated are not supported")
    total = int(config["vision_config"]["num_hidden_layers"])
    k = layer if layer >= 0 else total + 1 + layer
    if not 0 <= k <= total:
        raise ConverterError(f"vision_feature_layer {layer} is outside the tower's {total} layers")
    return k


def image_tokens(config: Mapping) -> int:
    """Rows one image gives: patches, plus the class token under strategy "full"."""
    v = config["vision_config"]
    return (int(v["image_size"]) // int(v["patch_size"])) ** 2 + \
        (1 if config.get("vision_feature_select_strategy", "default") == "full" else 0)


def build_llava_vision_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                             group_size: int = 32) -> Graph:
    cfg = dict(config["vision_config"])
    strategy = config.get("vision_feature_select_strategy", "default")
    if strategy not in ("default", "full"):
        raise NotImplementedError(f"vision_feature_select_strategy {strategy!r}")
    act = _ACT.get(cfg.get("hidden_act", "quick_gelu"))
    proj_act = _ACT.get(config.get("projector_hidden_act", "gelu"))
    if act is None or proj_act is None:
        raise NotImplementedError(f"activations {cfg.get('hidden_act')!r} / {config.get('projector_hidden_act')!r}")
    tower = next((r for r in ("model.vision_tower.vision_model.", "vision_tower.vision_model.", "model.vision_tower.",
                              "vision_tower.") if r + "embeddings.class_embedding" in weights), None)
    projector = next((r for r in ("model.multi_modal_projector.", "multi_modal_projector.")
                      if r + "linear_1.weight" in weights), None)
    if tower is None or projector is None:
        raise ConverterError("not a LLaVA checkpoint: no vision_tower.vision_model.* or multi_modal_projector.*")
    H, size = int(cfg["hidden_size"]), int(cfg["image_size"])
    if size % int(cfg["patch_size"]):
        raise ConverterError(f"image_size {size} is not a multiple of patch_size {cfg['patch_size']}")
    text_hidden = int((config.get("text_config") or {})["hidden_size"])
    b = GraphBuilder("llava_vision", PrefixView(weights, tower), weight_format, group_size)
    pixels = b.input("pixel_values", [-1, int(cfg.get("num_channels", 3)), size, size], F32)
    x = clip_vision_embeddings(b, pixels, "", cfg)
    x, _ = clip_encoder(b, x, "", {**cfg, "num_hidden_layers": feature_layers(config)}, act, causal=False)
    if strategy == "default":   # the class token dropped
        patches = (size // int(cfg["patch_size"])) ** 2
        x = b.node("Slice", [x, b.const("from", np.array([1], np.int64)), b.const("to", np.array([patches + 1],
                                                                                                 np.int64)),
                             b.const("axis", np.array([1], np.int64))], hint="patch_features")
    x = b.node("Reshape", [x, b.const("rows", np.array([-1, H], np.int64))], hint="feature_rows")
    b.w = PrefixView(weights, projector)   # the same graph goes on with the projector's tensors
    inner = b.w_shape("linear_1.weight")[0]
    x = b.linear(x, "linear_1", "proj1", H, inner, activation=proj_act)
    x = b.linear(x, "linear_2", "proj2", inner, text_hidden)
    b.g.outputs.append(b.rename(x, "image_embeds"))
    newline = next((n for n in ("model.image_newline", "image_newline") if n in weights), None)
    if newline is not None:   # LLaVA-NeXT: the learned token ending each row of tiles (lite.llava_image packs them)
        b.w = weights
        value = b.weight(newline, (text_hidden,))
        out = b.node("Reshape", [b.const("newline_value", value[None]), b.const("newline_shape",
                                                                           np.array([-1], np.int64))], hint="newline")
        b.g.outputs.append(b.rename(out, "image_newline"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.llava_vision_graph", "architecture": "LlavaVisionTower",
                         "image_size": str(size), "image_tokens": str(image_tokens(config)),
                         "weight_format": weight_format})
    return b.g
