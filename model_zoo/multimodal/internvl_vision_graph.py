"""InternVL's image side (transformers InternVLVisionModel, the pixel shuffle and InternVLMultiModalProjector) built
from a checkpoint's tensors, already fused, in the converter's IR.

Input: pixel_values [tiles, 3, image_size, image_size] (the tiles of one or more images, GotOcr2-preprocessed).
InternViT: a patch Conv with bias, the class token and learned positions, pre-norm blocks (LayerNorm or RMSNorm;
q/k/v with optional biases and optional q/k RMSNorm over the whole width; the output projection and the MLP each
scaled by a learned per-channel lambda before the residual), the final LayerNorm unless the model mean-pools. The
class token dropped, the side x side grid pixel-shuffled by `downsample_ratio` (2x2 neighbours into one row of 4x
the width), then LayerNorm, linear, GELU, linear. Output: image_embeds [tiles x (side / 2)^2, text hidden]."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from converter.deferred import DeferredArray, take_rows
from converter.ir import ConverterError, Graph

from ..encoders.clip_text_graph import _ACT
from ..graph_builder import F32, I64, GraphBuilder
from ..language.text_model_view import PrefixView


def _pair(v) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, (list, tuple)) else (int(v), int(v))


@dataclass(frozen=True)
class InternViTNames:
    """Where a checkpoint keeps InternViT's tensors (below the tower's prefix; `layer` formatted with the index)."""
    cls: str
    patch: str
    positions: str
    layer: str
    norm1: str
    norm2: str
    qkv: str | None          # a fused [3C, C] projection, or None for q_proj / k_proj / v_proj under `attn`
    attn: str
    out: str
    scale1: str
    scale2: str
    q_norm: str
    k_norm: str


HF_NAMES = InternViTNames(cls="embeddings.cls_token", patch="embeddings.patch_embeddings.projection",
                          positions="embeddings.position_embeddings", layer="encoder.layer.{}.",
                          norm1="layernorm_before", norm2="layernorm_after", qkv=None, attn="attention.",
                          out="attention.projection_layer", scale1="lambda_1", scale2="lambda_2",
                          q_norm="attention.q_norm", k_norm="attention.k_norm")
# The original project's InternVisionModel (remote code, model_type internvl_chat: InternVL3.5-Flash)
REMOTE_NAMES = InternViTNames(cls="embeddings.class_embedding", patch="embeddings.patch_embedding",
                              positions="embeddings.position_embedding", layer="encoder.layers.{}.", norm1="norm1",
                              norm2="norm2", qkv="attn.qkv", attn="attn.", out="attn.proj", scale1="ls1",
                              scale2="ls2", q_norm="attn.q_norm", k_norm="attn.k_norm")


def _internvit(b: GraphBuilder, cfg: Mapping, names: InternViTNames) -> tuple[str, int, int]:
    """InternViT on a new input pixel_values [tiles, 3, S, S]: (patch states without the class token
    [tiles, side^2, C], side, C)."""
    H, L, heads = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
    inner, eps = int(cfg["intermediate_size"]), float(cfg.get("layer_norm_eps", 1e-6))
    (size, size_w), (patch, patch_w) = _pair(cfg.get("image_size", 448)), _pair(cfg.get("patch_size", 14))
    if size != size_w or patch != patch_w or size % patch:
        raise NotImplementedError(f"InternViT with image_size {cfg.get('image_size')} / patch {cfg.get('patch_size')}")
    side = size // patch
    act = _ACT.get(cfg.get("hidden_act", "gelu"))
    if act is None:
        raise NotImplementedError(f"InternViT activation {cfg.get('hidden_act')!r}")
    norm_type = cfg.get("norm_type", "layer_norm")
    if norm_type not in ("layer_norm", "rms_norm"):
        raise NotImplementedError(f"InternViT norm_type {norm_type!r}")
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

    def qkv(h: str, p: str, i: int) -> list[str]:
        if names.qkv is None:
            return [b.linear(h, f"{p}{names.attn}{n}_proj", f"{n}{i}", H, H) for n in "qkv"]
        fused = b.source(p + names.qkv + ".weight", (3 * H, H))
        bias = b.weight(p + names.qkv + ".bias", (3 * H,)) if p + names.qkv + ".bias" in b.w else None
        out = []
        for j, n in enumerate("qkv"):   # the fused projection's thirds
            wj, attrs = b.linear_weight(f"{n}{i}_w", take_rows(fused, np.arange(j * H, (j + 1) * H)))
            bj = "" if bias is None else b.const(f"{n}{i}_b", bias[j * H:(j + 1) * H])
            out.append(b.node("MatMul", [h, wj, bj], attrs, hint=f"{n}{i}"))
        return out

    w = b.const("patch_w", b.weight(names.patch + ".weight", (H, 3, patch, patch)))
    bias = b.const("patch_b", b.weight(names.patch + ".bias", (H,)))
    x = b.node("Conv", [pixels, w, bias], {"kernel_shape": [patch, patch], "strides": [patch, patch], "pads": [0] * 4,
                                           "dilations": [1, 1], "group": 1}, hint="patches")
    x = b.node("Transpose", [b.node("Reshape", [x, i64("flat", [0, H, side * side])], hint="patch_flat")],
               {"perm": [0, 2, 1]}, hint="patch_rows")
    batch = b.node("Gather", [b.node("Shape", [pixels], hint="pixel_shape", dtype=I64), i64("zero_index", [0])],
                   {"axis": 0}, hint="batch", dtype=I64)
    cls = b.node("Expand", [b.const("cls", b.weight(names.cls, (1, 1, H))),
                            b.node("Concat", [batch, i64("cls_rest", [1, H])], {"axis": 0}, hint="cls_shape",
                                   dtype=I64)], hint="cls_rows")
    x = b.node("Concat", [cls, x], {"axis": 1}, hint="tokens")
    if names.positions in b.w:
        x = b.node("Add", [x, b.const("positions", b.weight(names.positions, (1, side * side + 1, H)))],
                   hint="embedded")
    qk_norm = bool(cfg.get("use_qk_norm", cfg.get("qk_normalization", False)))
    for i in range(L):
        p = names.layer.format(i)
        h = norm(x, p + names.norm1, f"ln1_{i}")
        q, k, v = qkv(h, p, i)
        if qk_norm:   # RMSNorm over the whole width, before the heads split
            q = norm(q, p + names.q_norm, f"qn{i}", kind="rms_norm")
            k = norm(k, p + names.k_norm, f"kn{i}", kind="rms_norm")
        a = b.mha([q, k, v], heads, f"attn{i}")
        x = scaled_linear(a, p + names.out, f"o{i}", H, H, p + names.scale1, x)
        h = norm(x, p + names.norm2, f"ln2_{i}")
        x = scaled_linear(b.linear(h, p + "mlp.fc1", f"fc1_{i}", H, inner, activation=act), p + "mlp.fc2",
                          f"fc2_{i}", inner, H, p + names.scale2, x)
    if not cfg.get("use_mean_pooling", True):
        x = norm(x, "layernorm", "final_ln", kind="layer_norm")
    patches = b.node("Slice", [x, i64("from", [1]), i64("to", [side * side + 1]), i64("axis", [1])],
                     hint="patch_states")
    return patches, side, H


def _pixel_shuffle(b: GraphBuilder, patches: str, side: int, H: int, r: int, hint: str) -> str:
    """The project's pixel_shuffle by 1 / r on [tiles, side, side, C] (fold r neighbours of the second axis into
    channels, swap, fold r of the new second axis, swap back): rows [tiles x (side / r)^2, r^2 C]."""
    if side % r:
        raise NotImplementedError(f"pixel shuffle by 1/{r} on a {side}x{side} grid")
    part = side // r

    def i64(name: str, v) -> str:
        return b.const(f"{hint}_{name}", np.array(v, np.int64))
    y = b.node("Reshape", [patches, i64("grid", [-1, side, part, r * H])], hint=f"{hint}_fold_h")
    y = b.node("Transpose", [y], {"perm": [0, 2, 1, 3]}, hint=f"{hint}_swap1")
    y = b.node("Reshape", [y, i64("grid2", [-1, part, part, r * r * H])], hint=f"{hint}_fold_w")
    y = b.node("Transpose", [y], {"perm": [0, 2, 1, 3]}, hint=f"{hint}_swap2")
    return b.node("Reshape", [y, i64("rows", [-1, r * r * H])], hint=f"{hint}_rows")


def _check_shuffle(config: Mapping) -> None:
    ratio = float(config.get("downsample_ratio", 0.5))
    if ratio != 0.5:
        raise NotImplementedError(f"pixel shuffle with downsample_ratio {ratio}")
    if config.get("vision_feature_layer", config.get("select_layer", -1)) != -1 or \
            config.get("vision_feature_select_strategy", "default") != "default":
        raise NotImplementedError("InternVL features other than the last layer's without the class token")


def build_internvl_vision_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                                group_size: int = 32) -> Graph:
    cfg = dict(config["vision_config"])
    _check_shuffle(config)
    proj_act = _ACT.get(config.get("projector_hidden_act", "gelu"))
    if proj_act is None:
        raise NotImplementedError(f"projector activation {config.get('projector_hidden_act')!r}")
    tower = next((r for r in ("model.vision_tower.", "vision_tower.") if r + "embeddings.cls_token" in weights), None)
    projector = next((r for r in ("model.multi_modal_projector.", "multi_modal_projector.")
                      if r + "linear_1.weight" in weights), None)
    if tower is None or projector is None:
        raise ConverterError("not a transformers-layout InternVL checkpoint (the -hf conversions): no "
                             "vision_tower.embeddings.* or multi_modal_projector.*")
    text_hidden = int(config["text_config"]["hidden_size"])
    b = GraphBuilder("internvl_vision", PrefixView(weights, tower), weight_format, group_size)
    patches, side, H = _internvit(b, cfg, HF_NAMES)
    y = _pixel_shuffle(b, patches, side, H, 2, "shuffle")
    b.w = PrefixView(weights, projector)   # the same graph goes on with the projector's tensors
    y = b.node("LayerNormalization", [y, b.const("proj_ln_w", b.weight("layer_norm.weight", (4 * H,))),
                                      b.const("proj_ln_b", b.weight("layer_norm.bias", (4 * H,)))],
               {"axis": -1, "epsilon": 1e-5}, hint="proj_ln")
    y = b.linear(y, "linear_1", "proj1", 4 * H, text_hidden, activation=proj_act)
    y = b.linear(y, "linear_2", "proj2", text_hidden, text_hidden)
    b.g.outputs.append(b.rename(y, "image_embeds"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.internvl_vision_graph",
                         "architecture": "InternVLVisionModel",
                         "image_size": str(side * _pair(cfg.get("patch_size", 14))[0]),
                         "tokens_per_tile": str((side // 2) ** 2), "weight_format": weight_format})
    return b.g


def _layer_norm(b: GraphBuilder, x: str, prefix: str, width: int, hint: str, eps: float = 1e-5) -> str:
    return b.node("LayerNormalization", [x, b.const(f"{hint}_w", b.weight(prefix + ".weight", (width,))),
                                         b.const(f"{hint}_b", b.weight(prefix + ".bias", (width,)))],
                  {"axis": -1, "epsilon": eps}, hint=hint)


POOLING_HEADS = 16   # the project's CrossAttentionPooling(num_heads=16)


def _router(b: GraphBuilder, patches: str, H: int) -> str:
    """The Visual Resolution Router's per-tile probabilities [tiles, 2]: a learned query cross-attending to the
    tile's patch states (attn1 / norm1, then attn2 / norm2 three times: the project's forward reuses its second
    attention), then four residual MLP blocks (Linear, GELU, Linear, LayerNorm) and a LayerNorm + linear gate."""
    if H % POOLING_HEADS:
        raise NotImplementedError(f"the router's {POOLING_HEADS}-head pooling on a width of {H}")
    tiles = b.node("Slice", [b.node("Shape", [patches], hint="patch_shape", dtype=I64),
                             b.const("r_first", np.array([0], np.int64)), b.const("r_one", np.array([1], np.int64))],
                   hint="tiles", dtype=I64)
    query_shape = b.node("Concat", [tiles, b.const("query_rest", np.array([1, H], np.int64))], {"axis": 0},
                         hint="query_shape", dtype=I64)
    x = b.node("Expand", [b.const("router_query", b.weight("pooling_before_gating.query_token", (1, H))[None]),
                          query_shape], hint="router_query_rows")                                   # [tiles, 1, H]
    for step, k in enumerate((1, 2, 2, 2)):
        p = f"pooling_before_gating.attn{k}."
        w = b.source(p + "in_proj_weight", (3 * H, H))
        bias = b.weight(p + "in_proj_bias", (3 * H,))
        parts = []
        for j, (n, src) in enumerate((("q", x), ("k", patches), ("v", patches))):
            wj, attrs = b.linear_weight(f"pool{step}_{n}_w", take_rows(w, np.arange(j * H, (j + 1) * H)))
            parts.append(b.node("MatMul", [src, wj, b.const(f"pool{step}_{n}_b", bias[j * H:(j + 1) * H])], attrs,
                                hint=f"pool{step}_{n}"))
        a = b.mha(parts, POOLING_HEADS, f"pool{step}")
        x = _layer_norm(b, b.linear(a, p + "out_proj", f"pool{step}_out", H, H),
                        f"pooling_before_gating.norm{k}", H, f"pool{step}_ln")
    x = b.node("Reshape", [x, b.const("router_rows", np.array([-1, H], np.int64))], hint="pooled")   # [tiles, H]
    for k in range(1, 5):
        p = f"gating.block{k}."
        inner = b.w_shape(p + "0.weight")[0]
        h = b.linear(b.linear(x, p + "0", f"gate_block{k}_in", H, inner, activation="gelu"), p + "3",
                     f"gate_block{k}_out", inner, H)
        x = b.node("Add", [x, _layer_norm(b, h, p + "5", H, f"gate_block{k}_ln")], hint=f"gate_res{k}")
    logits = b.linear(_layer_norm(b, x, "gating.gate.0", H, "gate_ln"), "gating.gate.1", "gate_logits", H, 2)
    return b.node("Softmax", [logits], {"axis": -1}, hint="gate_probs")


def build_internvl_flash_vision_graph(config: Mapping, weights: Mapping[str, np.ndarray],
                                      weight_format: str = "float32", group_size: int = 32) -> Graph:
    """The original project's layout (model_type internvl_chat: vision_model.*, mlp1, and for InternVL3.5-Flash
    mlp2, pooling_before_gating, gating): outputs image_embeds [tiles x side^2 / 4, text hidden] (pixel shuffle 0.5,
    mlp1) and, with the router, flash_embeds [tiles x side^2 / 16, text hidden] (pixel shuffle 0.25, mlp2) and gate
    [tiles, 2] (the router's probabilities; lite.internvl_image picks each tile's rows from them)."""
    cfg = dict(config["vision_config"])
    _check_shuffle(config)
    if "vision_model.embeddings.class_embedding" not in weights or "mlp1.1.weight" not in weights:
        raise ConverterError("not an InternVLChatModel checkpoint (remote-code layout): no vision_model.embeddings.* "
                             "or mlp1.*")
    text_hidden = int((config.get("llm_config") or config.get("text_config"))["hidden_size"])
    b = GraphBuilder("internvl_flash_vision", PrefixView(weights, "vision_model."), weight_format, group_size)
    patches, side, H = _internvit(b, cfg, REMOTE_NAMES)
    b.w = weights
    y = _layer_norm(b, _pixel_shuffle(b, patches, side, H, 2, "shuffle"), "mlp1.0", 4 * H, "mlp1_ln")
    y = b.linear(b.linear(y, "mlp1.1", "mlp1_in", 4 * H, text_hidden, activation="gelu"), "mlp1.3", "mlp1_out",
                 text_hidden, text_hidden)
    b.g.outputs.append(b.rename(y, "image_embeds"))
    flash = "mlp2.1.weight" in weights
    if flash:
        z = _layer_norm(b, _pixel_shuffle(b, patches, side, H, 4, "shuffle4"), "mlp2.0", 16 * H, "mlp2_ln")
        inner = b.w_shape("mlp2.1.weight")[0]
        z = b.linear(z, "mlp2.1", "mlp2_in", 16 * H, inner, activation="gelu")
        z = b.linear(z, "mlp2.4", "mlp2_mid", inner, b.w_shape("mlp2.4.weight")[0], activation="gelu")
        z = b.linear(z, "mlp2.7", "mlp2_out", b.w_shape("mlp2.7.weight")[1], text_hidden)
        b.g.outputs.append(b.rename(z, "flash_embeds"))
        b.g.outputs.append(b.rename(_router(b, patches, H), "gate"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.internvl_vision_graph",
                         "architecture": "InternVisionModel" + (" + Visual Resolution Router" if flash else ""),
                         "tokens_per_tile": str((side // 2) ** 2), "weight_format": weight_format})
    return b.g
