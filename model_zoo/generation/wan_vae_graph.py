"""The Wan 2.1 VAE decoder (diffusers `AutoencoderKLWan`) built from its checkpoint's tensors, in the converter's IR,
as two time-slice graphs that decode one latent frame per call and carry the causal convolutions' caches between
calls (so memory stays bounded by one slice, as diffusers' own frame loop does):

- `first`: latent frame 0 -> 1 video frame. The causal convolutions see zeros before it (their time padding); the
  temporal upsamplers pass it through (Wan's first frame is not upsampled in time).
- `next`: latent frame i >= 1 -> 4 video frames (2x per temporal upsampler), reading each convolution's cache.

Inputs: `latents` [batch, z_dim, 1, height, width] (already de-normalised: latents / std + mean), and for `next`
every `cache.K` [batch, channels, 2, H_K, W_K]. Outputs: `frames` [batch, 3, T, 8 height, 8 width] clamped to
[-1, 1], and every `cache_out.K`, the last two frames that convolution's input had (its cache for the next call);
a cache the `first` graph does not write (the temporal upsamplers') starts as zeros. The caches' names and shapes
are in the graphs' inputs and outputs."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, GraphBuilder

CACHE_FRAMES = 2   # a 3-tap causal convolution reads the two frames before its input


class _VaeDecoderBuilder(GraphBuilder):
    def __init__(self, weights, first: bool, hw: tuple[int, int]):
        super().__init__("wan_vae_decoder_first" if first else "wan_vae_decoder", weights)
        self.first = first
        self.caches = 0
        self.height, self.width = hw

    def i64(self, hint: str, values) -> str:
        return self.const(hint, np.array(values, np.int64))

    def conv(self, x: str, prefix: str, c_in: int, c_out: int, kernel: tuple[int, int, int], pads: Sequence[int],
             hint: str, strides: Sequence[int] = (1, 1, 1)) -> str:
        w = self.weight(prefix + ".weight")
        if w.ndim == 4:   # a per-frame Conv2d as a (1, kh, kw) Conv3d
            w = w[:, :, None]
        if w.shape != (c_out, c_in, *kernel):
            raise ConverterError(f"tensor '{prefix}.weight' has shape {list(w.shape)}, the config implies "
                                 f"{[c_out, c_in, *kernel]}")
        return self.node("Conv", [x, self.const(f"{hint}_w", w), self.const(f"{hint}_b", self.weight(prefix + ".bias",
                                                                                                      (c_out,)))],
                         {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads),
                          "dilations": [1, 1, 1], "group": 1}, hint=hint)

    def causal_conv(self, x: str, frames: int, prefix: str, c_in: int, c_out: int, kernel: tuple[int, int, int],
                    hint: str, cached: bool = True) -> str:
        """A causal Conv3d (time padding in front): `first` pads zeros and writes the cache; `next` reads it too.
        `cached=False` (the temporal upsampler in `first`) does not exist there."""
        ph, pw = kernel[1] // 2, kernel[2] // 2
        k = self.caches
        self.caches += 1
        if self.first:   # zeros before the input: its cache is (0, x) for one frame, else its last two frames
            if frames >= CACHE_FRAMES:
                x = self.cache_output(x, k, frames)
            else:
                self.cache_output(self.node("Pad", [x, self.i64(f"cpad{k}", [0, 0, 1, 0, 0] + [0] * 5)], {"mode": 0},
                                            hint=f"cache{k}_pad"), k, CACHE_FRAMES)
            return self.conv(x, prefix, c_in, c_out, kernel, [CACHE_FRAMES, ph, pw, 0, ph, pw], hint)
        cache = self.input(f"cache.{k}", [-1, c_in, CACHE_FRAMES, self.height, self.width], F32)
        both = self.node("Concat", [cache, x], {"axis": 2}, hint=f"{hint}_in")
        self.cache_output(both, k, frames + CACHE_FRAMES)
        return self.conv(both, prefix, c_in, c_out, kernel, [0, ph, pw, 0, ph, pw], hint)

    def cache_output(self, x: str, k: int, frames: int, keep: int = CACHE_FRAMES) -> str:
        """Makes the last `keep` frames of x the output cache_out.k; returns x's name (renamed when x is the cache
        itself)."""
        if frames > keep:
            last = self.node("Slice", [x, self.i64(f"c{k}_s", [frames - keep]), self.i64(f"c{k}_e", [frames]),
                                       self.i64(f"c{k}_a", [2])], hint=f"cache{k}_last")
            last = self.rename(last, f"cache_out.{k}")
            self.g.outputs.append(last)
            return x
        x = self.rename(x, f"cache_out.{k}")
        self.g.outputs.append(x)
        return x

    def rms(self, x: str, prefix: str, channels: int, axis: int, hint: str) -> str:
        """F.normalize over the channel axis, times sqrt(channels) and gamma (WanRMS_norm)."""
        gamma = self.weight(prefix + ".gamma").reshape(-1)
        if gamma.shape != (channels,):
            raise ConverterError(f"tensor '{prefix}.gamma' has {gamma.size} values, the config implies {channels}")
        shape = [channels] + [1] * 3 if axis == 1 else [channels]
        norm = self.node("ReduceL2", [x, self.i64(f"{hint}_axis", [axis])], {"keepdims": 1}, hint=f"{hint}_l2")
        norm = self.node("Max", [norm, self.const(f"{hint}_eps", np.array(1e-12, F32))], hint=f"{hint}_safe")
        scale = self.const(f"{hint}_g", (gamma * np.float32(channels ** 0.5)).astype(F32).reshape(shape))
        return self.node("Mul", [self.node("Div", [x, norm], hint=f"{hint}_unit"), scale], hint=hint)

    def silu(self, x: str, hint: str) -> str:
        return self.node("Mul", [x, self.node("Sigmoid", [x], hint=f"{hint}_sig")], hint=hint)

    def resnet(self, x: str, frames: int, prefix: str, c_in: int, c_out: int, hint: str) -> str:
        short = x
        if c_in != c_out:
            short = self.conv(x, prefix + ".conv_shortcut", c_in, c_out, (1, 1, 1), [0] * 6, f"{hint}_short")
        h = self.silu(self.rms(x, prefix + ".norm1", c_in, 1, f"{hint}_n1"), f"{hint}_a1")
        h = self.causal_conv(h, frames, prefix + ".conv1", c_in, c_out, (3, 3, 3), f"{hint}_c1")
        h = self.silu(self.rms(h, prefix + ".norm2", c_out, 1, f"{hint}_n2"), f"{hint}_a2")
        h = self.causal_conv(h, frames, prefix + ".conv2", c_out, c_out, (3, 3, 3), f"{hint}_c2")
        return self.node("Add", [h, short], hint=f"{hint}_out")

    def attention(self, x: str, frames: int, prefix: str, c: int, hint: str) -> str:
        """One head over each frame's pixels (channels as the head's width)."""
        hw = self.height * self.width
        rows = self.node("Reshape", [self.node("Transpose", [x], {"perm": [0, 2, 3, 4, 1]}, hint=f"{hint}_last"),
                                     self.i64(f"{hint}_rows", [-1, hw, c])], hint=f"{hint}_tokens")
        h = self.rms(rows, prefix + ".norm", c, -1, f"{hint}_n")
        qkv_w = self.weight(prefix + ".to_qkv.weight").reshape(3 * c, c)
        qkv_b = self.weight(prefix + ".to_qkv.bias", (3 * c,))
        parts = [self.node("MatMul", [h, self.const(f"{hint}_{n}w", np.ascontiguousarray(qkv_w[i * c:(i + 1) * c].T)),
                                      self.const(f"{hint}_{n}b", qkv_b[i * c:(i + 1) * c])], hint=f"{hint}_{n}")
                 for i, n in enumerate("qkv")]
        a = self.mha(parts, 1, f"{hint}_attn")
        proj = np.ascontiguousarray(self.weight(prefix + ".proj.weight").reshape(c, c).T)
        a = self.node("MatMul", [a, self.const(f"{hint}_pw", proj), self.const(f"{hint}_pb", self.weight(
            prefix + ".proj.bias", (c,)))], hint=f"{hint}_proj")
        a = self.node("Reshape", [a, self.i64(f"{hint}_video", [-1, frames, self.height, self.width, c])], hint=f"{hint}_5d")
        a = self.node("Transpose", [a], {"perm": [0, 4, 1, 2, 3]}, hint=f"{hint}_first")
        return self.node("Add", [a, x], hint=f"{hint}_res")

    def dup_up(self, x: str, frames: int, c_in: int, c_out: int, temporal: bool, hint: str) -> str:
        """Wan 2.2's DupUp3D shortcut: every channel repeated, then the copies spread over (2 frames,) 2 rows and 2
        columns; in `first` the first of the two frames is dropped (diffusers' first_chunk)."""
        ft, fs = (2 if temporal else 1), 2
        reps = c_out * ft * fs * fs // c_in
        x = self.node("Unsqueeze", [x, self.i64(f"{hint}_ax", [2])], hint=f"{hint}_col")
        x = self.node("Expand", [x, self.i64(f"{hint}_rep", [1, 1, reps, 1, 1, 1])], hint=f"{hint}_repeat")
        x = self.node("Reshape", [x, self.i64(f"{hint}_split", [0, c_out, ft, fs, fs, frames, self.height,
                                                                 self.width])], hint=f"{hint}_split")
        x = self.node("Transpose", [x], {"perm": [0, 1, 5, 2, 6, 3, 7, 4]}, hint=f"{hint}_spread")
        x = self.node("Reshape", [x, self.i64(f"{hint}_out", [0, c_out, frames * ft, 2 * self.height,
                                                               2 * self.width])], hint=f"{hint}_up")
        if self.first and ft > 1:
            x = self.node("Slice", [x, self.i64(f"{hint}_s", [ft - 1]), self.i64(f"{hint}_e", [frames * ft]),
                                    self.i64(f"{hint}_a", [2])], hint=f"{hint}_first")
        return x

    def upsample(self, x: str, frames: int, prefix: str, c: int, temporal: bool, hint: str,
                 c_out: int | None = None) -> tuple[str, int]:
        if temporal and not self.first:
            # time_conv doubles the channels: [B, 2, C, T, H, W] -> interleaved in time [B, C, 2T, H, W]
            x = self.causal_conv(x, frames, prefix + ".time_conv", c, 2 * c, (3, 1, 1), f"{hint}_time")
            x = self.node("Reshape", [x, self.i64(f"{hint}_pair", [0, 2, c, frames, self.height, self.width])],
                          hint=f"{hint}_pairs")
            x = self.node("Transpose", [x], {"perm": [0, 2, 3, 1, 4, 5]}, hint=f"{hint}_interleave")
            frames *= 2
            x = self.node("Reshape", [x, self.i64(f"{hint}_t2", [0, c, frames, self.height, self.width])], hint=f"{hint}_2t")
        elif temporal:
            self.caches += 1   # the `next` graph's cache of this time_conv: zeros after the first frame
        x = self.node("Resize", [x, "", self.const(f"{hint}_scales", np.array([1, 1, 1, 2, 2], F32))],
                      {"mode": 0, "coordinate_transform": 4, "nearest_mode": 2},   # nearest, asymmetric, floor
                      hint=f"{hint}_nearest")
        self.height, self.width = 2 * self.height, 2 * self.width
        x = self.conv(x, prefix + ".resample.1", c, c // 2 if c_out is None else c_out, (1, 3, 3),
                      [0, 1, 1, 0, 1, 1], f"{hint}_conv")
        return x, frames


class _VaeEncoderBuilder(_VaeDecoderBuilder):
    def avg_down(self, x: str, frames: int, c_in: int, c_out: int, temporal: bool, spatial: bool, hint: str) -> str:
        """Wan 2.2's AvgDown3D shortcut: (2 frames and) 2 rows and 2 columns folded into channels, then averaged in
        groups to c_out; a one-frame slice is padded in front with a zero frame first (diffusers pads to a multiple
        of the time factor). Reads self.height / width as the input's."""
        ft, fs = (2 if temporal else 1), (2 if spatial else 1)
        if frames % ft:
            x = self.node("Pad", [x, self.i64(f"{hint}_tpad", [0, 0, ft - frames % ft, 0, 0] + [0] * 5)],
                          {"mode": 0}, hint=f"{hint}_tpad")
            frames += ft - frames % ft
        t, h, w = frames // ft, self.height // fs, self.width // fs
        x = self.node("Reshape", [x, self.i64(f"{hint}_split", [0, c_in, t, ft, h, fs, w, fs])], hint=f"{hint}_split")
        x = self.node("Transpose", [x], {"perm": [0, 1, 3, 5, 7, 2, 4, 6]}, hint=f"{hint}_fold")
        group = c_in * ft * fs * fs // c_out
        x = self.node("Reshape", [x, self.i64(f"{hint}_groups", [0, c_out, group, t, h, w])], hint=f"{hint}_groups")
        return self.node("ReduceMean", [x, self.i64(f"{hint}_axis", [2])], {"keepdims": 0}, hint=hint)

    def downsample(self, x: str, frames: int, prefix: str, c: int, temporal: bool, hint: str) -> tuple[str, int]:
        """Zero pad right / bottom, a stride-2 3x3 Conv per frame; temporal: then a stride-2 3-tap time Conv over the
        previous call's last frame and this call's (the first call only keeps its frame as that cache)."""
        x = self.node("Pad", [x, self.i64(f"{hint}_pad", [0] * 5 + [0, 0, 0, 1, 1])], {"mode": 0}, hint=f"{hint}_p")
        x = self.conv(x, prefix + ".resample.1", c, c, (1, 3, 3), [0] * 6, f"{hint}_conv", strides=(1, 2, 2))
        self.height, self.width = self.height // 2, self.width // 2
        if not temporal:
            return x, frames
        k = self.caches
        self.caches += 1
        if self.first:
            return self.cache_output(x, k, frames, keep=1), frames
        cache = self.input(f"cache.{k}", [-1, c, 1, self.height, self.width], F32)
        x = self.cache_output(x, k, frames, keep=1)
        both = self.node("Concat", [cache, x], {"axis": 2}, hint=f"{hint}_in")
        x = self.conv(both, prefix + ".time_conv", c, c, (3, 1, 1), [0] * 6, f"{hint}_time", strides=(2, 1, 1))
        return x, (frames + 1 - 3) // 2 + 1


def build_wan_vae_encoder_graph(config: Mapping, weights: Mapping[str, np.ndarray], video_hw: Sequence[int],
                                first: bool, **_) -> Graph:
    """The encoder's time slices (diffusers' AutoencoderKLWan._encode loop): `first` takes video frame 0, the `next`
    graph 4 frames a call, each giving one latent frame; the causal convolutions' and the temporal downsamplers'
    caches are inputs / outputs as in the decoder. Output `latents` is the posterior's mean (diffusers' argmax
    mode) [batch, z_dim, 1, h, w]. Wan 2.2's form (is_residual, patch_size): the video patchified into channels
    first, down blocks with an AvgDown3D shortcut added after their downsampler."""
    residual, patch = bool(config.get("is_residual")), int(config.get("patch_size") or 1)
    if config.get("attn_scales"):
        raise NotImplementedError("Wan VAE attn_scales (attention in the down blocks) has no graph builder yet")
    base, z = int(config.get("base_dim", 96)), int(config.get("z_dim", 16))
    mult = [int(m) for m in config.get("dim_mult", [1, 2, 4, 4])]
    res_blocks = int(config.get("num_res_blocks", 2))
    temporal = list(config.get("temperal_downsample", [False, True, True]))
    hw = tuple(int(v) for v in video_hw)
    scale = 2 ** (len(mult) - 1) * patch
    if len(hw) != 2 or min(hw) <= 0 or hw[0] % scale or hw[1] % scale:
        raise ConverterError(f"video size {list(hw)} must be two positive multiples of {scale}")
    in_channels = int(config.get("in_channels", 3))
    b = _VaeEncoderBuilder(weights, first, (hw[0] // patch, hw[1] // patch))
    b.g.name = "wan_vae_encoder_first" if first else "wan_vae_encoder"
    frames = 1 if first else 4
    x = b.input("video", [-1, in_channels // (patch * patch), frames, *hw], F32)
    if patch > 1:   # patchify: pixels -> channels (C, patch_w, patch_h), as diffusers' patchify
        c = in_channels // (patch * patch)
        x = b.node("Reshape", [x, b.i64("patch_split", [0, c, frames, b.height, patch, b.width, patch])],
                   hint="patch_split")
        x = b.node("Transpose", [x], {"perm": [0, 1, 6, 4, 2, 3, 5]}, hint="patch_fold")
        x = b.node("Reshape", [x, b.i64("patched", [0, in_channels, frames, b.height, b.width])], hint="patched")
    dims = [base * m for m in [1] + mult]
    x = b.causal_conv(x, frames, "encoder.conv_in", in_channels, dims[0], (3, 3, 3), "conv_in")
    layer = 0
    for i, (c_in, c_out) in enumerate(zip(dims[:-1], dims[1:])):
        down = i != len(mult) - 1
        if residual:   # WanResidualDownBlock i: resnets, downsampler, + AvgDown3D of the block's input
            block_in, block_frames, block_hw = x, frames, (b.height, b.width)
            p = f"encoder.down_blocks.{i}."
            for j in range(res_blocks):
                x = b.resnet(x, frames, f"{p}resnets.{j}", c_in if j == 0 else c_out, c_out, f"down{i}_{j}")
            t_down = down and bool(temporal[i])
            if down:
                x, frames = b.downsample(x, frames, p + "downsampler", c_out, t_down, f"down{i}_sample")
            after = (b.height, b.width)
            b.height, b.width = block_hw
            short = b.avg_down(block_in, block_frames, c_in, c_out, t_down, down, f"down{i}_avg")
            b.height, b.width = after
            x = b.node("Add", [x, short], hint=f"down{i}_residual")
            continue
        for _ in range(res_blocks):
            x = b.resnet(x, frames, f"encoder.down_blocks.{layer}", c_in, c_out, f"down{layer}")
            c_in, layer = c_out, layer + 1
        if down:
            x, frames = b.downsample(x, frames, f"encoder.down_blocks.{layer}", c_out, bool(temporal[i]),
                                     f"down{layer}")
            layer += 1
    top = dims[-1]
    x = b.resnet(x, frames, "encoder.mid_block.resnets.0", top, top, "mid0")
    x = b.attention(x, frames, "encoder.mid_block.attentions.0", top, "mid_attn")
    x = b.resnet(x, frames, "encoder.mid_block.resnets.1", top, top, "mid1")
    x = b.silu(b.rms(x, "encoder.norm_out", top, 1, "norm_out"), "out_act")
    x = b.causal_conv(x, frames, "encoder.conv_out", top, 2 * z, (3, 3, 3), "conv_out")
    x = b.conv(x, "quant_conv", 2 * z, 2 * z, (1, 1, 1), [0] * 6, "quant")
    mean = b.node("Slice", [x, b.i64("mu_s", [0]), b.i64("mu_e", [z]), b.i64("mu_a", [1])], hint="mean")
    latents = b.rename(mean, "latents")
    b.g.outputs.insert(0, latents)
    b.g.metadata.update({"producer": "model_zoo.generation.wan_vae_graph", "architecture": "AutoencoderKLWan encoder",
                         "slice": "first" if first else "next", "video_hw": f"{hw[0]},{hw[1]}"})
    return b.g


def build_wan_vae_decoder_graph(config: Mapping, weights: Mapping[str, np.ndarray], latent_hw: Sequence[int],
                                first: bool, **_) -> Graph:
    """One of the two time-slice graphs (`first` or not) for latents of spatial size `latent_hw`. Wan 2.2's form
    (is_residual, patch_size): up blocks with a DupUp3D shortcut and full-width upsamplers, the decoder's own
    decoder_base_dim, and the output's channels un-patchified into patch x patch pixels."""
    residual, patch = bool(config.get("is_residual")), int(config.get("patch_size") or 1)
    base, z = int(config.get("decoder_base_dim") or config.get("base_dim", 96)), int(config.get("z_dim", 16))
    mult = [int(m) for m in config.get("dim_mult", [1, 2, 4, 4])]
    res_blocks = int(config.get("num_res_blocks", 2))
    temporal = list(config.get("temperal_downsample", [False, True, True]))[::-1]
    out_channels = int(config.get("out_channels", 3))
    if config.get("attn_scales"):
        raise NotImplementedError("Wan VAE attn_scales (attention in the up blocks) has no graph builder yet")
    hw = tuple(int(v) for v in latent_hw)
    if len(hw) != 2 or min(hw) <= 0:
        raise ConverterError(f"latent size {list(hw)} must be two positive integers (height, width)")
    b = _VaeDecoderBuilder(weights, first, hw)
    x = b.input("latents", [-1, z, 1, *hw], F32)
    x = b.conv(x, "post_quant_conv", z, z, (1, 1, 1), [0] * 6, "post_quant")
    frames = 1
    dims = [base * m for m in [mult[-1]] + mult[::-1]]
    x = b.causal_conv(x, frames, "decoder.conv_in", z, dims[0], (3, 3, 3), "conv_in")
    mid = "decoder.mid_block."
    x = b.resnet(x, frames, mid + "resnets.0", dims[0], dims[0], "mid0")
    x = b.attention(x, frames, mid + "attentions.0", dims[0], "mid_attn")
    x = b.resnet(x, frames, mid + "resnets.1", dims[0], dims[0], "mid1")
    for i, (c_in, c_out) in enumerate(zip(dims[:-1], dims[1:])):
        if i > 0 and not residual:
            c_in //= 2
        up = f"decoder.up_blocks.{i}."
        block_in, block_frames, block_hw = x, frames, (b.height, b.width)
        for j in range(res_blocks + 1):
            x = b.resnet(x, frames, f"{up}resnets.{j}", c_in if j == 0 else c_out, c_out, f"up{i}_{j}")
        if i != len(mult) - 1:
            if residual:   # the upsampler keeps the width; the block's input, spread by DupUp3D, is added
                x, frames = b.upsample(x, frames, up + "upsampler", c_out, bool(temporal[i]), f"up{i}_sample",
                                       c_out=c_out)
                b.height, b.width = block_hw
                short = b.dup_up(block_in, block_frames, c_in, c_out, bool(temporal[i]), f"up{i}_dup")
                b.height, b.width = 2 * block_hw[0], 2 * block_hw[1]
                x = b.node("Add", [x, short], hint=f"up{i}_residual")
            else:
                x, frames = b.upsample(x, frames, up + "upsamplers.0", c_out, bool(temporal[i]), f"up{i}_sample")
    x = b.silu(b.rms(x, "decoder.norm_out", dims[-1], 1, "norm_out"), "out_act")
    x = b.causal_conv(x, frames, "decoder.conv_out", dims[-1], out_channels, (3, 3, 3), "conv_out")
    if patch > 1:   # unpatchify: channels (C, patch_w, patch_h) -> pixels
        c = out_channels // (patch * patch)
        x = b.node("Reshape", [x, b.i64("unpatch", [0, c, patch, patch, frames, b.height, b.width])],
                   hint="unpatch")
        x = b.node("Transpose", [x], {"perm": [0, 1, 4, 5, 3, 6, 2]}, hint="unpatch_t")
        x = b.node("Reshape", [x, b.i64("pixels", [0, c, frames, b.height * patch, b.width * patch])],
                   hint="pixels")
    x = b.node("Clip", [x, b.const("lo", np.array(-1.0, F32)), b.const("hi", np.array(1.0, F32))], hint="clamp")
    frames_out = b.rename(x, "frames")
    b.g.outputs.insert(0, frames_out)
    b.g.metadata.update({"producer": "model_zoo.generation.wan_vae_graph", "architecture": "AutoencoderKLWan decoder",
                         "slice": "first" if first else "next", "latent_hw": f"{hw[0]},{hw[1]}",
                         "frames_per_call": str(frames)})
    return b.g


VAE_HEADS = ("vae_decoder", "vae_decoder_first", "vae_encoder", "vae_encoder_first")


def build_from_checkpoint(config: Mapping, weights: Mapping[str, np.ndarray], head: str | None = None,
                          latent_shape: Sequence[int] | None = None, **_) -> Graph:
    """The checkpoint frontend's builder: `head` "vae_decoder" (the `next` slice, default), "vae_decoder_first",
    "vae_encoder" or "vae_encoder_first"; `latent_shape` (frames, height, width) of the latents, of which the slices
    use the height and width (the encoder's video is 2^(len(dim_mult) - 1) times that)."""
    head = head or "vae_decoder"
    if head not in VAE_HEADS:
        raise ValueError(f"head must be one of {', '.join(VAE_HEADS)}, not {head!r}")
    if latent_shape is None:
        raise ConverterError("the Wan VAE decoder needs the latent size it decodes (latent_shape / --latentShape)")
    hw = tuple(latent_shape)[-2:]
    if head.startswith("vae_encoder"):
        scale = 2 ** (len(config.get("dim_mult", [1, 2, 4, 4])) - 1) * int(config.get("patch_size") or 1)
        return build_wan_vae_encoder_graph(config, weights, (hw[0] * scale, hw[1] * scale),
                                           first=head == "vae_encoder_first")
    return build_wan_vae_decoder_graph(config, weights, hw, first=head == "vae_decoder_first")
