"""The HunyuanVideo VAE decoder (diffusers `AutoencoderKLHunyuanVideo`, Kandinsky 5 Video Lite's VAE) built from its
checkpoint's tensors, in the converter's IR, for one latent clip size: diffusers decodes a long latent in temporal
tiles (5 latent frames, a stride of 3, the overlap blended: `_temporal_tiled_decode`), each tile through the whole
decoder on its own, so the runtime builds one graph per tile length the video needs and blends the same way
(lite.diffusion.kandinsky5).

Input: `latents` [batch, latent_channels, frames, height, width], already divided by scaling_factor. Output: `video`
[batch, out_channels, 4 (frames - 1) + 1, 8 height, 8 width], not clamped. Every convolution is causal in time
(2 leading frames, 1 row / column each side, all padded by replicating the edge: pad_mode "replicate"); GroupNorm
normalises each group over all of the clip's frames; the mid block's one-head attention is causal by frames (a token
sees its own and earlier frames: the graph attends frame by frame over the growing prefix instead of building an
S x S mask); an upsampler repeats the first frame only in space and the others in time and space (nearest)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32
from .vae_kl_graph import _KLDecoderBuilder

_EDGE = 2   # PadMode EDGE: replicate


class _HunyuanDecoderBuilder(_KLDecoderBuilder):
    """The AutoencoderKL builder's GroupNorm, SiLU and ResNet with causal 3-D convolutions (`conv`)."""

    def __init__(self, weights, groups: int, shape: tuple[int, int, int]):
        super().__init__(weights, groups)
        self.g.name = "hunyuan_video_vae_decoder"
        self.frames, self.height, self.width = shape

    def conv(self, x: str, prefix: str, c_in: int, c_out: int, k: int, hint: str,
             strides: Sequence[int] = (1, 1, 1)) -> str:
        """HunyuanVideoCausalConv3d `prefix` (its nn.Conv3d is `prefix`.conv)."""
        w = self.const(f"{hint}_w", self.weight(prefix + ".conv.weight", (c_out, c_in, k, k, k)))
        b = self.const(f"{hint}_b", self.weight(prefix + ".conv.bias", (c_out,)))
        if k > 1:   # time: k - 1 in front; rows / columns: k // 2 each side; all replicated
            p = k // 2
            x = self.node("Pad", [x, self.i64(f"{hint}_pads", [0, 0, k - 1, p, p, 0, 0, 0, p, p])], {"mode": _EDGE},
                          hint=f"{hint}_pad")
        return self.node("Conv", [x, w, b], {"kernel_shape": [k, k, k], "strides": list(strides), "pads": [0] * 6,
                                             "dilations": [1, 1, 1], "group": 1}, hint=hint)

    def causal_attention(self, x: str, prefix: str, c: int, hint: str) -> str:
        """diffusers Attention (one head of width c, GroupNorm first, residual) over the clip's tokens (frames, rows,
        columns), each frame's queries attending to the keys of that frame and the ones before."""
        hw = self.height * self.width
        h = self.group_norm(x, prefix + ".group_norm", c, f"{hint}_n")
        rows = self.node("Transpose", [self.node("Reshape", [h, self.i64(f"{hint}_flat", [0, c, -1])],
                                                 hint=f"{hint}_flat")], {"perm": [0, 2, 1]}, hint=f"{hint}_rows")
        q, k, v = (self.linear(rows, f"{prefix}.to_{n}", f"{hint}_{n}", c, c) for n in "qkv")
        axis = self.i64(f"{hint}_axis", [1])
        outs = []
        for f in range(self.frames):
            def cut(t, start, end, name):
                return self.node("Slice", [t, self.i64(f"{hint}_{name}{f}s", [start]), self.i64(f"{hint}_{name}{f}e",
                                                                                                [end]), axis],
                                 hint=f"{hint}_{name}{f}")
            prefix_end = (f + 1) * hw
            outs.append(self.mha([cut(q, f * hw, prefix_end, "q"), cut(k, 0, prefix_end, "k"),
                                  cut(v, 0, prefix_end, "v")], 1, f"{hint}_attn{f}"))
        a = outs[0] if len(outs) == 1 else self.node("Concat", outs, {"axis": 1}, hint=f"{hint}_frames")
        a = self.linear(a, prefix + ".to_out.0", f"{hint}_o", c, c)
        a = self.node("Reshape", [self.node("Transpose", [a], {"perm": [0, 2, 1]}, hint=f"{hint}_cols"),
                                  self.i64(f"{hint}_5d", [0, c, self.frames, self.height, self.width])],
                      hint=f"{hint}_5d")
        return self.node("Add", [a, x], hint=f"{hint}_res")

    def upsample(self, x: str, prefix: str, c: int, temporal: bool, hint: str) -> str:
        """Nearest 2x in space for every frame, and 2x in time for all but the first; then a causal conv."""
        space = self.const(f"{hint}_s", np.array([1, 1, 1, 2, 2], F32))
        nearest = {"mode": 0, "coordinate_transform": 4, "nearest_mode": 2}   # nearest, asymmetric, floor
        if temporal and self.frames > 1:
            axis = self.i64(f"{hint}_t", [2])
            first = self.node("Slice", [x, self.i64(f"{hint}_f0", [0]), self.i64(f"{hint}_f1", [1]), axis],
                              hint=f"{hint}_first")
            rest = self.node("Slice", [x, self.i64(f"{hint}_r0", [1]), self.i64(f"{hint}_r1", [self.frames]), axis],
                             hint=f"{hint}_rest")
            first = self.node("Resize", [first, "", space], nearest, hint=f"{hint}_first_up")
            rest = self.node("Resize", [rest, "", self.const(f"{hint}_st", np.array([1, 1, 2, 2, 2], F32))], nearest,
                             hint=f"{hint}_rest_up")
            x = self.node("Concat", [first, rest], {"axis": 2}, hint=f"{hint}_up")
            self.frames = 2 * self.frames - 1
        else:
            x = self.node("Resize", [x, "", space], nearest, hint=f"{hint}_up")
        self.height, self.width = 2 * self.height, 2 * self.width
        return self.conv(x, prefix + ".conv", c, c, 3, f"{hint}_conv")


