"""The Wan 2.1 video DiT (diffusers `WanTransformer3DModel`) built from its checkpoint's tensors, already fused, in
the converter's IR: one denoising evaluation at a fixed latent size.

Inputs: `hidden_states` [batch, in_channels, frames, height, width] (the latent video, at the size the graph is
built for: the 3-D RoPE tables and the token count depend on it), `timestep` [batch] float32 and
`encoder_hidden_states` [batch, text_len, text_dim] (UMT5 states; any length) and, for the I2V DiT (image_dim),
`encoder_hidden_states_image` [batch, image_tokens, image_dim] (CLIP's penultimate states). Output: `sample` [batch,
out_channels, frames, height, width] (the flow-matching velocity).

Per block: adaLN modulation (the block's `scale_shift_table` + the time projection: shift / scale / gate of the
self-attention and of the MLP), LayerNorm without affine, self-attention with RMSNorm of q and k across heads and
the interleaved 3-D rotary embedding (frame, row, column parts of each head), cross-attention to the text states,
and a GELU-tanh MLP. Patchify is a strided Conv; unpatchify a reshape and one transpose."""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, GraphBuilder

# 480p (832 x 480), 81 frames: the size Wan2.1-T2V-1.3B is sampled at (VAE: 4x in time, 8x in space)
DEFAULT_LATENT_SHAPE = (21, 60, 104)


