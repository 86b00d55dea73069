"""The image VAE decoder of Stable Diffusion and FLUX (diffusers `AutoencoderKL`) built from its checkpoint's tensors,
in the converter's IR; head "vae_encoder" builds its encoder instead (image to image: `images` [batch, in_channels,
H, W] in [-1, 1] -> `moments` [batch, 2 latent_channels, H / 2^(blocks - 1), W / 2^(blocks - 1)], the posterior's
mean then log-variance: down blocks of ResNets with stride-2 3x3 Conv downsamplers padded right and bottom only, as
diffusers' Downsample2D pads, the mid block, GroupNorm, SiLU, conv_out and quant_conv where the checkpoint has one).

Input: `latents` [batch, latent_channels, height, width], already scaled back (latents / scaling_factor +
shift_factor, as the pipelines do before decode). Output: `images` [batch, out_channels, 8 height, 8 width]
(2^(blocks - 1) x), not clamped (the pipelines' post-processing clamps). Graph: post_quant_conv (where the checkpoint
has one), conv_in, the mid block (ResNet, one-head attention over the pixels, ResNet), the up blocks (ResNets with
GroupNorm + SiLU, nearest 2x + 3x3 Conv upsamplers), GroupNorm, SiLU, conv_out."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, GraphBuilder


class _KLDecoderBuilder(GraphBuilder):
    def __init__(self, weights, groups: int):
        super().__init__("vae_kl_decoder", weights)
        self.groups = groups

    def i64(self, hint: str, values) -> str:
        return self.const(hint, np.array(values, np.int64))

    def conv(self, x: str, prefix: str, c_in: int, c_out: int, k: int, hint: str, stride: int = 1,
             pads: Sequence[int] | None = None) -> str:
        w = self.const(f"{hint}_w", self.weight(prefix + ".weight", (c_out, c_in, k, k)))
        b = self.const(f"{hint}_b", self.weight(prefix + ".bias", (c_out,)))
        return self.node("Conv", [x, w, b], {"kernel_shape": [k, k], "strides": [stride, stride],
                                             "pads": list(pads) if pads is not None else [k // 2] * 4,
                                             "dilations": [1, 1], "group": 1}, hint=hint)

    def group_norm(self, x: str, prefix: str, c: int, hint: str, eps: float = 1e-6) -> str:
        if c % self.groups:
            raise ConverterError(f"{prefix}: {c} channels do not split into {self.groups} groups")
        return self.node("GroupNormalization", [x, self.const(f"{hint}_w", self.weight(prefix + ".weight", (c,))),
                                                self.const(f"{hint}_b", self.weight(prefix + ".bias", (c,)))],
                         {"num_groups": self.groups, "epsilon": eps}, hint=hint)

    def silu(self, x: str, hint: str) -> str:
        return self.node("Mul", [x, self.node("Sigmoid", [x], hint=f"{hint}_sig")], hint=hint)

    def resnet(self, x: str, prefix: str, c_in: int, c_out: int, hint: str) -> str:
        h = self.silu(self.group_norm(x, prefix + ".norm1", c_in, f"{hint}_n1"), f"{hint}_a1")
        h = self.conv(h, prefix + ".conv1", c_in, c_out, 3, f"{hint}_c1")
        h = self.silu(self.group_norm(h, prefix + ".norm2", c_out, f"{hint}_n2"), f"{hint}_a2")
        h = self.conv(h, prefix + ".conv2", c_out, c_out, 3, f"{hint}_c2")
        short = x if c_in == c_out else self.conv(x, prefix + ".conv_shortcut", c_in, c_out, 1, f"{hint}_short")
        return self.node("Add", [h, short], hint=f"{hint}_out")

    def attention(self, x: str, prefix: str, c: int, hw: tuple[int, int], hint: str) -> str:
        """One head over the pixels (diffusers Attention with heads = 1, residual, rescale 1)."""
        h = self.group_norm(x, prefix + ".group_norm", c, f"{hint}_n")
        rows = self.node("Transpose", [self.node("Reshape", [h, self.i64(f"{hint}_flat", [0, c, hw[0] * hw[1]])],
                                                 hint=f"{hint}_flat")], {"perm": [0, 2, 1]}, hint=f"{hint}_rows")
        q, k, v = (self.linear(rows, f"{prefix}.to_{n}", f"{hint}_{n}", c, c) for n in "qkv")
        a = self.mha([q, k, v], 1, f"{hint}_attn")
        a = self.linear(a, prefix + ".to_out.0", f"{hint}_o", c, c)
        a = self.node("Reshape", [self.node("Transpose", [a], {"perm": [0, 2, 1]}, hint=f"{hint}_cols"),
                                  self.i64(f"{hint}_img", [0, c, hw[0], hw[1]])], hint=f"{hint}_img")
        return self.node("Add", [a, x], hint=f"{hint}_res")


def _checked(config: Mapping, kinds: str, default: str, blocks: int) -> None:
    if config.get("act_fn", "silu") != "silu":
        raise NotImplementedError(f"AutoencoderKL act_fn {config.get('act_fn')!r} (built: silu)")
    if any(t != default for t in config.get(kinds, [default] * blocks)):
        raise NotImplementedError(f"AutoencoderKL {kinds} {config.get(kinds)} (built: {default})")


def build_vae_kl_encoder_graph(config: Mapping, weights: Mapping[str, np.ndarray],
                               latent_shape: Sequence[int] | None = None) -> Graph:
    """The encoder for images whose latent is `latent_shape` ([frames,] height, width); any batch."""
    blocks = [int(c) for c in config.get("block_out_channels", [128, 256, 512, 512])]
    layers = int(config.get("layers_per_block", 2))
    z, in_channels = int(config.get("latent_channels", 4)), int(config.get("in_channels", 3))
    _checked(config, "down_block_types", "DownEncoderBlock2D", len(blocks))
    if latent_shape is None:
        raise ConverterError("the VAE encoder needs the latent size it encodes to (latent_shape / --latentShape)")
    if not config.get("double_z", True):
        raise NotImplementedError("AutoencoderKL with double_z false (no posterior variance)")
    b = _KLDecoderBuilder(weights, int(config.get("norm_num_groups", 32)))
    b.g.name = "vae_kl_encoder"
    lh, lw = (int(v) for v in tuple(latent_shape)[-2:])
    hw = (lh << (len(blocks) - 1), lw << (len(blocks) - 1))
    x = b.input("images", [-1, in_channels, *hw], F32)
    x = b.conv(x, "encoder.conv_in", in_channels, blocks[0], 3, "conv_in")
    c = blocks[0]
    for i, c_out in enumerate(blocks):
        for j in range(layers):
            x = b.resnet(x, f"encoder.down_blocks.{i}.resnets.{j}", c, c_out, f"down{i}_{j}")
            c = c_out
        if i != len(blocks) - 1:   # F.pad(0, 1, 0, 1) then a stride-2 valid convolution
            x = b.conv(x, f"encoder.down_blocks.{i}.downsamplers.0.conv", c, c, 3, f"down{i}_conv", stride=2,
                       pads=[0, 0, 1, 1])
            hw = (hw[0] // 2, hw[1] // 2)
    x = b.resnet(x, "encoder.mid_block.resnets.0", c, c, "mid0")
    if config.get("mid_block_add_attention", True):
        x = b.attention(x, "encoder.mid_block.attentions.0", c, hw, "mid_attn")
    x = b.resnet(x, "encoder.mid_block.resnets.1", c, c, "mid1")
    x = b.silu(b.group_norm(x, "encoder.conv_norm_out", c, "norm_out"), "out_act")
    x = b.conv(x, "encoder.conv_out", c, 2 * z, 3, "conv_out")
    if config.get("use_quant_conv", True) and "quant_conv.weight" in b.w:
        x = b.conv(x, "quant_conv", 2 * z, 2 * z, 1, "quant")
    b.g.outputs.append(b.rename(x, "moments"))
    b.g.metadata.update({"producer": "model_zoo.generation.vae_kl_graph", "architecture": "AutoencoderKL encoder",
                         "latent_hw": f"{lh},{lw}"})
    return b.g


def build_vae_kl_graph(config: Mapping, weights: Mapping[str, np.ndarray], latent_shape: Sequence[int] | None = None,
                       head: str | None = None, **_) -> Graph:
    """The registry's AutoencoderKL builder: head None / "vae_decoder" the decoder, "vae_encoder" the encoder."""
    if head in (None, "vae_decoder"):
        return build_vae_kl_decoder_graph(config, weights, latent_shape)
    if head == "vae_encoder":
        return build_vae_kl_encoder_graph(config, weights, latent_shape)
    raise ValueError(f"AutoencoderKL head {head!r} (built: vae_decoder, vae_encoder)")


