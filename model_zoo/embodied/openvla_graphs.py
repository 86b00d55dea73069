"""OpenVLA's image side (Prismatic's fused DINOv2 + SigLIP backbone and its projector, openvla/openvla-7b's remote
code) from the checkpoint's tensors, fused, in the converter's IR: head "vision". Input pixel_values [batch, 6, S, S]
(channels 0-2 the DINOv2 view, 3-5 the SigLIP view: the processor normalises the picture twice); output image_embeds
[batch, patches, LLM width]: the rows that follow the prompt's BOS.

Each tower is a timm VisionTransformer read by Prismatic's `get_intermediate_layers(n={depth - 2})`: patch Conv with
bias, learned positions on the patches, the class and register tokens in front, pre-LayerNorm blocks (eps 1e-6, fused
qkv, exact GELU, LayerScale where the checkpoint has ls1 / ls2.scale_factor), the second-to-last block's output with
the prefix tokens dropped; the last block and the final norm are never built. Widths, depths, MLP sizes, patch size
and prefix tokens come from the tensors; the head count from the timm model id (or `timm_num_heads` in the config).
The projector: fc1 - GELU - fc2 - GELU - fc3 (fc1 - GELU - fc2 for a single tower).

The language model is the engine's Llama step graph (model_zoo.language.decoder_graph over language_model.*)."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, I64, GraphBuilder

# what the tensors do not say: the timm ids Prismatic's fused backbones name -> attention heads
TIMM_HEADS = {"vit_large_patch14_reg4_dinov2.lvd142m": 16, "vit_large_patch14_reg4_dinov2": 16,
              "vit_so400m_patch14_siglip_224": 16, "vit_so400m_patch14_siglip_384": 16}
TOWERS = ("vision_backbone.featurizer.", "vision_backbone.fused_featurizer.")


def _heads(config: Mapping, index: int) -> int:
    given = config.get("timm_num_heads")
    if given:
        return int(given[index])
    ids = config.get("timm_model_ids") or []
    if index < len(ids) and ids[index] in TIMM_HEADS:
        return TIMM_HEADS[ids[index]]
    raise NotImplementedError(f"the vision tower {ids[index] if index < len(ids) else index!r} has no known head "
                              f"count (known: {', '.join(sorted(TIMM_HEADS))}); give timm_num_heads in config.json")


def _tower(b: GraphBuilder, pixels: str, p: str, heads: int, size: int, hint: str) -> tuple[str, int]:
    """[batch, patches, width] of one timm ViT's second-to-last block; returns (rows, width)."""
    w = b.w
    if p + "patch_embed.proj.weight" not in w:
        raise ConverterError(f"not an OpenVLA checkpoint: no {p}patch_embed.proj.weight")
    D, channels, patch, _ = b.w_shape(p + "patch_embed.proj.weight")
    if size % patch:
        raise ConverterError(f"image size {size} is not a multiple of the patch size {patch} ({p})")
    if D % heads:
        raise ConverterError(f"{p}: width {D} is not a multiple of {heads} heads")
    depth = 0
    while f"{p}blocks.{depth}.norm1.weight" in w:
        depth += 1
    if depth < 2:
        raise ConverterError(f"{p}: {depth} blocks; Prismatic reads the second-to-last block's output")
    patches = (size // patch) ** 2
    inner = b.w_shape(f"{p}blocks.0.mlp.fc1.weight")[0]
    x = b.node("Conv", [pixels, b.const(f"{hint}_patch_w", b.weight(p + "patch_embed.proj.weight")),
                        b.const(f"{hint}_patch_b", b.weight(p + "patch_embed.proj.bias", (D,)))],
               {"kernel_shape": [patch, patch], "strides": [patch, patch], "pads": [0] * 4, "dilations": [1, 1],
                "group": 1}, hint=f"{hint}_patches")
    x = b.node("Transpose", [b.node("Reshape", [x, b.const(f"{hint}_flat", np.array([0, D, patches], np.int64))],
                                    hint=f"{hint}_flat")], {"perm": [0, 2, 1]}, hint=f"{hint}_rows")
    x = b.node("Add", [x, b.const(f"{hint}_pos", b.weight(p + "pos_embed", (1, patches, D)))], hint=f"{hint}_pos")
    prefix = []
    if p + "cls_token" in w:
        prefix.append(b.weight(p + "cls_token", (1, 1, D)))
    if p + "reg_token" in w:
        prefix.append(b.weight(p + "reg_token"))
    n_prefix = sum(t.shape[1] for t in prefix)
    if prefix:
        batch = b.node("Gather", [b.node("Shape", [pixels], hint=f"{hint}_shape", dtype=I64),
                                  b.const(f"{hint}_zero", np.array([0], np.int64))], {"axis": 0},
                       hint=f"{hint}_batch", dtype=I64)
        shape = b.node("Concat", [batch, b.const(f"{hint}_prefix_rest", np.array([n_prefix, D], np.int64))],
                       {"axis": 0}, hint=f"{hint}_prefix_shape", dtype=I64)
        tokens = b.node("Expand", [b.const(f"{hint}_prefix", np.concatenate(prefix, 1)), shape], hint=f"{hint}_pre")
        x = b.node("Concat", [tokens, x], {"axis": 1}, hint=f"{hint}_tokens")

    def norm(h: str, name: str, tag: str) -> str:
        return b.node("LayerNormalization", [h, b.const(f"{tag}_w", b.weight(name + ".weight", (D,))),
                                             b.const(f"{tag}_b", b.weight(name + ".bias", (D,)))],
                      {"axis": -1, "epsilon": 1e-6}, hint=tag)

    def scaled(h: str, name: str, tag: str) -> str:
        if name not in w:
            return h
        return b.node("Mul", [h, b.const(tag, b.weight(name, (D,)))], hint=tag)

    for i in range(depth - 1):
        lp, t = f"{p}blocks.{i}.", f"{hint}{i}"
        h = norm(x, lp + "norm1", f"{t}_ln1")
        q, k, v = (b.rows_linear(h, lp + "attn.qkv", f"{t}_{n}", D, 3 * D, np.arange(j * D, (j + 1) * D))
                   for j, n in enumerate("qkv"))
        a = b.linear(b.mha([q, k, v], heads, f"{t}_attn"), lp + "attn.proj", f"{t}_proj", D, D)
        x = b.node("Add", [x, scaled(a, lp + "ls1.scale_factor", f"{t}_ls1")], hint=f"{t}_res1")
        h = b.linear(norm(x, lp + "norm2", f"{t}_ln2"), lp + "mlp.fc1", f"{t}_fc1", D, inner, activation="gelu")
        h = b.linear(h, lp + "mlp.fc2", f"{t}_fc2", inner, D)
        x = b.node("Add", [x, scaled(h, lp + "ls2.scale_factor", f"{t}_ls2")], hint=f"{t}_res2")
    if n_prefix:
        x = b.node("Slice", [x, b.const(f"{hint}_from", np.array([n_prefix], np.int64)),
                             b.const(f"{hint}_to", np.array([n_prefix + patches], np.int64)),
                             b.const(f"{hint}_axis", np.array([1], np.int64))], hint=f"{hint}_patch_rows")
    return x, D


def build_openvla_vision_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                               group_size: int = 32) -> Graph:
    fused = bool(config.get("use_fused_vision_backbone", True))
    sizes = [int(s) for s in (config.get("image_sizes") or [224, 224])]
    if fused and (len(sizes) < 2 or sizes[0] != sizes[1]):
        raise NotImplementedError(f"fused towers at different image sizes {sizes}")
    text = dict(config.get("text_config") or {})
    H = int(text.get("hidden_size", 0))
    b = GraphBuilder("openvla_vision", weights, weight_format, group_size)
    size = sizes[0]
    pixels = b.input("pixel_values", [-1, 6 if fused else 3, size, size], F32)
    if fused:
        views = [b.node("Slice", [pixels, b.const(f"view{j}_from", np.array([3 * j], np.int64)),
                                  b.const(f"view{j}_to", np.array([3 * j + 3], np.int64)),
                                  b.const(f"view{j}_axis", np.array([1], np.int64))], hint=f"view{j}")
                 for j in range(2)]
        rows = [_tower(b, views[j], TOWERS[j], _heads(config, j), size, f"tower{j}_") for j in range(2)]
        x = b.node("Concat", [rows[0][0], rows[1][0]], {"axis": -1}, hint="patch_features")
        width = rows[0][1] + rows[1][1]
    else:
        x, width = _tower(b, pixels, TOWERS[0], _heads(config, 0), size, "tower0_")
    if not H:
        H = b.w_shape("projector.fc2.weight")[0]
    inner = b.w_shape("projector.fc1.weight")[0]
    x = b.linear(x, "projector.fc1", "proj_fc1", width, inner, activation="gelu")
    if fused:
        x = b.linear(x, "projector.fc2", "proj_fc2", inner, H, activation="gelu")
        x = b.linear(x, "projector.fc3", "proj_fc3", H, H)
    else:
        x = b.linear(x, "projector.fc2", "proj_fc2", inner, H)
    b.g.outputs.append(b.rename(x, "image_embeds"))
    b.g.metadata.update({"producer": "model_zoo.embodied.openvla_graphs", "architecture": "OpenVLAForActionPrediction",
                         "head": "vision", "image_size": str(size), "weight_format": weight_format})
    return b.g
