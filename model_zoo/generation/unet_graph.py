"""Stable Diffusion's UNet (diffusers `UNet2DConditionModel`: SD 1.x, 2.x and XL) built from its checkpoint's
tensors, in the converter's IR, for one latent size.

Inputs: `sample` [batch, in_channels, height, width] (already scaled by the scheduler), `timestep` [batch],
`encoder_hidden_states` [batch, text_len, cross_attention_dim]; SDXL ("text_time" conditioning) also `text_embeds`
[batch, pooled_dim] and `time_ids` [batch, 6]. Output: `prediction` [batch, out_channels, height, width] (noise or
v, as the scheduler's prediction_type says).

Graph: the sinusoidal time embedding (flip_sin_to_cos, freq_shift) through its MLP (plus SDXL's embedding of the
pooled text and the six size / crop numbers), conv_in, down blocks (ResNets with the time embedding added after
their first conv, spatial transformers, strided-conv downsamplers), the mid block, up blocks (the skip concatenated on
channels, nearest 2x + conv upsamplers), GroupNorm, SiLU, conv_out. A spatial transformer: GroupNorm, proj_in (1x1
conv, or linear on the tokens with use_linear_projection), blocks of LayerNorm + self-attention, LayerNorm +
cross-attention to the text, LayerNorm + GEGLU feed-forward, then proj_out and the residual."""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from converter.ir import ConverterError, Graph

from ..encoders.clip_text_graph import clip_layer_norm
from ..graph_builder import F32
from .vae_kl_graph import _KLDecoderBuilder

_DOWN = {"CrossAttnDownBlock2D": True, "DownBlock2D": False}
_UP = {"CrossAttnUpBlock2D": True, "UpBlock2D": False}
# the config values the builder implements: any other value of these keys is refused by name
_BUILT_VALUES = dict(time_embedding_type="positional", resnet_time_scale_shift="default", class_embed_type=None,
                     only_cross_attention=False, dual_cross_attention=False, encoder_hid_dim_type=None,
                     time_cond_proj_dim=None, conv_in_kernel=3, conv_out_kernel=3, act_fn="silu",
                     mid_block_type="UNetMidBlock2DCrossAttn", attention_type="default",
                     class_embeddings_concat=False, cross_attention_norm=None, mid_block_scale_factor=1)


def sinusoid_frequencies(dim: int, shift: float) -> np.ndarray:
    """diffusers Timesteps' frequencies: exp(-ln(10000) i / (half - downscale_freq_shift)), in float32."""
    half = dim // 2
    exponent = (-math.log(10000.0) * np.arange(half, dtype=np.float32)) / np.float32(half - shift)
    return np.exp(exponent).astype(F32).reshape(1, half)


