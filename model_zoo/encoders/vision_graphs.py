"""Image classifiers built from their checkpoints' tensors (transformers' naming), already fused, in the converter's
IR: ViT (`ViTForImageClassification` / `ViTModel`: patch Conv, [CLS] and position embeddings, pre-LayerNorm blocks)
and ConvNeXt (`ConvNextForImageClassification` / `ConvNextModel`: 4x4 patchify stem, stages of 7x7 depthwise Conv,
channels-last LayerNorm, GELU MLP with layer scale, 2x2 downsampling). Input: pixel_values [batch, channels, height,
width] float32 (ViT: the config's image size, its position table is not interpolated). Outputs: logits when the
checkpoint has the classifier, and the pooled features (`pooler_output` / the [CLS] row)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, I64, GraphBuilder

_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}


def _act(config: Mapping) -> str:
    act = _ACT.get(config.get("hidden_act", "gelu"))
    if act is None:
        raise NotImplementedError(f"hidden_act {config.get('hidden_act')!r} is not supported")
    return act


def _layer_norm(b: GraphBuilder, x: str, prefix: str, size: int, eps: float, hint: str) -> str:
    return b.node("LayerNormalization", [x, b.const(f"{hint}_w", b.weight(prefix + ".weight", (size,))),
                                         b.const(f"{hint}_b", b.weight(prefix + ".bias", (size,)))],
                  {"axis": -1, "epsilon": eps}, hint=hint)


def _conv(b: GraphBuilder, x: str, prefix: str, shape: tuple[int, ...], hint: str, stride: int, pad: int = 0,
          group: int = 1) -> str:
    w = b.const(f"{hint}_w", b.weight(prefix + ".weight", shape))
    bias = b.const(f"{hint}_b", b.weight(prefix + ".bias", (shape[0],)))
    k = shape[2]
    return b.node("Conv", [x, w, bias], {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4,
                                         "dilations": [1, 1], "group": group}, hint=hint)


def _classifier(b: GraphBuilder, pooled: str, hidden: int, config: Mapping) -> str | None:
    if "classifier.weight" not in b.w:
        return None
    labels = b.w_shape("classifier.weight")[0]
    return b.linear(pooled, "classifier", "classifier", hidden, labels)


def build_vit_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                    group_size: int = 32, **_) -> Graph:
    H, L, heads = int(config["hidden_size"]), int(config["num_hidden_layers"]), int(config["num_attention_heads"])
    inner, patch = int(config["intermediate_size"]), int(config["patch_size"])
    image, channels = int(config["image_size"]), int(config.get("num_channels", 3))
    eps = float(config.get("layer_norm_eps", 1e-12))
    act = _act(config)
    if image % patch:
        raise ConverterError(f"image_size {image} is not a multiple of patch_size {patch}")
    patches = (image // patch) ** 2
    p = "vit." if "vit.embeddings.cls_token" in weights else ""
    b = GraphBuilder("vit", weights, weight_format, group_size)
    pixels = b.input("pixel_values", [-1, channels, image, image], F32)
    x = _conv(b, pixels, p + "embeddings.patch_embeddings.projection", (H, channels, patch, patch), "patch", patch)
    x = b.node("Reshape", [x, b.const("to_tokens", np.array([0, H, patches], np.int64))], hint="patch_tokens")
    x = b.node("Transpose", [x], {"perm": [0, 2, 1]}, hint="patch_rows")   # [B, P, H]
    batch = b.node("Gather", [b.node("Shape", [pixels], {"start": 0}, hint="pixel_shape", dtype=I64),
                              b.const("zero_index", np.array([0], np.int64))], {"axis": 0}, hint="batch", dtype=I64)
    cls_shape = b.node("Concat", [batch, b.const("cls_rest", np.array([1, H], np.int64))], {"axis": 0},
                       hint="cls_shape", dtype=I64)
    cls = b.node("Expand", [b.const("cls_token", b.weight(p + "embeddings.cls_token", (1, 1, H))), cls_shape],
                 hint="cls")
    x = b.node("Concat", [cls, x], {"axis": 1}, hint="tokens")
    x = b.node("Add", [x, b.const("position_embeddings", b.weight(p + "embeddings.position_embeddings",
                                                                  (1, patches + 1, H)))], hint="embeddings")
    for i in range(L):
        lp = f"{p}encoder.layer.{i}."
        h = _layer_norm(b, x, lp + "layernorm_before", H, eps, f"ln1_{i}")
        q = b.linear(h, lp + "attention.attention.query", f"q{i}", H, H)
        k = b.linear(h, lp + "attention.attention.key", f"k{i}", H, H)
        v = b.linear(h, lp + "attention.attention.value", f"v{i}", H, H)
        attn = b.mha([q, k, v], heads, f"attn{i}")
        x = b.linear(attn, lp + "attention.output.dense", f"o{i}", H, H, residual=x)
        h = _layer_norm(b, x, lp + "layernorm_after", H, eps, f"ln2_{i}")
        h = b.linear(h, lp + "intermediate.dense", f"up{i}", H, inner, activation=act)
        x = b.linear(h, lp + "output.dense", f"down{i}", inner, H, residual=x)
    x = _layer_norm(b, x, p + "layernorm", H, eps, "final_ln")
    pooled = b.node("Gather", [x, b.const("cls_index", np.array(0, np.int64))], {"axis": 1}, hint="cls_row")
    outputs = [b.rename(x, "last_hidden_state"), b.rename(pooled, "pooler_output")]
    logits = _classifier(b, "pooler_output", H, config)
    if logits is not None:
        outputs.append(b.rename(logits, "logits"))
    b.g.outputs.extend(outputs)
    b.g.metadata.update({"producer": "model_zoo.encoders.vision_graphs", "architecture": "ViT",
                         "image_size": str(image),
                         "weight_format": weight_format})
    return b.g


def build_convnext_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                         group_size: int = 32, **_) -> Graph:
    sizes, depths = [int(s) for s in config["hidden_sizes"]], [int(d) for d in config["depths"]]
    channels, patch = int(config.get("num_channels", 3)), int(config.get("patch_size", 4))
    eps = float(config.get("layer_norm_eps", 1e-12))
    act = _act(config)
    p = "convnext." if "convnext.embeddings.patch_embeddings.weight" in weights else ""
    b = GraphBuilder("convnext", weights, weight_format, group_size)
    pixels = b.input("pixel_values", [-1, channels, -1, -1], F32)

    def to_last(x, hint):
        return b.node("Transpose", [x], {"perm": [0, 2, 3, 1]}, hint=hint)

    def to_first(x, hint):
        return b.node("Transpose", [x], {"perm": [0, 3, 1, 2]}, hint=hint)

    def channels_first_norm(x, prefix, size, hint):
        return to_first(_layer_norm(b, to_last(x, f"{hint}_nhwc"), prefix, size, 1e-6, hint), f"{hint}_nchw")

    x = _conv(b, pixels, p + "embeddings.patch_embeddings", (sizes[0], channels, patch, patch), "stem", patch)
    x = channels_first_norm(x, p + "embeddings.layernorm", sizes[0], "stem_ln")
    for s, (c, depth) in enumerate(zip(sizes, depths)):
        sp = f"{p}encoder.stages.{s}."
        if s > 0:
            x = channels_first_norm(x, sp + "downsampling_layer.0", sizes[s - 1], f"down_ln{s}")
            x = _conv(b, x, sp + "downsampling_layer.1", (c, sizes[s - 1], 2, 2), f"down{s}", 2)
        for j in range(depth):
            lp, tag = f"{sp}layers.{j}.", f"{s}_{j}"
            h = _conv(b, x, lp + "dwconv", (c, 1, 7, 7), f"dw{tag}", 1, pad=3, group=c)
            h = _layer_norm(b, to_last(h, f"nhwc{tag}"), lp + "layernorm", c, 1e-6, f"ln{tag}")
            h = b.linear(h, lp + "pwconv1", f"pw1_{tag}", c, 4 * c, activation=act)
            h = b.linear(h, lp + "pwconv2", f"pw2_{tag}", 4 * c, c)
            if lp + "layer_scale_parameter" in b.w:
                h = b.node("Mul", [h, b.const(f"gamma{tag}", b.weight(lp + "layer_scale_parameter", (c,)))],
                           hint=f"scaled{tag}")
            x = b.node("Add", [x, to_first(h, f"nchw{tag}")], hint=f"res{tag}")
    pooled = b.node("ReduceMean", [x, b.const("spatial_axes", np.array([2, 3], np.int64))], {"keepdims": 0},
                    hint="pooled")
    pooled = _layer_norm(b, pooled, p + "layernorm", sizes[-1], eps, "final_ln")
    outputs = [b.rename(pooled, "pooler_output")]
    logits = _classifier(b, "pooler_output", sizes[-1], config)
    if logits is not None:
        outputs.append(b.rename(logits, "logits"))
    b.g.outputs.extend(outputs)
    b.g.metadata.update({"producer": "model_zoo.encoders.vision_graphs", "architecture": "ConvNeXt",
                         "weight_format": weight_format})
    return b.g
