"""InternVL's image side (transformers InternVLVisionModel, the pixel shuffle and InternVLMultiModalProjector) built
from a checkpoint's tensors, already fused, in the converter's IR.

Input: pixel_values [tiles, 3, image_size, image_size] (the tiles of one or more images, GotOcr2-preprocessed).
InternViT: a patch Conv with bias, the class token and learned positions, pre-norm blocks (LayerNorm or RMSNorm;
q/k/v with optional biases and optional q/k RMSNorm over the whole width; the output projection and the MLP each
scaled by a learned per-channel lambda before the residual), the final LayerNorm unless the model mean-pools. The
class token dropped, the side x side grid pixel-shuffled by `downsample_ratio` (2x2 neighbours into one row of 4x
the width), then LayerNorm, linear, GELU, linear. Output: image_embeds [tiles x (side / 2)^2, text hidden]."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.deferred import DeferredArray
from converter.ir import ConverterError, Graph

from ..encoders.clip_text_graph import _ACT
from ..graph_builder import F32, I64, GraphBuilder
from ..language.text_model_view import PrefixView


def _pair(v) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, (list, tuple)) else (int(v), int(v))


def build_internvl_vision_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                                group_size: int = 32) -> Graph:
    cfg = dict(config["vision_config"])
    H, L, heads = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
    inner, eps = int(cfg["intermediate_size"]), float(cfg.get("layer_norm_eps", 1e-6))
    (size, size_w), (patch, patch_w) = _pair(cfg.get("image_size", 448)), _pair(cfg.get("patch_size", 14))
    if size != size_w or patch != patch_w or size % patch:
        raise NotImplementedError(f"InternViT with image_size {cfg.get('image_size')} / patch {cfg.get('patch_size')}")
    side = size // patch
    ratio = float(config.get("downsample_ratio", 0.5))
    if ratio != 0.5 or side % 2:
        raise NotImplementedError(f"pixel shuffle with downsample_ratio {ratio} on a {side}x{side} grid")
    if config.get("vision_feature_layer", -1) != -1 or config.get("vision_feature_select_strategy",
                                                                 "default") != "default":
        raise NotImplementedError("InternVL features other than the last layer's without the class token")
    act, proj_act = _ACT.get(cfg.get("hidden_act", "gelu")), _ACT.get(config.get("projector_hidden_act", "gelu"))
    if act is None or proj_act is None:
        raise NotImplementedError(f"activations {cfg.get('hidden_act')!r} / {config.get('projector_hidden_act')!r}")
    norm_type = cfg.get("norm_type", "layer_norm")
    if norm_type not in ("layer_norm", "rms_norm"):
        raise NotImplementedError(f"InternViT norm_type {norm_type!r}")
    tower = next((r for r in ("model.vision_tower.", "vision_tower.") if r + "embeddings.cls_token" in weights), None)
    projector = next((r for r in ("model.multi_modal_projector.", "multi_modal_projector.")
                      if r + "linear_1.weight" in weights), None)
    if tower is None or projector is None:
        raise ConverterError("not a transformers-layout InternVL checkpoint (the -hf conversions): no "
                             "vision_tower.embeddings.* or multi_modal_projector.*")
    text_hidden = int(config["text_config"]["hidden_size"])
    b = GraphBuilder("internvl_vision", PrefixView(weights, tower), weight_format, group_size)
    pixels = b.input("pixel_values", [-1, int(cfg.get("num_channels", 3)), size, size], F32)

    def norm(x: str, prefix: str, hint: str, width: int = H, kind: str = norm_type) -> str:
        w = b.const(f"{hint}_w", b.weight(prefix + ".weight", (width,)))
        if kind == "rms_norm":
            return b.node("RMSNormalization", [x, w], {"axis": -1, "epsilon": eps}, hint=hint)
        bias = b.const(f"{hint}_b", b.weight(prefix + ".bias", (width,)))
        return b.node("LayerNormalization", [x, w, bias], {"axis": -1, "epsilon": eps}, hint=hint)

    def i64(hint: str, v) -> str:
        return b.const(hint, np.array(v, np.int64))

    def scaled_linear(x: str, prefix: str, hint: str, n_in: int, n_out: int, scale: str, residual: str) -> str:
        """residual + lambda * (x W^T + bias): the layer scale folded into the weight's rows and the bias."""
        lam = b.weight(scale, (n_out,))
        src = b.source(prefix + ".weight", (n_out, n_in))
        scaled = DeferredArray(src.shape, lambda r0, r1: src.rows(r0, r1) * lam[r0:r1, None], release=src.release,
                               source=f"{src.source} x {scale}")
        w, attrs = b.linear_weight(f"{hint}_w", scaled)
        bias = b.const(f"{hint}_b", b.weight(prefix + ".bias", (n_out,)) * lam)
        return b.node("MatMul", [x, w, bias, residual], attrs, hint=hint)

    w = b.const("patch_w", b.weight("embeddings.patch_embeddings.projection.weight", (H, 3, patch, patch)))
    bias = b.const("patch_b", b.weight("embeddings.patch_embeddings.projection.bias", (H,)))
    x = b.node("Conv", [pixels, w, bias], {"kernel_shape": [patch, patch], "strides": [patch, patch], "pads": [0] * 4,
                                           "dilations": [1, 1], "group": 1}, hint="patches")
    x = b.node("Transpose", [b.node("Reshape", [x, i64("flat", [0, H, side * side])], hint="patch_flat")],
               {"perm": [0, 2, 1]}, hint="patch_rows")
    batch = b.node("Gather", [b.node("Shape", [pixels], hint="pixel_shape", dtype=I64), i64("zero_index", [0])],
                   {"axis": 0}, hint="batch", dtype=I64)
    cls = b.node("Expand", [b.const("cls", b.weight("embeddings.cls_token", (1, 1, H))),
                            b.node("Concat", [batch, i64("cls_rest", [1, H])], {"axis": 0}, hint="cls_shape",
                                   dtype=I64)], hint="cls_rows")
    x = b.node("Concat", [cls, x], {"axis": 1}, hint="tokens")
    if "embeddings.position_embeddings" in b.w:
        x = b.node("Add", [x, b.const("positions", b.weight("embeddings.position_embeddings",
                                                            (1, side * side + 1, H)))], hint="embedded")
    qk_norm = bool(cfg.get("use_qk_norm", False))
    for i in range(L):
        p = f"encoder.layer.{i}."
        h = norm(x, p + "layernorm_before", f"ln1_{i}")
        q, k, v = (b.linear(h, f"{p}attention.{n}_proj", f"{n}{i}", H, H) for n in "qkv")
        if qk_norm:   # RMSNorm over the whole width, before the heads split
            q = norm(q, p + "attention.q_norm", f"qn{i}", kind="rms_norm")
            k = norm(k, p + "attention.k_norm", f"kn{i}", kind="rms_norm")
        a = b.mha([q, k, v], heads, f"attn{i}")
        x = scaled_linear(a, p + "attention.projection_layer", f"o{i}", H, H, p + "lambda_1", x)
        h = norm(x, p + "layernorm_after", f"ln2_{i}")
        x = scaled_linear(b.linear(h, p + "mlp.fc1", f"fc1_{i}", H, inner, activation=act), p + "mlp.fc2",
                          f"fc2_{i}", inner, H, p + "lambda_2", x)
    if not cfg.get("use_mean_pooling", True):
        x = norm(x, "layernorm", "final_ln", kind="layer_norm")
    patches = b.node("Slice", [x, i64("from", [1]), i64("to", [side * side + 1]), i64("axis", [1])],
                     hint="patch_states")
    # transformers' pixel_shuffle on [B, side(w), side(h), C]: fold pairs of the second axis into channels, swap,
    # fold pairs of the (new) second axis, swap back
    half = side // 2
    y = b.node("Reshape", [patches, i64("grid", [-1, side, half, 2 * H])], hint="fold_h")
    y = b.node("Transpose", [y], {"perm": [0, 2, 1, 3]}, hint="swap1")
    y = b.node("Reshape", [y, i64("grid2", [-1, half, half, 4 * H])], hint="fold_w")
    y = b.node("Transpose", [y], {"perm": [0, 2, 1, 3]}, hint="swap2")
    y = b.node("Reshape", [y, i64("rows", [-1, 4 * H])], hint="shuffled_rows")
    b.w = PrefixView(weights, projector)   # the same graph goes on with the projector's tensors
    y = b.node("LayerNormalization", [y, b.const("proj_ln_w", b.weight("layer_norm.weight", (4 * H,))),
                                      b.const("proj_ln_b", b.weight("layer_norm.bias", (4 * H,)))],
               {"axis": -1, "epsilon": 1e-5}, hint="proj_ln")
    y = b.linear(y, "linear_1", "proj1", 4 * H, text_hidden, activation=proj_act)
    y = b.linear(y, "linear_2", "proj2", text_hidden, text_hidden)
    b.g.outputs.append(b.rename(y, "image_embeds"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.internvl_vision_graph", "architecture": "InternVLVisionModel",
                         "image_size": str(size), "tokens_per_tile": str(half * half),
                         "weight_format": weight_format})
    return b.g
