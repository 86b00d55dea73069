"""The Qwen3-VL vision tower (transformers `Qwen3VLVisionModel`) built from a VLM checkpoint's tensors, in the
converter's IR, for any image size: the layout of an image's patch grid comes in as inputs
(lite.qwen2_vl_image.qwen3_vl_vision_inputs).

Inputs: `pixel_values` [patches, channels x temporal_patch x patch x patch] (the processor's rows, each 2 x 2 merge
group's four patches consecutive), `pos_indices` / `pos_weights` [patches, 4] (bilinear taps into the learned
position table), `rope_cos` / `rope_sin` [1, patches, head_dim / 2], `full_mask` [1, 1, patches, patches] (each frame
attends to itself). Outputs: `image_embeds` [patches / 4, out_hidden_size] and `deepstack_embeds` [levels, patches /
4, out_hidden_size] (the DeepStack mergers' features of the deepstack_visual_indexes blocks, which the language model
adds to its first layers' states at the image tokens).

Graph: the patch embedding (a product with the flattened patches, with bias), plus the interpolated learned position
embedding (the table's four taps weighted and summed), blocks of LayerNorm, attention over the frame with 2-D RoPE
(rotate-half), LayerNorm and a GELU-tanh MLP; the merger (LayerNorm, the 2 x 2 groups side by side, Linear, GELU,
Linear) and, per DeepStack level, its merger (the groups side by side, then LayerNorm, Linear, GELU, Linear)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, GraphBuilder

_BOOL = np.dtype(np.bool_)


def build_qwen3_vl_vision_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                                group_size: int = 32) -> Graph:
    v = dict(config.get("vision_config") or config)
    D, heads, depth = int(v.get("hidden_size", 1152)), int(v.get("num_heads", 16)), int(v.get("depth", 27))
    hd, inter = D // heads, int(v.get("intermediate_size", 4304))
    out_dim, merge = int(v.get("out_hidden_size", 3584)), int(v.get("spatial_merge_size", 2))
    patch, tp, C = int(v.get("patch_size", 16)), int(v.get("temporal_patch_size", 2)), int(v.get("in_channels", 3))
    levels = [int(i) for i in v.get("deepstack_visual_indexes", [])]
    acts = {"gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "silu": "silu"}
    act = acts.get(v.get("hidden_act", "gelu_pytorch_tanh"))
    if act is None:
        raise NotImplementedError(f"Qwen3-VL vision hidden_act {v.get('hidden_act')!r} (built: gelu_pytorch_tanh, "
                                  "gelu, silu)")
    root = next((r for r in ("model.visual.", "visual.") if r + "patch_embed.proj.weight" in weights), None)
    if root is None:
        raise ConverterError("the checkpoint has no Qwen3-VL vision tower (model.visual.* or visual.*)")
    b = GraphBuilder("qwen3_vl_vision", weights, weight_format, group_size)
    K, unit = C * tp * patch * patch, merge * merge

    def norm(x, prefix, dim, hint):
        return b.node("LayerNormalization", [x, b.const(hint, b.weight(prefix + ".weight", (dim,))),
                                             b.const(hint + "_b", b.weight(prefix + ".bias", (dim,)))],
                      {"axis": -1, "epsilon": 1e-6}, hint=hint)

    def groups(x, hint):   # each 2 x 2 merge group's rows side by side
        return b.node("Reshape", [x, b.const(hint, np.array([-1, unit * D], np.int64))], hint=hint)

    def merger(x, prefix, hint, post_norm):
        x = norm(groups(x, f"{hint}_groups"), prefix + ".norm", unit * D, f"{hint}_norm") if post_norm else \
            groups(norm(x, prefix + ".norm", D, f"{hint}_norm"), f"{hint}_groups")
        x = b.linear(x, prefix + ".linear_fc1", f"{hint}_fc1", unit * D, unit * D, activation="gelu")
        return b.linear(x, prefix + ".linear_fc2", f"{hint}_fc2", unit * D, out_dim)

    x = b.input("pixel_values", [-1, K], F32)
    idx, wts = b.input("pos_indices", [-1, 4], np.dtype(np.int64)), b.input("pos_weights", [-1, 4], F32)
    cos, sin = b.input("rope_cos", [1, -1, hd // 2], F32), b.input("rope_sin", [1, -1, hd // 2], F32)
    mask = b.input("full_mask", [1, 1, -1, -1], _BOOL)
    proj = b.weight(root + "patch_embed.proj.weight", (D, C, tp, patch, patch)).reshape(D, K)
    x = b.node("MatMul", [x, b.const("patch_w", np.ascontiguousarray(proj.T)),
                          b.const("patch_b", b.weight(root + "patch_embed.proj.bias", (D,)))], hint="patch_embed")
    n_pos = b.w_shape(root + "pos_embed.weight")[0]
    table = b.const("pos_table", b.weight(root + "pos_embed.weight", (n_pos, D)))
    taps = b.node("Mul", [b.node("Gather", [table, idx], {"axis": 0}, hint="pos_taps"),
                          b.node("Unsqueeze", [wts, b.const("w_axis", np.array([-1], np.int64))], hint="pos_w")],
                  hint="pos_weighted")
    pos = b.node("ReduceSum", [taps, b.const("tap_axis", np.array([1], np.int64))], {"keepdims": 0}, hint="pos")
    x = b.node("Unsqueeze", [b.node("Add", [x, pos], hint="x_pos"), b.const("batch_axis", np.array([0], np.int64))],
               hint="x_3d")

    def rope(y, hint):
        return b.node("RotaryEmbedding", [y, cos, sin], {"interleaved": False, "num_heads": heads,
                                                         "rotary_embedding_dim": 0}, hint=hint)

    deep = []
    for i in range(depth):
        p = f"{root}blocks.{i}."
        n = norm(x, p + "norm1", D, f"n1_{i}")
        q, k, val = (b.rows_linear(n, p + "attn.qkv", f"{c}{i}", D, 3 * D, np.arange(j * D, (j + 1) * D))
                     for j, c in enumerate("qkv"))
        o = b.mha([rope(q, f"q{i}_rope"), rope(k, f"k{i}_rope"), val, mask], heads, f"attn{i}")
        x = b.linear(o, p + "attn.proj", f"proj{i}", D, D, residual=x)
        n = norm(x, p + "norm2", D, f"n2_{i}")
        up = b.linear(n, p + "mlp.linear_fc1", f"fc1_{i}", D, inter, activation=act)
        x = b.linear(up, p + "mlp.linear_fc2", f"fc2_{i}", inter, D, residual=x)
        if i in levels:
            j = levels.index(i)
            deep.append(merger(x, f"{root}deepstack_merger_list.{j}", f"deep{j}", post_norm=True))
    out = merger(x, root + "merger", "merger", post_norm=False)
    b.g.outputs.append(b.rename(out, "image_embeds"))
    if deep:
        stacked = b.node("Concat", [b.node("Unsqueeze", [d, b.const(f"deep_axis{j}", np.array([0], np.int64))],
                                           hint=f"deep_level{j}") for j, d in enumerate(deep)], {"axis": 0},
                         hint="deep_stack")
        b.g.outputs.append(b.rename(stacked, "deepstack_embeds"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.qwen3_vl_vision_graph",
                         "architecture": "Qwen3-VL vision tower",
                         "grid_thw": "any", "weight_format": weight_format})
    return b.g
