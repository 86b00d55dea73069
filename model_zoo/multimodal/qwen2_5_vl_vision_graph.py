"""The Qwen2.5-VL vision tower (transformers `Qwen2_5_VisionTransformerPretrainedModel`) built from a VLM checkpoint's
tensors, in the converter's IR, for one patch grid (t, h, w): the image-to-tokens half of Qwen2.5-VL (issue 38's
VLM rows; Qwen-Image-Edit's and Kandinsky 5 I2I's image prompt).

Input: `pixel_values` [t h w, channels x temporal_patch x patch x patch], the rows Qwen2VLImageProcessor emits (each
2 x 2 merge group's four patches consecutive). Output: `image_embeds` [t h w / 4, out_hidden_size], one row per
language-model image token, in the processor's order.

Graph: the patch embedding (a Conv3d whose kernel is its stride: one product with the flattened patches); the rows
put in window order (merge groups window by window, as get_vision_window_index orders them); 2-D RoPE (row and column
angles of head_dim / 4 frequencies each, rotate-half form); blocks of RMSNorm, attention (q / k / v rows of the fused
qkv projection) inside each window, or over each whole frame in fullatt_block_indexes (block-diagonal boolean masks,
constants of the grid), RMSNorm and the gated MLP; the merger (RMSNorm, the 2 x 2 groups' rows side by side, Linear,
GELU, Linear); the rows back in the processor's order.

Without a grid the graph takes any image: what depends on the grid comes in as inputs the runtime's pipeline
computes (`vision_inputs`): `window_index` (the rows in window order), `rope_cos` / `rope_sin`, `window_mask` /
`full_mask` (block-diagonal: windows; frames) and `merge_order` (the merged rows back in the processor's order)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from converter.ir import ConverterError, Graph

from lite.qwen2_vl_image import is_qwen2_vl, vision_inputs

from ..graph_builder import F32, GraphBuilder

_BOOL = np.dtype(np.bool_)


def build_qwen2_5_vl_vision_graph(config: Mapping, weights: Mapping[str, np.ndarray],
                                  grid: Sequence[int] | None = None, weight_format: str = "float32",
                                  group_size: int = 32) -> Graph:
    """`config`: the VLM's config (its vision_config is read); `grid`: the patch grid (t, h, w) of one image (t 1)
    or video, h and w multiples of spatial_merge_size; None: any grid (its layout as inputs, see the module doc)."""
    v = dict(config.get("vision_config") or config)
    dynamic = grid is None
    if dynamic:
        grid = (1, 2, 2)   # (checked sizes only; every grid-dependent table is an input)
    if len(tuple(grid)) != 3:
        raise ConverterError(f"the vision tower needs its patch grid (t, h, w), got {list(grid)}")
    t, h, w = (int(g) for g in grid)
    qwen2 = is_qwen2_vl(config)   # Qwen2-VL's ViT: LayerNorms, a plain (QuickGELU) MLP, full attention per frame
    heads, depth = int(v.get("num_heads", 16)), int(v.get("depth", 32))
    if qwen2:
        D, out_dim = int(v.get("embed_dim", 1280)), int(v.get("hidden_size", 3584))
        inter, full = D * int(v.get("mlp_ratio", 4)), set(range(depth))
    else:
        D, out_dim = int(v.get("hidden_size", 1280)), int(v.get("out_hidden_size", 3584))
        inter = int(v.get("intermediate_size", 3420))
        full = {int(i) for i in v.get("fullatt_block_indexes", [7, 15, 23, 31])}
    hd, merge = D // heads, int(v.get("spatial_merge_size", 2))
    patch, tp, C = int(v.get("patch_size", 14)), int(v.get("temporal_patch_size", 2)), int(v.get("in_channels", 3))
    act = v.get("hidden_act", "quick_gelu" if qwen2 else "silu")
    if act not in ("silu", "gelu_pytorch_tanh", "gelu", "quick_gelu"):
        raise NotImplementedError(f"Qwen2-VL vision hidden_act {act!r} (built: silu, gelu, gelu_pytorch_tanh, "
                                  "quick_gelu)")
    if min(t, h, w) <= 0 or h % merge or w % merge:
        raise ConverterError(f"patch grid {[t, h, w]}: positive, with h and w multiples of {merge}")
    root = next((r for r in ("model.visual.", "visual.") if r + "patch_embed.proj.weight" in weights), None)
    if root is None:
        raise ConverterError("the checkpoint has no Qwen2-VL vision tower (model.visual.* or visual.*)")
    b = GraphBuilder("qwen2_5_vl_vision", weights, weight_format, group_size)
    S, K = t * h * w, C * tp * patch * patch

    def i64(hint, values):
        return b.const(hint, np.array(values, np.int64))

    def rms(x, name, dim, hint):   # Qwen2.5-VL's RMSNorm; Qwen2-VL's LayerNorm (weight and bias)
        if qwen2:
            prefix = root + name[:-len(".weight")]
            return b.node("LayerNormalization", [x, b.const(hint, b.weight(prefix + ".weight", (dim,))),
                                                 b.const(hint + "_b", b.weight(prefix + ".bias", (dim,)))],
                          {"axis": -1, "epsilon": 1e-6}, hint=hint)
        return b.node("RMSNormalization", [x, b.const(hint, b.weight(root + name, (dim,)))],
                      {"axis": -1, "epsilon": 1e-6}, hint=hint)

    x = b.input("pixel_values", [-1 if dynamic else S, K], F32)
    proj = b.weight(root + "patch_embed.proj.weight", (D, C, tp, patch, patch)).reshape(D, K)
    x = b.node("MatMul", [x, b.const("patch_w", np.ascontiguousarray(proj.T))], hint="patch_embed")
    unit = merge * merge
    if dynamic:
        rows = b.input("window_index", [-1], np.dtype(np.int64))
        cos, sin = b.input("rope_cos", [1, -1, hd // 2], F32), b.input("rope_sin", [1, -1, hd // 2], F32)
        window_mask = b.input("window_mask", [1, 1, -1, -1], _BOOL)
        frame_mask = b.input("full_mask", [1, 1, -1, -1], _BOOL)
        back = b.input("merge_order", [-1], np.dtype(np.int64))
    else:
        table = vision_inputs(config, (t, h, w))
        rows, back = i64("to_windows", table["window_index"]), i64("from_windows", table["merge_order"])
        cos, sin = b.const("rope_cos", table["rope_cos"]), b.const("rope_sin", table["rope_sin"])
        window_mask = b.const("window_mask", table["window_mask"])
        frame_mask = b.const("frame_mask", table["full_mask"]) if t > 1 else ""
    x = b.node("Unsqueeze", [b.node("Gather", [x, rows], {"axis": 0}, hint="x_windows"),
                             i64("batch_axis", [0])], hint="x_3d")

    def rope(y, hint):
        return b.node("RotaryEmbedding", [y, cos, sin], {"interleaved": False, "num_heads": heads,
                                                         "rotary_embedding_dim": 0}, hint=hint)

    for i in range(depth):
        p = f"{root}blocks.{i}."
        n = rms(x, f"blocks.{i}.norm1.weight", D, f"n1_{i}")
        q, k, val = (b.rows_linear(n, p + "attn.qkv", f"{c}{i}", D, 3 * D, np.arange(j * D, (j + 1) * D))
                     for j, c in enumerate("qkv"))
        mask = frame_mask if i in full else window_mask
        o = b.mha([rope(q, f"q{i}_rope"), rope(k, f"k{i}_rope"), val] + ([mask] if mask else []), heads, f"attn{i}")
        x = b.linear(o, p + "attn.proj", f"proj{i}", D, D, residual=x)
        n = rms(x, f"blocks.{i}.norm2.weight", D, f"n2_{i}")
        activation = {"gelu_pytorch_tanh": "gelu_tanh"}.get(act, act)
        if qwen2:
            up = b.linear(n, p + "mlp.fc1", f"fc1_{i}", D, inter, activation=activation)
            x = b.linear(up, p + "mlp.fc2", f"fc2_{i}", inter, D, residual=x)
            continue
        gate = b.linear(n, p + "mlp.gate_proj", f"gate{i}", D, inter, activation=activation)
        up = b.linear(n, p + "mlp.up_proj", f"up{i}", D, inter, multiplier=gate)
        x = b.linear(up, p + "mlp.down_proj", f"down{i}", inter, D, residual=x)

    x = rms(x, "merger.ln_q.weight", D, "ln_q")
    x = b.node("Reshape", [x, i64("groups", [-1, unit * D])], hint="merge_groups")
    x = b.linear(x, root + "merger.mlp.0", "merge1", unit * D, unit * D, activation="gelu")
    x = b.linear(x, root + "merger.mlp.2", "merge2", unit * D, out_dim)
    x = b.node("Gather", [x, back], {"axis": 0}, hint="merged")
    b.g.outputs.append(b.rename(x, "image_embeds"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.qwen2_5_vl_vision_graph",
                         "architecture": "Qwen2.5-VL vision tower",
                         "grid_thw": "any" if dynamic else f"{t},{h},{w}", "weight_format": weight_format})
    return b.g
