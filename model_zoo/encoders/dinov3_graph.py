"""DINOv3 ViT (transformers `DINOv3ViTModel`, model_type "dinov3_vit") from its checkpoint's tensors, fused, in the
converter's IR: a patch Conv, the [CLS] and register tokens before the patches, pre-LayerNorm blocks whose queries
and keys are rotated by 2-D RoPE on the patch tokens only (the prefix tokens pass unrotated: cos 1, sin 0 rows of the
tables), layer scale on both branches, a plain (GELU) or gated (SwiGLU) MLP, the final LayerNorm. The RoPE tables
are constants for one image size (`height` x `width`, default the config's image_size): patch centres in [-1, 1],
angles 2 pi x coordinate x theta^(-4 i / head_dim) for y then x, as transformers computes them. Input pixel_values
[batch, channels, height, width]; outputs last_hidden_state [batch, 1 + registers + patches, hidden] and
pooler_output (the [CLS] row)."""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, I64, GraphBuilder

_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "silu": "silu", "swish": "silu",
        "relu": "relu"}


def rope_tables(config: Mapping, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) [patches, head_dim / 2]: the half-tables RotaryEmbedding's rotate-half form reads (transformers tiles
    the angles twice over head_dim, so both halves share them)."""
    heads, hidden, patch = int(config["num_attention_heads"]), int(config["hidden_size"]), int(config["patch_size"])
    head_dim = hidden // heads
    theta = float(config.get("rope_theta", 100.0))
    inv_freq = 1.0 / theta ** np.arange(0, 1, 4 / head_dim, dtype=np.float32)           # [head_dim / 4]
    ph, pw = height // patch, width // patch
    ys = (np.arange(0.5, ph, dtype=np.float32) / ph) * 2 - 1
    xs = (np.arange(0.5, pw, dtype=np.float32) / pw) * 2 - 1
    coords = np.stack(np.meshgrid(ys, xs, indexing="ij"), -1).reshape(-1, 2)             # [P, 2] (y, x)
    angles = (2 * math.pi * coords[:, :, None] * inv_freq[None, None, :]).reshape(len(coords), -1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def build_dinov3_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                       group_size: int = 32, height: int | None = None, width: int | None = None, **_) -> Graph:
    H, L, heads = int(config["hidden_size"]), int(config["num_hidden_layers"]), int(config["num_attention_heads"])
    inner, patch = int(config["intermediate_size"]), int(config["patch_size"])
    channels, registers = int(config.get("num_channels", 3)), int(config.get("num_register_tokens", 0))
    eps = float(config.get("layer_norm_eps", 1e-5))
    act = _ACT.get(config.get("hidden_act", "gelu"))
    if act is None:
        raise NotImplementedError(f"hidden_act {config.get('hidden_act')!r} is not supported")
    size = config.get("image_size", 224)
    size = size if isinstance(size, (list, tuple)) else (size, size)
    height, width = int(height or size[0]), int(width or size[1])
    if height % patch or width % patch:
        raise ConverterError(f"the image size {height}x{width} is not a multiple of patch_size {patch}")
    if H % heads or (H // heads) % 4:
        raise ConverterError(f"hidden_size {H} over {heads} heads: the 2-D RoPE needs a head size divisible by 4")
    patches, prefix = (height // patch) * (width // patch), 1 + registers
    head_dim = H // heads
    p = "dinov3." if "dinov3.embeddings.cls_token" in weights else ""   # (a task model's backbone prefix)
    b = GraphBuilder("dinov3", weights, weight_format, group_size)
    pixels = b.input("pixel_values", [-1, channels, height, width], F32)
    w = b.const("patch_w", b.weight(p + "embeddings.patch_embeddings.weight", (H, channels, patch, patch)))
    pb = b.const("patch_b", b.weight(p + "embeddings.patch_embeddings.bias", (H,)))
    x = b.node("Conv", [pixels, w, pb], {"kernel_shape": [patch, patch], "strides": [patch, patch],
                                         "pads": [0] * 4, "dilations": [1, 1], "group": 1}, hint="patch")
    x = b.node("Reshape", [x, b.const("to_tokens", np.array([0, H, patches], np.int64))], hint="patch_tokens")
    x = b.node("Transpose", [x], {"perm": [0, 2, 1]}, hint="patch_rows")                     # [B, P, H]
    prefix_rows = b.weight(p + "embeddings.cls_token", (1, 1, H))
    if registers:
        prefix_rows = np.concatenate([prefix_rows, b.weight(p + "embeddings.register_tokens", (1, registers, H))], 1)
    batch = b.node("Gather", [b.node("Shape", [pixels], {"start": 0}, hint="pixel_shape", dtype=I64),
                              b.const("zero_index", np.array([0], np.int64))], {"axis": 0}, hint="batch", dtype=I64)
    prefix_shape = b.node("Concat", [batch, b.const("prefix_rest", np.array([prefix, H], np.int64))], {"axis": 0},
                          hint="prefix_shape", dtype=I64)
    x = b.node("Concat", [b.node("Expand", [b.const("prefix_tokens", prefix_rows), prefix_shape], hint="prefix"), x],
               {"axis": 1}, hint="tokens")
    cos, sin = rope_tables(config, height, width)
    cos = np.concatenate([np.ones((prefix, head_dim // 2), np.float32), cos])[None]      # [1, T, D / 2]
    sin = np.concatenate([np.zeros((prefix, head_dim // 2), np.float32), sin])[None]
    cos, sin = b.const("rope_cos", cos), b.const("rope_sin", sin)

    def norm(h: str, prefix_: str, hint: str) -> str:
        return b.node("LayerNormalization", [h, b.const(f"{hint}_w", b.weight(prefix_ + ".weight", (H,))),
                                             b.const(f"{hint}_b", b.weight(prefix_ + ".bias", (H,)))],
                      {"axis": -1, "epsilon": eps}, hint=hint)

    def rotate(t: str, hint: str) -> str:
        return b.node("RotaryEmbedding", [t, cos, sin], {"interleaved": False, "num_heads": heads,
                                                         "rotary_embedding_dim": head_dim}, hint=hint)

    def scaled(h: str, name: str, hint: str) -> str:
        return b.node("Mul", [h, b.const(f"{hint}_gamma", b.weight(name, (H,)))], hint=hint)

    for i in range(L):
        lp = f"{p}model.layer.{i}."   # DINOv3ViTModel's encoder is its `model` attribute
        if lp + "norm1.weight" not in weights:
            lp = f"{p}layer.{i}."
        h = norm(x, lp + "norm1", f"ln1_{i}")
        q = rotate(b.linear(h, lp + "attention.q_proj", f"q{i}", H, H), f"q_rope{i}")
        k = rotate(b.linear(h, lp + "attention.k_proj", f"k{i}", H, H), f"k_rope{i}")
        v = b.linear(h, lp + "attention.v_proj", f"v{i}", H, H)
        a = b.linear(b.mha([q, k, v], heads, f"attn{i}"), lp + "attention.o_proj", f"o{i}", H, H)
        x = b.node("Add", [x, scaled(a, lp + "layer_scale1.lambda1", f"ls1_{i}")], hint=f"res1_{i}")
        h = norm(x, lp + "norm2", f"ln2_{i}")
        if lp + "mlp.gate_proj.weight" in weights:   # gated MLP: act(gate) * up
            up = b.linear(h, lp + "mlp.up_proj", f"up{i}", H, inner)
            h = b.linear(h, lp + "mlp.gate_proj", f"gate{i}", H, inner, activation=act, multiplier=up)
        else:
            h = b.linear(h, lp + "mlp.up_proj", f"up{i}", H, inner, activation=act)
        h = b.linear(h, lp + "mlp.down_proj", f"down{i}", inner, H)
        x = b.node("Add", [x, scaled(h, lp + "layer_scale2.lambda1", f"ls2_{i}")], hint=f"res2_{i}")
    x = norm(x, p + "norm", "final_ln")
    pooled = b.node("Gather", [x, b.const("cls_index", np.array(0, np.int64))], {"axis": 1}, hint="cls_row")
    b.g.outputs.extend([b.rename(x, "last_hidden_state"), b.rename(pooled, "pooler_output")])
    b.g.metadata.update({"producer": "model_zoo.encoders.dinov3_graph", "architecture": "DINOv3ViT",
                         "image_size": f"{height}x{width}", "register_tokens": str(registers),
                         "weight_format": weight_format})
    return b.g