def _per_block(value, blocks: int, name: str) -> list[int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * blocks
    if len(values) != blocks:
        raise ConverterError(f"UNet {name} has {len(values)} entries for {blocks} blocks")
    return [int(v) for v in values]


class _UNetBuilder(_KLDecoderBuilder):
    def __init__(self, config: Mapping, weights, weight_format: str, group_size: int):
        super().__init__(weights, int(config.get("norm_num_groups", 32)))
        self.g.name = "unet"
        self.weight_format, self.group_size = weight_format, group_size
        self.eps = float(config.get("norm_eps", 1e-5))
        self.linear_projection = bool(config.get("use_linear_projection", False))
        self.cross_dim = int(config["cross_attention_dim"])

    def conv_weight(self, prefix: str, c_in: int, c_out: int, k: int, hint: str) -> str:
        """A convolution's weight in the weight format (int8: a scale per output channel; int4: blocks along the
        input channels), decoded to float32 by the runtime at load."""
        if self.weight_format == "float32":
            return self.const(f"{hint}_w", self.weight(prefix + ".weight", (c_out, c_in, k, k)))
        return self.stored(f"{hint}_w", self.source(prefix + ".weight", (c_out, c_in, k, k)), reduce_axis=1)

    def conv(self, x: str, prefix: str, c_in: int, c_out: int, k: int, hint: str, stride: int = 1) -> str:
        b = self.const(f"{hint}_b", self.weight(prefix + ".bias", (c_out,)))
        return self.node("Conv", [x, self.conv_weight(prefix, c_in, c_out, k, hint), b],
                         {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [k // 2] * 4,
                          "dilations": [1, 1], "group": 1}, hint=hint)

    def sinusoid(self, t: str, dim: int, flip: bool, shift: float, hint: str) -> str:
        """[N] -> [N, dim]: diffusers Timesteps ([cos, sin] when flip_sin_to_cos)."""
        col = self.node("Unsqueeze", [t, self.i64(f"{hint}_axis", [1])], hint=f"{hint}_col")
        angle = self.node("Mul", [col, self.const(f"{hint}_freqs", sinusoid_frequencies(dim, shift))],
                          hint=f"{hint}_angle")
        parts = [self.node("Sin", [angle], hint=f"{hint}_sin"), self.node("Cos", [angle], hint=f"{hint}_cos")]
        return self.node("Concat", parts[::-1] if flip else parts, {"axis": -1}, hint=hint)

    def resnet_t(self, x: str, prefix: str, c_in: int, c_out: int, temb_act: str, temb_dim: int, hint: str) -> str:
        """ResnetBlock2D with the time embedding: SiLU(temb) projected and added after the first conv."""
        h = self.silu(self.group_norm(x, prefix + ".norm1", c_in, f"{hint}_n1", self.eps), f"{hint}_a1")
        h = self.conv(h, prefix + ".conv1", c_in, c_out, 3, f"{hint}_c1")
        t = self.linear(temb_act, prefix + ".time_emb_proj", f"{hint}_t", temb_dim, c_out)
        t = self.node("Unsqueeze", [t, self.i64(f"{hint}_t_axes", [2, 3])], hint=f"{hint}_t_col")
        h = self.node("Add", [h, t], hint=f"{hint}_ht")
        h = self.silu(self.group_norm(h, prefix + ".norm2", c_out, f"{hint}_n2", self.eps), f"{hint}_a2")
        h = self.conv(h, prefix + ".conv2", c_out, c_out, 3, f"{hint}_c2")
        short = x if c_in == c_out else self.conv(x, prefix + ".conv_shortcut", c_in, c_out, 1, f"{hint}_short")
        return self.node("Add", [h, short], hint=f"{hint}_out")

    def conv1x1(self, x: str, prefix: str, c: int, hint: str) -> str:
        return self.conv(x, prefix, c, c, 1, hint)

    def attention(self, q_in: str, kv_in: str, prefix: str, c: int, kv_dim: int, heads: int, residual: str,
                  hint: str) -> str:
        q = self.linear(q_in, prefix + ".to_q", f"{hint}_q", c, c)
        k = self.linear(kv_in, prefix + ".to_k", f"{hint}_k", kv_dim, c)
        v = self.linear(kv_in, prefix + ".to_v", f"{hint}_v", kv_dim, c)
        a = self.mha([q, k, v], heads, f"{hint}_attn")
        return self.linear(a, prefix + ".to_out.0", f"{hint}_o", c, c, residual=residual)

    def spatial_transformer(self, x: str, prefix: str, c: int, heads: int, layers: int, hw: tuple[int, int],
                            text: str, hint: str) -> str:
        if c % heads:
            raise ConverterError(f"{prefix}: {c} channels do not split into {heads} heads")
        h = self.group_norm(x, prefix + ".norm", c, f"{hint}_gn", 1e-6)
        if not self.linear_projection:
            h = self.conv1x1(h, prefix + ".proj_in", c, f"{hint}_proj_in")
        tokens = self.node("Transpose", [self.node("Reshape", [h, self.i64(f"{hint}_flat", [0, c, hw[0] * hw[1]])],
                                                   hint=f"{hint}_flat")], {"perm": [0, 2, 1]}, hint=f"{hint}_tokens")
        if self.linear_projection:
            tokens = self.linear(tokens, prefix + ".proj_in", f"{hint}_proj_in", c, c)
        for k in range(layers):
            bp, bh = f"{prefix}.transformer_blocks.{k}", f"{hint}_b{k}"
            n = clip_layer_norm(self, tokens, bp + ".norm1", c, 1e-5, f"{bh}_ln1")
            tokens = self.attention(n, n, bp + ".attn1", c, c, heads, tokens, f"{bh}_self")
            n = clip_layer_norm(self, tokens, bp + ".norm2", c, 1e-5, f"{bh}_ln2")
            tokens = self.attention(n, text, bp + ".attn2", c, self.cross_dim, heads, tokens, f"{bh}_cross")
            n = clip_layer_norm(self, tokens, bp + ".norm3", c, 1e-5, f"{bh}_ln3")
            inner = self.w_shape(bp + ".ff.net.0.proj.weight")[0] // 2   # GEGLU: hidden, then gate rows
            gate = self.rows_linear(n, bp + ".ff.net.0.proj", f"{bh}_gate", c, 2 * inner,
                                    np.arange(inner, 2 * inner), activation="gelu")
            hidden = self.rows_linear(n, bp + ".ff.net.0.proj", f"{bh}_geglu", c, 2 * inner, np.arange(inner),
                                      multiplier=gate)
            tokens = self.linear(hidden, bp + ".ff.net.2", f"{bh}_ff_out", inner, c, residual=tokens)
        if self.linear_projection:
            tokens = self.linear(tokens, prefix + ".proj_out", f"{hint}_proj_out", c, c)
        img = self.node("Reshape", [self.node("Transpose", [tokens], {"perm": [0, 2, 1]}, hint=f"{hint}_cols"),
                                    self.i64(f"{hint}_img", [0, c, hw[0], hw[1]])], hint=f"{hint}_img")
        if not self.linear_projection:
            img = self.conv1x1(img, prefix + ".proj_out", c, f"{hint}_proj_out")
        return self.node("Add", [img, x], hint=f"{hint}_res")

    def strided_conv(self, x: str, prefix: str, c: int, hint: str) -> str:
        return self.conv(x, prefix, c, c, 3, hint, stride=2)


def _check_supported(config: Mapping) -> None:
    for key, built in _BUILT_VALUES.items():
        if config.get(key, built) != built:
            raise NotImplementedError(f"UNet2DConditionModel {key}={config.get(key)!r} is not built "
                                      f"(built: {built!r})")
    if config.get("addition_embed_type") not in (None, "text_time"):
        raise NotImplementedError(f"UNet addition_embed_type {config.get('addition_embed_type')!r} "
                                  "(built: none, text_time)")
    bad = [t for t in config.get("down_block_types", []) if t not in _DOWN]
    bad += [t for t in config.get("up_block_types", []) if t not in _UP]
    if bad:
        raise NotImplementedError(f"UNet blocks {bad} are not built (built: {', '.join([*_DOWN, *_UP])})")


def build_unet_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                     group_size: int = 32, latent_shape: Sequence[int] | None = None, text_len: int | None = None,
                     **_) -> Graph:
    """`latent_shape`: ([frames,] height, width) of the latents; the graph takes any batch and any text length."""
    _check_supported(config)
    if latent_shape is None:
        raise ConverterError("the UNet needs the latent size it denoises (latent_shape / --latentShape)")
    hw = tuple(int(v) for v in tuple(latent_shape)[-2:])
    down_types, up_types = list(config["down_block_types"]), list(config["up_block_types"])
    n = len(down_types)
    if len(up_types) != n:
        raise ConverterError(f"UNet has {n} down blocks but {len(up_types)} up blocks")
    if hw[0] % 2 ** (n - 1) or hw[1] % 2 ** (n - 1):
        raise ConverterError(f"a {hw[0]}x{hw[1]} latent does not halve {n - 1} times (the UNet's downsamplers)")
    channels = [int(c) for c in config.get("block_out_channels", [320, 640, 1280, 1280])]
    heads = _per_block(config.get("num_attention_heads") or config.get("attention_head_dim", 8), n,
                       "attention heads")
    t_layers = _per_block(config.get("transformer_layers_per_block", 1), n, "transformer_layers_per_block")
    res_layers = _per_block(config.get("layers_per_block", 2), n, "layers_per_block")
    in_c, out_c = int(config.get("in_channels", 4)), int(config.get("out_channels", 4))
    b = _UNetBuilder(config, weights, weight_format, group_size)

    x = b.input("sample", [-1, in_c, *hw], F32)
    t_in = b.input("timestep", [-1], F32)
    text = b.input("encoder_hidden_states", [-1, -1 if text_len is None else int(text_len), b.cross_dim], F32)
    flip, shift = bool(config.get("flip_sin_to_cos", True)), float(config.get("freq_shift", 0))
    temb_dim = b.w_shape("time_embedding.linear_1.weight")[0]
    t = b.sinusoid(t_in, channels[0], flip, shift, "t_sinusoid")
    t = b.linear(t, "time_embedding.linear_1", "time_1", channels[0], temb_dim, activation="silu")
    temb = b.linear(t, "time_embedding.linear_2", "time_2", temb_dim, temb_dim)
    if config.get("addition_embed_type") == "text_time":   # SDXL: pooled text + (size, crop, target size)
        time_dim = int(config.get("addition_time_embed_dim", 256))
        pooled_dim = int(config["projection_class_embeddings_input_dim"]) - 6 * time_dim
        pooled = b.input("text_embeds", [-1, pooled_dim], F32)
        ids = b.input("time_ids", [-1, 6], F32)
        flat = b.node("Reshape", [ids, b.i64("ids_flat", [-1])], hint="ids_flat")
        ids_emb = b.sinusoid(flat, time_dim, flip, shift, "ids_sinusoid")
        ids_emb = b.node("Reshape", [ids_emb, b.i64("ids_rows", [-1, 6 * time_dim])], hint="ids_rows")
        add = b.node("Concat", [pooled, ids_emb], {"axis": -1}, hint="add_in")
        add_dim = pooled_dim + 6 * time_dim
        add = b.linear(add, "add_embedding.linear_1", "add_1", add_dim, temb_dim, activation="silu")
        temb = b.linear(add, "add_embedding.linear_2", "add_2", temb_dim, temb_dim, residual=temb)
    temb_act = b.silu(temb, "temb_silu")

    x = b.conv(x, "conv_in", in_c, channels[0], 3, "conv_in")
    skips, c = [(x, channels[0])], channels[0]
    for i, kind in enumerate(down_types):
        for j in range(res_layers[i]):
            x = b.resnet_t(x, f"down_blocks.{i}.resnets.{j}", c, channels[i], temb_act, temb_dim, f"d{i}_{j}")
            c = channels[i]
            if _DOWN[kind]:
                x = b.spatial_transformer(x, f"down_blocks.{i}.attentions.{j}", c, heads[i], t_layers[i], hw, text,
                                          f"d{i}_{j}_tf")
            skips.append((x, c))
        if i < n - 1:
            x = b.strided_conv(x, f"down_blocks.{i}.downsamplers.0.conv", c, f"d{i}_down")
            hw = (hw[0] // 2, hw[1] // 2)
            skips.append((x, c))
    x = b.resnet_t(x, "mid_block.resnets.0", c, c, temb_act, temb_dim, "mid0")
    x = b.spatial_transformer(x, "mid_block.attentions.0", c, heads[-1], t_layers[-1], hw, text, "mid_tf")
    x = b.resnet_t(x, "mid_block.resnets.1", c, c, temb_act, temb_dim, "mid1")
    up_heads, up_t_layers = heads[::-1], config.get("reverse_transformer_layers_per_block") or t_layers[::-1]
    up_t_layers = _per_block(up_t_layers, n, "reverse_transformer_layers_per_block")
    for i, kind in enumerate(up_types):
        c_out = channels[::-1][i]
        for j in range(res_layers[::-1][i] + 1):
            skip, skip_c = skips.pop()
            x = b.node("Concat", [x, skip], {"axis": 1}, hint=f"u{i}_{j}_cat")
            x = b.resnet_t(x, f"up_blocks.{i}.resnets.{j}", c + skip_c, c_out, temb_act, temb_dim, f"u{i}_{j}")
            c = c_out
            if _UP[kind]:
                x = b.spatial_transformer(x, f"up_blocks.{i}.attentions.{j}", c, up_heads[i], up_t_layers[i], hw,
                                          text, f"u{i}_{j}_tf")
        if i < n - 1:
            x = b.node("Resize", [x, "", b.const(f"u{i}_scales", np.array([1, 1, 2, 2], F32))],
                       {"mode": 0, "coordinate_transform": 4, "nearest_mode": 2}, hint=f"u{i}_nearest")
            hw = (2 * hw[0], 2 * hw[1])
            x = b.conv(x, f"up_blocks.{i}.upsamplers.0.conv", c, c, 3, f"u{i}_up")
    x = b.silu(b.group_norm(x, "conv_norm_out", c, "norm_out", b.eps), "out_act")
    b.g.outputs.append(b.rename(b.conv(x, "conv_out", c, out_c, 3, "conv_out"), "prediction"))
    b.g.metadata.update({"producer": "model_zoo.generation.unet_graph", "architecture": "UNet2DConditionModel",
                         "latent_hw": f"{hw[0]},{hw[1]}", "weight_format": weight_format})
    return b.g