def rope_tables(head_dim: int, grid: Sequence[int], theta: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """cos / sin [1, tokens, head_dim / 2] of the 3-D rotary embedding: a head's pairs are split into frame, row and
    column parts (the row and column parts 2 * (head_dim // 6) wide each), each rotating by its axis' position
    (diffusers' WanRotaryPosEmbed, its float64 angles)."""
    h_dim = w_dim = 2 * (head_dim // 6)
    t_dim = head_dim - h_dim - w_dim
    angles = []
    for axis, (dim, size) in enumerate(zip((t_dim, h_dim, w_dim), grid)):
        freqs = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64)[: dim // 2] / dim)
        a = np.outer(np.arange(size, dtype=np.float64), freqs)   # [size, dim / 2]
        shape = [1, 1, 1, dim // 2]
        shape[axis] = size
        angles.append(np.broadcast_to(a.reshape(shape), (*grid, dim // 2)))
    a = np.concatenate(angles, axis=-1).reshape(1, -1, head_dim // 2)
    return np.cos(a).astype(F32), np.sin(a).astype(F32)


def timestep_frequencies(freq_dim: int) -> np.ndarray:
    """The sinusoidal embedding's frequencies (diffusers Timesteps, downscale_freq_shift 0, in float32)."""
    half = freq_dim // 2
    exponent = (-math.log(10000.0) * np.arange(half, dtype=np.float32)) / np.float32(half)
    return np.exp(exponent).astype(F32).reshape(1, half)


class _WanBuilder(GraphBuilder):
    def __init__(self, config: Mapping, weights, weight_format: str, group_size: int):
        super().__init__("wan_dit", weights, weight_format, group_size)
        self.heads = int(config["num_attention_heads"])
        self.head_dim = int(config["attention_head_dim"])
        self.D = self.heads * self.head_dim
        self.eps = float(config.get("eps", 1e-6))
        ones, zeros = np.ones(self.D, F32), np.zeros(self.D, F32)
        self.ln_scale, self.ln_bias = self.const("ln_ones", ones), self.const("ln_zeros", zeros)
        self.one = self.const("one", np.ones(1, F32))

    def layer_norm(self, x: str, hint: str, prefix: str | None = None) -> str:
        if prefix is None:   # elementwise_affine=False
            scale, bias = self.ln_scale, self.ln_bias
        else:
            scale = self.const(f"{hint}_w", self.weight(prefix + ".weight", (self.D,)))
            bias = self.const(f"{hint}_b", self.weight(prefix + ".bias", (self.D,)))
        return self.node("LayerNormalization", [x, scale, bias], {"axis": -1, "epsilon": self.eps}, hint=hint)

    def rms_norm(self, x: str, prefix: str, hint: str) -> str:
        return self.node("RMSNormalization", [x, self.const(hint, self.weight(prefix + ".weight", (self.D,)))],
                         {"axis": -1, "epsilon": self.eps}, hint=hint)

    def modulation(self, table: str, projected: str, count: int, hint: str, per_token: bool = False) -> list[str]:
        """The `count` rows [batch, 1, D] of table [1, count, D] + projected [batch, count, D]; per token,
        [batch, tokens, D] of table + projected [batch, tokens, count, D]."""
        both = self.node("Add", [projected, table], hint=f"{hint}_mod")
        index = (lambda i: np.array(i, np.int64)) if per_token else (lambda i: np.array([i], np.int64))
        return [self.node("Gather", [both, self.const(f"{hint}_row{i}", index(i))], {"axis": 2 if per_token else 1},
                          hint=f"{hint}_m{i}") for i in range(count)]

    def modulate(self, x: str, shift: str, scale: str, hint: str) -> str:
        """x * (1 + scale) + shift."""
        return self.node("Add", [self.node("Mul", [x, self.node("Add", [scale, self.one], hint=f"{hint}_1s")],
                                           hint=f"{hint}_scaled"), shift], hint=hint)

    def attention(self, q: str, k: str, v: str, hint: str) -> str:
        return self.mha([q, k, v], self.heads, hint)

    def rope(self, x: str, cos: str, sin: str, hint: str) -> str:
        return self.node("RotaryEmbedding", [x, cos, sin], {"interleaved": True, "num_heads": self.heads,
                                                            "rotary_embedding_dim": 0}, hint=hint)


def build_wan_dit_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                        group_size: int = 32, latent_shape: Sequence[int] | None = None, token_timesteps: bool = False,
                        **_) -> Graph:
    """`latent_shape`: (frames, height, width) of the latent video the graph runs on (default: the config's
    `sample_shape`, else 480p / 81 frames). `token_timesteps`: `timestep` is [batch, tokens], one per token (Wan 2.2
    TI2V: the first frame's tokens at 0 when it is given), and every modulation is per token."""
    image_dim = int(config.get("image_dim") or 0)
    if bool(image_dim) != bool(config.get("added_kv_proj_dim")):
        raise ConverterError("image_dim and added_kv_proj_dim come together (the I2V DiT's image cross-attention)")
    pos_embed_len = int(config.get("pos_embed_seq_len") or 0)
    if pos_embed_len and not image_dim:
        raise ConverterError("pos_embed_seq_len is the image embedding's: it needs image_dim")
    animate = "motion_encoder_size" in config   # WanAnimateTransformer3DModel: pose latents and face adapters
    qk_norm = config.get("qk_norm", "rms_norm_across_heads")
    if qk_norm != "rms_norm_across_heads":
        raise NotImplementedError(f"qk_norm {qk_norm!r} is not built (built: rms_norm_across_heads)")
    b = _WanBuilder(config, weights, weight_format, group_size)
    D, hd = b.D, b.head_dim
    C_in = int(config.get("in_channels") or 2 * int(config.get("latent_channels") or 16) + 4)
    C_out = int(config.get("out_channels") or config.get("latent_channels") or config.get("in_channels", 16))
    text_dim, freq_dim = int(config.get("text_dim", 4096)), int(config.get("freq_dim", 256))
    ffn, layers = int(config["ffn_dim"]), int(config["num_layers"])
    patch = tuple(int(p) for p in config.get("patch_size", (1, 2, 2)))
    shape = tuple(int(s) for s in (latent_shape or config.get("sample_shape") or DEFAULT_LATENT_SHAPE))
    if len(shape) != 3 or any(s % p for s, p in zip(shape, patch)) or min(shape) <= 0:
        raise ConverterError(f"latent shape {list(shape)} (frames, height, width) must be positive multiples of the "
                             f"patch size {list(patch)}")
    grid = tuple(s // p for s, p in zip(shape, patch))
    tokens = int(np.prod(grid))
    if max(grid) > int(config.get("rope_max_seq_len", 1024)):
        raise ConverterError(f"the latent grid {list(grid)} exceeds rope_max_seq_len {config.get('rope_max_seq_len')}")

    x_in = b.input("hidden_states", [-1, C_in, *shape], F32)
    t_in = b.input("timestep", [-1, tokens] if token_timesteps else [-1], F32)
    text_in = b.input("encoder_hidden_states", [-1, -1, text_dim], F32)
    image_in = b.input("encoder_hidden_states_image", [-1, -1, image_dim], F32) if image_dim else None

    # patchify: a Conv with stride = kernel = the patch, then tokens in (frame, row, column) order
    w = b.const("patch_w", b.weight("patch_embedding.weight", (D, C_in, *patch)))
    bias = b.const("patch_b", b.weight("patch_embedding.bias", (D,)))
    x = b.node("Conv", [x_in, w, bias], {"kernel_shape": list(patch), "strides": list(patch), "pads": [0] * 6,
                                         "dilations": [1, 1, 1], "group": 1}, hint="patch")
    if animate:   # the pose latents' own patch embedding, added to every frame but the reference image's
        C_pose = int(config.get("latent_channels") or (C_in - 4) // 2)
        pose_in = b.input("pose_hidden_states", [-1, C_pose, shape[0] - 1, *shape[1:]], F32)
        pose = b.node("Conv", [pose_in, b.const("pose_w", b.weight("pose_patch_embedding.weight", (D, C_pose, *patch))),
                               b.const("pose_b", b.weight("pose_patch_embedding.bias", (D,)))],
                      {"kernel_shape": list(patch), "strides": list(patch), "pads": [0] * 6, "dilations": [1, 1, 1],
                       "group": 1}, hint="pose_patch")
        pose = b.node("Pad", [pose, b.const("pose_frame0", np.array([0, 0, 1, 0, 0, 0, 0, 0, 0, 0], np.int64))],
                      {"mode": 0}, hint="pose_after_ref")
        x = b.node("Add", [x, pose], hint="patch_pose")
    x = b.node("Reshape", [x, b.const("to_tokens", np.array([0, D, tokens], np.int64))], hint="patch_flat")
    x = b.node("Transpose", [x], {"perm": [0, 2, 1]}, hint="tokens")   # [B, N, D]

    # time: sinusoidal embedding [cos, sin] -> MLP (temb) -> SiLU -> the six modulations of every block
    t = b.node("Unsqueeze", [t_in, b.const("t_axis", np.array([-1], np.int64))], hint="t_col")
    angle = b.node("Mul", [t, b.const("t_freqs", timestep_frequencies(freq_dim))], hint="t_angle")
    t = b.node("Concat", [b.node("Cos", [angle], hint="t_cos"), b.node("Sin", [angle], hint="t_sin")], {"axis": -1},
               hint="t_sinusoid")
    ce = "condition_embedder."
    t = b.linear(t, ce + "time_embedder.linear_1", "time_1", freq_dim, D, activation="silu")
    temb = b.linear(t, ce + "time_embedder.linear_2", "time_2", D, D)
    silu = b.node("Mul", [temb, b.node("Sigmoid", [temb], hint="temb_sig")], hint="temb_silu")
    proj = b.linear(silu, ce + "time_proj", "time_proj", D, 6 * D)
    six = [0, tokens, 6, D] if token_timesteps else [0, 6, D]
    proj = b.node("Reshape", [proj, b.const("six_rows", np.array(six, np.int64))], hint="time_rows")
    temb_row = b.node("Unsqueeze", [temb, b.const("temb_axis", np.array([-2], np.int64))], hint="temb_row")

    # text: PixArt-alpha projection (Linear, GELU-tanh, Linear)
    ctx = b.linear(text_in, ce + "text_embedder.linear_1", "text_1", text_dim, D, activation="gelu_tanh")
    ctx = b.linear(ctx, ce + "text_embedder.linear_2", "text_2", D, D)
    img_ctx = None
    if image_dim:   # I2V: CLIP's image states through LayerNorm, a GELU MLP and LayerNorm (WanImageEmbedding)
        ie = ce + "image_embedder."

        def affine_norm(x, name, size, hint):
            return b.node("LayerNormalization", [x, b.const(f"{hint}_w", b.weight(name + ".weight", (size,))),
                                                 b.const(f"{hint}_b", b.weight(name + ".bias", (size,)))],
                          {"axis": -1, "epsilon": 1e-5}, hint=hint)
        img_ctx = image_in
        if pos_embed_len:   # diffusers views the batch's images as sequences of pos_embed_seq_len tokens (FLF2V: 2)
            img_ctx = b.node("Reshape", [img_ctx, b.const("img_pairs", np.array([-1, pos_embed_len, image_dim],
                                                                                np.int64))], hint="img_pairs")
            img_ctx = b.node("Add", [img_ctx, b.const("img_pos", b.weight(ie + "pos_embed", (1, pos_embed_len,
                                                                                               image_dim)))],
                             hint="img_pos")
        img_ctx = affine_norm(img_ctx, ie + "norm1", image_dim, "img_norm1")
        img_ctx = b.linear(img_ctx, ie + "ff.net.0.proj", "img_ff1", image_dim, image_dim, activation="gelu")
        img_ctx = affine_norm(b.linear(img_ctx, ie + "ff.net.2", "img_ff2", image_dim, D), ie + "norm2", D,
                              "img_norm2")

    cos_np, sin_np = rope_tables(hd, grid, float(config.get("rope_theta", 10000.0)))
    cos, sin = b.const("rope_cos", cos_np), b.const("rope_sin", sin_np)
    if animate:
        from .wan_animate_graph import face_adapter
        face_heads = int(config.get("face_encoder_num_heads", 4)) + 1
        motion = b.input("motion_vec", [-1, grid[0], face_heads, D], F32)
        inject = int(config.get("inject_face_latents_blocks", 5))
    for i in range(layers):
        p = f"blocks.{i}."
        table = b.const(f"sst{i}", b.weight(p + "scale_shift_table", (1, 6, D)))
        shift, scale, gate, c_shift, c_scale, c_gate = b.modulation(table, proj, 6, f"b{i}", token_timesteps)
        # self-attention
        h = b.modulate(b.layer_norm(x, f"norm1_{i}"), shift, scale, f"mod1_{i}")
        q = b.rms_norm(b.linear(h, p + "attn1.to_q", f"q{i}", D, D), p + "attn1.norm_q", f"qn{i}")
        k = b.rms_norm(b.linear(h, p + "attn1.to_k", f"k{i}", D, D), p + "attn1.norm_k", f"kn{i}")
        v = b.linear(h, p + "attn1.to_v", f"v{i}", D, D)
        a = b.attention(b.rope(q, cos, sin, f"q{i}_rope"), b.rope(k, cos, sin, f"k{i}_rope"), v, f"attn{i}")
        a = b.linear(a, p + "attn1.to_out.0", f"o{i}", D, D)
        x = b.node("Add", [x, b.node("Mul", [a, gate], hint=f"gated_attn{i}")], hint=f"res1_{i}")
        # cross-attention to the text states
        h = b.layer_norm(x, f"norm2_{i}", p + "norm2") if p + "norm2.weight" in b.w else x
        q = b.rms_norm(b.linear(h, p + "attn2.to_q", f"cq{i}", D, D), p + "attn2.norm_q", f"cqn{i}")
        k = b.rms_norm(b.linear(ctx, p + "attn2.to_k", f"ck{i}", D, D), p + "attn2.norm_k", f"ckn{i}")
        v = b.linear(ctx, p + "attn2.to_v", f"cv{i}", D, D)
        a = b.attention(q, k, v, f"cross{i}")
        if img_ctx is not None:   # I2V: the image context attended separately (its own k / v), then added
            ki = b.rms_norm(b.linear(img_ctx, p + "attn2.add_k_proj", f"ik{i}", D, D), p + "attn2.norm_added_k",
                            f"ikn{i}")
            vi = b.linear(img_ctx, p + "attn2.add_v_proj", f"iv{i}", D, D)
            a = b.node("Add", [a, b.attention(q, ki, vi, f"img_cross{i}")], hint=f"cross_sum{i}")
        x = b.linear(a, p + "attn2.to_out.0", f"co{i}", D, D, residual=x)
        # MLP
        h = b.modulate(b.layer_norm(x, f"norm3_{i}"), c_shift, c_scale, f"mod3_{i}")
        h = b.linear(h, p + "ffn.net.0.proj", f"up{i}", D, ffn, activation="gelu_tanh")
        h = b.linear(h, p + "ffn.net.2", f"down{i}", ffn, D)
        x = b.node("Add", [x, b.node("Mul", [h, c_gate], hint=f"gated_ffn{i}")], hint=f"res3_{i}")
        if animate and i % inject == 0:
            x = face_adapter(b, x, motion, i // inject, grid, face_heads)

    shift, scale = b.modulation(b.const("sst_out", b.weight("scale_shift_table", (1, 2, D))), temb_row, 2, "out",
                                token_timesteps)
    x = b.modulate(b.layer_norm(x, "norm_out"), shift, scale, "mod_out")
    x = b.linear(x, "proj_out", "proj_out", D, C_out * int(np.prod(patch)))
    # unpatchify: [B, N, pt*ph*pw*C] -> [B, F', H', W', pt, ph, pw, C] -> [B, C, F', pt, H', ph, W', pw]
    x = b.node("Reshape", [x, b.const("unpatch", np.array([0, *grid, *patch, C_out], np.int64))], hint="unpatch")
    x = b.node("Transpose", [x], {"perm": [0, 7, 1, 4, 2, 5, 3, 6]}, hint="unpatch_t")
    x = b.node("Reshape", [x, b.const("video", np.array([0, C_out, *shape], np.int64))], hint="video")
    sample = b.rename(x, "sample")
    b.g.outputs.append(sample)
    b.g.metadata.update({"producer": "model_zoo.generation.wan_graph", "architecture": "WanTransformer3DModel",
                         "latent_shape": ",".join(map(str, shape)), "weight_format": weight_format,
                         "token_timesteps": str(bool(token_timesteps)).lower()})
    return b.g