def _check_config(config: Mapping) -> tuple[list[int], int, int, int, int]:
    """(block_out_channels, layers_per_block, latent_channels, spatial and temporal compression) of a config the
    builders cover."""
    blocks = [int(c) for c in config.get("block_out_channels", [128, 256, 512, 512])]
    spatial, temporal = int(config.get("spatial_compression_ratio", 8)), int(config.get("temporal_compression_ratio",
                                                                                        4))
    if config.get("act_fn", "silu") != "silu":
        raise NotImplementedError(f"AutoencoderKLHunyuanVideo act_fn {config.get('act_fn')!r} (built: silu)")
    if temporal != 4 or spatial & (spatial - 1) or not 1 <= int(np.log2(spatial)) <= len(blocks) - 1:
        raise NotImplementedError(f"AutoencoderKLHunyuanVideo compression {temporal} x {spatial} (built: 4x in time, "
                                  "a power of two in space up to the up blocks)")
    return (blocks, int(config.get("layers_per_block", 2)), int(config.get("latent_channels", 16)), spatial,
            temporal)


def _mid_block(b: _HunyuanDecoderBuilder, x: str, side: str, c: int, config: Mapping) -> str:
    x = b.resnet(x, f"{side}.mid_block.resnets.0", c, c, f"{side}_mid0")
    if config.get("mid_block_add_attention", True):
        x = b.causal_attention(x, f"{side}.mid_block.attentions.0", c, f"{side}_mid_attn")
    return b.resnet(x, f"{side}.mid_block.resnets.1", c, c, f"{side}_mid1")