def build_vae_kl_decoder_graph(config: Mapping, weights: Mapping[str, np.ndarray],
                               latent_shape: Sequence[int] | None = None, **_) -> Graph:
    """`latent_shape`: ([frames,] height, width) of the latents; the graph takes any batch."""
    blocks = [int(c) for c in config.get("block_out_channels", [128, 256, 512, 512])]
    layers = int(config.get("layers_per_block", 2))
    z, out_channels = int(config.get("latent_channels", 4)), int(config.get("out_channels", 3))
    groups = int(config.get("norm_num_groups", 32))
    _checked(config, "up_block_types", "UpDecoderBlock2D", len(blocks))
    if latent_shape is None:
        raise ConverterError("the VAE decoder needs the latent size it decodes (latent_shape / --latentShape)")
    hw = tuple(int(v) for v in tuple(latent_shape)[-2:])
    b = _KLDecoderBuilder(weights, groups)
    x = b.input("latents", [-1, z, *hw], F32)
    if config.get("use_post_quant_conv", True) and "post_quant_conv.weight" in b.w:
        x = b.conv(x, "post_quant_conv", z, z, 1, "post_quant")
    top = blocks[-1]
    x = b.conv(x, "decoder.conv_in", z, top, 3, "conv_in")
    x = b.resnet(x, "decoder.mid_block.resnets.0", top, top, "mid0")
    if config.get("mid_block_add_attention", True):
        x = b.attention(x, "decoder.mid_block.attentions.0", top, hw, "mid_attn")
    x = b.resnet(x, "decoder.mid_block.resnets.1", top, top, "mid1")
    reversed_blocks = blocks[::-1]
    c = top
    for i, c_out in enumerate(reversed_blocks):
        for j in range(layers + 1):
            x = b.resnet(x, f"decoder.up_blocks.{i}.resnets.{j}", c, c_out, f"up{i}_{j}")
            c = c_out
        if i != len(blocks) - 1:
            x = b.node("Resize", [x, "", b.const(f"up{i}_scales", np.array([1, 1, 2, 2], F32))],
                       {"mode": 0, "coordinate_transform": 4, "nearest_mode": 2}, hint=f"up{i}_nearest")
            hw = (2 * hw[0], 2 * hw[1])
            x = b.conv(x, f"decoder.up_blocks.{i}.upsamplers.0.conv", c, c, 3, f"up{i}_conv")
    x = b.silu(b.group_norm(x, "decoder.conv_norm_out", c, "norm_out"), "out_act")
    x = b.rename(b.conv(x, "decoder.conv_out", c, out_channels, 3, "conv_out"), "images")
    b.g.outputs.append(x)
    b.g.metadata.update({"producer": "model_zoo.generation.vae_kl_graph", "architecture": "AutoencoderKL decoder",
                         "latent_hw": f"{hw[0] >> (len(blocks) - 1)},{hw[1] >> (len(blocks) - 1)}"})
    return b.g