def build_hunyuan_vae_encoder_graph(config: Mapping, weights: Mapping[str, np.ndarray],
                                    latent_shape: Sequence[int] | None = None, **_) -> Graph:
    """The encoder of the clip that encodes to `latent_shape` (frames, height, width): input `video` [batch,
    in_channels, 4 (frames - 1) + 1, 8 height, 8 width] in [-1, 1]; output `moments` [batch, 2 latent_channels,
    frames, height, width] (the posterior's mean, then its log-variance, as quant_conv writes them)."""
    blocks, layers, z, spatial, temporal = _check_config(config)
    if latent_shape is None or len(tuple(latent_shape)) != 3 or min(int(v) for v in latent_shape) <= 0:
        raise ConverterError("the HunyuanVideo VAE encoder needs the latent clip it encodes to (frames, height, width: "
                             "latent_shape)")
    f, h, w = (int(v) for v in latent_shape)
    pixels = ((f - 1) * temporal + 1, h * spatial, w * spatial)
    b = _HunyuanDecoderBuilder(weights, int(config.get("norm_num_groups", 32)), pixels)
    b.g.name = "hunyuan_video_vae_encoder"
    x = b.input("video", [-1, int(config.get("in_channels", 3)), *pixels], F32)
    x = b.conv(x, "encoder.conv_in", int(config.get("in_channels", 3)), blocks[0], 3, "conv_in")
    c = blocks[0]
    spatial_downs, time_downs = int(np.log2(spatial)), int(np.log2(temporal))
    for i, c_out in enumerate(blocks):
        for j in range(layers):
            x = b.resnet(x, f"encoder.down_blocks.{i}.resnets.{j}", c if j == 0 else c_out, c_out, f"down{i}_{j}")
        c = c_out
        add_space, add_time = i < spatial_downs, i >= len(blocks) - 1 - time_downs and i != len(blocks) - 1
        if add_space or add_time:
            st, ss = (2 if add_time else 1), (2 if add_space else 1)
            x = b.conv(x, f"encoder.down_blocks.{i}.downsamplers.0.conv", c, c, 3, f"down{i}_down",
                              strides=(st, ss, ss))
            b.frames, b.height, b.width = ((b.frames - 1) // st + 1, (b.height - 1) // ss + 1,
                                           (b.width - 1) // ss + 1)
    x = _mid_block(b, x, "encoder", c, config)
    x = b.silu(b.group_norm(x, "encoder.conv_norm_out", c, "norm_out"), "act_out")
    x = b.conv(x, "encoder.conv_out", c, 2 * z, 3, "conv_out")
    x = b.node("Conv", [x, b.const("q_w", b.weight("quant_conv.weight", (2 * z, 2 * z, 1, 1, 1))),
                        b.const("q_b", b.weight("quant_conv.bias", (2 * z,)))],
               {"kernel_shape": [1, 1, 1], "strides": [1, 1, 1], "pads": [0] * 6, "dilations": [1, 1, 1], "group": 1},
               hint="quant")
    if (b.frames, b.height, b.width) != (f, h, w):
        raise ConverterError(f"the encoder maps {list(pixels)} to {[b.frames, b.height, b.width]}, not {[f, h, w]}")
    b.g.outputs.append(b.rename(x, "moments"))
    b.g.metadata.update({"producer": "model_zoo.generation.hunyuan_vae_graph", "architecture": "AutoencoderKLHunyuanVideo",
                         "latent_shape": f"{f},{h},{w}"})
    return b.g


def build_from_checkpoint(config: Mapping, weights: Mapping[str, np.ndarray], head: str | None = None,
                          latent_shape: Sequence[int] | None = None, **_) -> Graph:
    """The checkpoint frontend's builder: `head` "vae_decoder" (default) or "vae_encoder"."""
    if head in (None, "vae_decoder"):
        return build_hunyuan_vae_decoder_graph(config, weights, latent_shape)
    if head == "vae_encoder":
        return build_hunyuan_vae_encoder_graph(config, weights, latent_shape)
    raise ValueError(f"head must be vae_decoder or vae_encoder, not {head!r}")


def build_hunyuan_vae_decoder_graph(config: Mapping, weights: Mapping[str, np.ndarray],
                                    latent_shape: Sequence[int] | None = None, **_) -> Graph:
    """`latent_shape`: (frames, height, width) of the latent clip the graph decodes (one temporal tile)."""
    blocks, layers, z, spatial, temporal = _check_config(config)
    out_channels = int(config.get("out_channels", 3))
    if latent_shape is None or len(tuple(latent_shape)) != 3:
        raise ConverterError("the HunyuanVideo VAE decoder needs the latent clip it decodes (frames, height, width: "
                             "latent_shape)")
    shape = tuple(int(v) for v in latent_shape)
    if min(shape) <= 0:
        raise ConverterError(f"latent clip {list(shape)} must be positive")
    b = _HunyuanDecoderBuilder(weights, int(config.get("norm_num_groups", 32)), shape)
    x = b.input("latents", [-1, z, *shape], F32)
    w = b.const("pq_w", b.weight("post_quant_conv.weight", (z, z, 1, 1, 1)))
    x = b.node("Conv", [x, w, b.const("pq_b", b.weight("post_quant_conv.bias", (z,)))],
               {"kernel_shape": [1, 1, 1], "strides": [1, 1, 1], "pads": [0] * 6, "dilations": [1, 1, 1], "group": 1},
               hint="post_quant")
    c = blocks[-1]
    x = b.conv(x, "decoder.conv_in", z, c, 3, "conv_in")
    x = _mid_block(b, x, "decoder", c, config)
    spatial_ups, time_ups = int(np.log2(spatial)), int(np.log2(temporal))
    for i, c_out in enumerate(reversed(blocks)):
        final = i == len(blocks) - 1
        for j in range(layers + 1):
            x = b.resnet(x, f"decoder.up_blocks.{i}.resnets.{j}", c if j == 0 else c_out, c_out, f"up{i}_{j}")
        c = c_out
        add_space, add_time = i < spatial_ups, i >= len(blocks) - 1 - time_ups and not final
        if add_space or add_time:
            if not add_space:
                raise NotImplementedError("a HunyuanVideo upsampler in time only (built: space, or space and time)")
            x = b.upsample(x, f"decoder.up_blocks.{i}.upsamplers.0", c, add_time, f"up{i}_up")
    x = b.silu(b.group_norm(x, "decoder.conv_norm_out", blocks[0], "norm_out"), "act_out")
    out = b.rename(b.conv(x, "decoder.conv_out", blocks[0], out_channels, 3, "conv_out"), "video")
    b.g.outputs.append(out)
    b.g.metadata.update({"producer": "model_zoo.generation.hunyuan_vae_graph", "architecture": "AutoencoderKLHunyuanVideo",
                         "latent_shape": ",".join(str(s) for s in shape)})
    return b.g


def temporal_tiles(frames: int, tile: int = 4, stride: int = 3) -> list[tuple[int, int]]:
    """diffusers' _temporal_tiled_decode tiles of a latent with `frames` frames: (start, length) of each (tile + 1
    frames from every stride-th frame); one whole tile when the latent has no more than `tile` frames."""
    if frames <= tile:
        return [(0, frames)]
    return [(i, min(tile + 1, frames - i)) for i in range(0, frames, stride)]
