"""The FLUX.1 transformer (diffusers `FluxTransformer2DModel`) built from its checkpoint's tensors, already fused, in
the converter's IR: one denoising evaluation for one image size and text length.

Inputs: `hidden_states` [batch, tokens, in_channels] (the packed latent: 2x2 patches of the VAE latent, rows then
columns), `encoder_hidden_states` [batch, text_len, joint_attention_dim] (T5 states), `pooled_projections` [batch,
pooled_projection_dim] (CLIP's pooled output), `timestep` [batch] (sigma, as the pipeline passes t / 1000) and, for
guidance-distilled checkpoints (FLUX.1-dev), `guidance` [batch]. Output: `sample` [batch, tokens, out_channels].

Double-stream blocks: text and image tokens with their own adaLN-Zero modulations, projections, q/k RMSNorms and
MLPs, one joint attention over [text, image]; single-stream blocks: the joined sequence, attention and MLP in
parallel into one output projection. RoPE: the image tokens' (0, row, column) positions over axes_dims_rope
(interleaved pairs), text tokens at position 0 (no rotation); tables are constants of the graph's size."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, GraphBuilder
from .wan_graph import timestep_frequencies

DEFAULT_LATENT = (1, 128, 128)   # 1024 x 1024 (the VAE's 8x), 4096 image tokens
DEFAULT_TEXT_LEN = 512


def rope_tables(axes_dims: Sequence[int], grid: tuple[int, int], text_len: int, theta: float = 10000.0):
    """cos / sin [1, text_len + tokens, head_dim / 2]: text rows unrotated, image rows at (0, row, column)."""
    rows, cols = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]), indexing="ij")
    positions = [np.zeros(rows.size), rows.ravel().astype(np.float64), cols.ravel().astype(np.float64)]
    parts = []
    for dim, pos in zip(axes_dims, positions):
        freqs = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64)[: dim // 2] / dim)
        parts.append(np.outer(pos, freqs))
    angles = np.concatenate([np.zeros((text_len, sum(axes_dims) // 2)), np.concatenate(parts, axis=1)], axis=0)
    return np.cos(angles).astype(F32)[None], np.sin(angles).astype(F32)[None]


class _FluxBuilder(GraphBuilder):
    def __init__(self, config: Mapping, weights, weight_format: str, group_size: int):
        super().__init__("flux_transformer", weights, weight_format, group_size)
        self.heads, self.head_dim = int(config["num_attention_heads"]), int(config["attention_head_dim"])
        self.D = self.heads * self.head_dim
        self.ln_scale = self.const("ln_ones", np.ones(self.D, F32))
        self.ln_bias = self.const("ln_zeros", np.zeros(self.D, F32))
        self.one = self.const("one", np.ones(1, F32))

    def layer_norm(self, x: str, hint: str, eps: float = 1e-6) -> str:   # elementwise_affine=False
        return self.node("LayerNormalization", [x, self.ln_scale, self.ln_bias], {"axis": -1, "epsilon": eps},
                         hint=hint)

    def silu(self, x: str, hint: str) -> str:
        return self.node("Mul", [x, self.node("Sigmoid", [x], hint=f"{hint}_sig")], hint=hint)

    def chunks(self, emb: str, count: int, hint: str) -> list[str]:
        """`count` rows [B, 1, D] of a modulation projection [B, count * D]."""
        rows = self.node("Reshape", [emb, self.const(f"{hint}_rows", np.array([0, count, self.D], np.int64))],
                         hint=f"{hint}_3d")
        return [self.node("Gather", [rows, self.const(f"{hint}_i{i}", np.array([i], np.int64))], {"axis": 1},
                          hint=f"{hint}_{i}") for i in range(count)]

    def modulate(self, x: str, shift: str, scale: str, hint: str) -> str:
        scaled = self.node("Mul", [x, self.node("Add", [scale, self.one], hint=f"{hint}_1s")], hint=f"{hint}_sc")
        return self.node("Add", [scaled, shift], hint=hint)

    def head_norm(self, x: str, name: str, hint: str, eps: float = 1e-6) -> str:
        """RMSNorm of each head's vector: [B, S, D] -> [B, S, H, d] normalised over d -> [B, S, D]."""
        heads = self.node("Reshape", [x, self.const(f"{hint}_h", np.array([0, 0, self.heads, self.head_dim],
                                                                            np.int64))], hint=f"{hint}_heads")
        n = self.node("RMSNormalization", [heads, self.const(f"{hint}_w", self.weight(name, (self.head_dim,)))],
                      {"axis": -1, "epsilon": eps}, hint=f"{hint}_n")
        return self.node("Reshape", [n, self.const(f"{hint}_f", np.array([0, 0, self.D], np.int64))], hint=hint)

    def rope(self, x: str, cos: str, sin: str, hint: str) -> str:
        return self.node("RotaryEmbedding", [x, cos, sin], {"interleaved": True, "num_heads": self.heads,
                                                            "rotary_embedding_dim": 0}, hint=hint)

    def attention(self, q: str, k: str, v: str, hint: str) -> str:
        return self.mha([q, k, v], self.heads, hint)

    def timestep_mlp(self, t: str, prefix: str, hint: str) -> str:
        """diffusers Timesteps(256, flip_sin_to_cos) of t * 1000, then TimestepEmbedding (Linear, SiLU, Linear)."""
        col = self.node("Unsqueeze", [t, self.const(f"{hint}_axis", np.array([1], np.int64))], hint=f"{hint}_col")
        col = self.node("Mul", [col, self.const(f"{hint}_1000", np.array(1000.0, F32))], hint=f"{hint}_t")
        angle = self.node("Mul", [col, self.const(f"{hint}_freqs", timestep_frequencies(256))], hint=f"{hint}_angle")
        sinusoid = self.node("Concat", [self.node("Cos", [angle], hint=f"{hint}_cos"),
                                        self.node("Sin", [angle], hint=f"{hint}_sin")], {"axis": -1}, hint=hint)
        h = self.linear(sinusoid, prefix + ".linear_1", f"{hint}_1", 256, self.D, activation="silu")
        return self.linear(h, prefix + ".linear_2", f"{hint}_2", self.D, self.D)


@dataclass(frozen=True)
class DualStreamNames:
    """Where a dual-stream block keeps its modulation and MLP tensors (FLUX: norm1.linear / ff; Qwen-Image:
    img_mod.1 / img_mlp)."""
    img_mod: str = "norm1.linear"
    txt_mod: str = "norm1_context.linear"
    img_mlp: str = "ff"
    txt_mlp: str = "ff_context"


def dual_stream_block(b: _FluxBuilder, prefix: str, i: int, img: str, txt: str, temb_silu: str, names: DualStreamNames,
                      img_rope: tuple[str, str], txt_rope: tuple[str, str] | None, attention, text_len: str):
    """One MMDiT block (FLUX's double-stream block, Qwen-Image's): each stream modulated (shift / scale / gate of
    attention and MLP), q / k RMS-normalised per head and rotated per stream, one joint attention over [text,
    image] (`attention(q, k, v, hint)`), split at `text_len` (an int64 [1] value), GELU-tanh MLPs. Returns (img, txt)."""
    D = b.D
    m = b.chunks(b.linear(temb_silu, prefix + names.img_mod, f"imod{i}", D, 6 * D), 6, f"m{i}")
    c = b.chunks(b.linear(temb_silu, prefix + names.txt_mod, f"tmod{i}", D, 6 * D), 6, f"c{i}")
    h = b.modulate(b.layer_norm(img, f"in1_{i}"), m[0], m[1], f"h{i}")
    e = b.modulate(b.layer_norm(txt, f"tn1_{i}"), c[0], c[1], f"e{i}")
    a = prefix + "attn."

    def qk(x, proj, norm, rope, hint):
        y = b.head_norm(b.linear(x, a + proj, hint, D, D), a + norm + ".weight", f"{hint}n")
        return b.rope(y, *rope, f"{hint}_rope") if rope else y

    q = b.node("Concat", [qk(e, "add_q_proj", "norm_added_q", txt_rope, f"aq{i}"),
                          qk(h, "to_q", "norm_q", img_rope, f"q{i}")], {"axis": 1}, hint=f"jq{i}")
    k = b.node("Concat", [qk(e, "add_k_proj", "norm_added_k", txt_rope, f"ak{i}"),
                          qk(h, "to_k", "norm_k", img_rope, f"k{i}")], {"axis": 1}, hint=f"jk{i}")
    v = b.node("Concat", [b.linear(e, a + "add_v_proj", f"av{i}", D, D), b.linear(h, a + "to_v", f"v{i}", D, D)],
               {"axis": 1}, hint=f"jv{i}")
    o = attention(q, k, v, f"attn{i}")
    axis = b.const(f"o_axis{i}", np.array([1], np.int64))
    o_txt = b.node("Slice", [o, b.const(f"o_from{i}", np.array([0], np.int64)), text_len, axis], hint=f"o_txt{i}")
    o_img = b.node("Slice", [o, text_len, b.const(f"o_end{i}", np.array([2 ** 62], np.int64)), axis],
                   hint=f"o_img{i}")

    def residual(x, y, gate, hint):
        return b.node("Add", [x, b.node("Mul", [y, gate], hint=f"{hint}_g")], hint=hint)

    def mlp(x, name, hint):
        h1 = b.linear(x, f"{prefix}{name}.net.0.proj", f"{hint}1", D, 4 * D, activation="gelu_tanh")
        return b.linear(h1, f"{prefix}{name}.net.2", f"{hint}2", 4 * D, D)

    img = residual(img, b.linear(o_img, a + "to_out.0", f"o{i}", D, D), m[2], f"img_a{i}")
    txt = residual(txt, b.linear(o_txt, a + "to_add_out", f"ao{i}", D, D), c[2], f"txt_a{i}")
    img = residual(img, mlp(b.modulate(b.layer_norm(img, f"in2_{i}"), m[3], m[4], f"h2_{i}"), names.img_mlp,
                            f"iff{i}_"), m[5], f"img_f{i}")
    txt = residual(txt, mlp(b.modulate(b.layer_norm(txt, f"tn2_{i}"), c[3], c[4], f"e2_{i}"), names.txt_mlp,
                            f"tff{i}_"), c[5], f"txt_f{i}")
    return img, txt


def build_flux_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                     group_size: int = 32, latent_shape: Sequence[int] | None = None, text_len: int | None = None,
                     **_) -> Graph:
    """`latent_shape`: ([1,] height, width) of the VAE latent (default 128 x 128: 1024 x 1024 pixels); `text_len`:
    the T5 sequence length (default 512, the pipeline's max_sequence_length)."""
    patch = int(config.get("patch_size", 1))
    if patch != 1:
        raise NotImplementedError(f"FLUX patch_size {patch} (built: 1, the released checkpoints')")
    b = _FluxBuilder(config, weights, weight_format, group_size)
    D, hd = b.D, b.head_dim
    C_in = int(config.get("in_channels", 64))
    C_out = int(config.get("out_channels") or C_in)
    joint, pooled = int(config.get("joint_attention_dim", 4096)), int(config.get("pooled_projection_dim", 768))
    axes = [int(a) for a in config.get("axes_dims_rope", (16, 56, 56))]
    if sum(axes) != hd or len(axes) != 3:
        raise ConverterError(f"axes_dims_rope {axes} must be three sizes summing to attention_head_dim {hd}")
    shape = tuple(int(s) for s in (latent_shape or config.get("sample_shape") or DEFAULT_LATENT))[-2:]
    if len(shape) != 2 or min(shape) <= 0 or shape[0] % 2 or shape[1] % 2:
        raise ConverterError(f"latent size {list(shape)} (height, width) must be positive and even (2x2 packing)")
    grid = (shape[0] // 2, shape[1] // 2)
    tokens, L = grid[0] * grid[1], int(text_len or DEFAULT_TEXT_LEN)

    x = b.input("hidden_states", [-1, tokens, C_in], F32)
    text = b.input("encoder_hidden_states", [-1, L, joint], F32)
    pooled_in = b.input("pooled_projections", [-1, pooled], F32)
    t_in = b.input("timestep", [-1], F32)
    tte = "time_text_embed."
    temb = b.timestep_mlp(t_in, tte + "timestep_embedder", "time")
    if config.get("guidance_embeds"):
        g_in = b.input("guidance", [-1], F32)
        temb = b.node("Add", [temb, b.timestep_mlp(g_in, tte + "guidance_embedder", "guid")], hint="time_guid")
    p = b.linear(pooled_in, tte + "text_embedder.linear_1", "pooled_1", pooled, D, activation="silu")
    temb = b.node("Add", [temb, b.linear(p, tte + "text_embedder.linear_2", "pooled_2", D, D)], hint="temb")
    temb_silu = b.silu(temb, "temb_silu")   # every modulation reads SiLU(temb)
    img = b.linear(x, "x_embedder", "x_embed", C_in, D)
    txt = b.linear(text, "context_embedder", "ctx_embed", joint, D)
    cos_np, sin_np = rope_tables(axes, grid, L)
    cos, sin = b.const("rope_cos", cos_np), b.const("rope_sin", sin_np)

    # double-stream blocks: text rows sit at position 0 (their rotation is the identity), so only the image rotates
    icos_np, isin_np = rope_tables(axes, grid, 0)
    img_rope = (b.const("img_cos", icos_np), b.const("img_sin", isin_np))
    text_len = b.const("text_len", np.array([L], np.int64))
    for i in range(int(config.get("num_layers", 19))):
        img, txt = dual_stream_block(b, f"transformer_blocks.{i}.", i, img, txt, temb_silu, DualStreamNames(),
                                     img_rope, None, b.attention, text_len)

    xs = b.node("Concat", [txt, img], {"axis": 1}, hint="joined")
    mlp = int(D * 4.0)
    for i in range(int(config.get("num_single_layers", 38))):
        p = f"single_transformer_blocks.{i}."
        shift, scale, gate = b.chunks(b.linear(temb_silu, p + "norm.linear", f"smod{i}", D, 3 * D), 3, f"s{i}")
        h = b.modulate(b.layer_norm(xs, f"sn{i}"), shift, scale, f"sh{i}")
        a = p + "attn."
        q = b.rope(b.head_norm(b.linear(h, a + "to_q", f"sq{i}", D, D), a + "norm_q.weight", f"sqn{i}"), cos, sin,
                   f"sq{i}_rope")
        k = b.rope(b.head_norm(b.linear(h, a + "to_k", f"sk{i}", D, D), a + "norm_k.weight", f"skn{i}"), cos, sin,
                   f"sk{i}_rope")
        o = b.attention(q, k, b.linear(h, a + "to_v", f"sv{i}", D, D), f"sattn{i}")
        m = b.linear(h, p + "proj_mlp", f"smlp{i}", D, mlp, activation="gelu_tanh")
        out = b.linear(b.node("Concat", [o, m], {"axis": 2}, hint=f"scat{i}"), p + "proj_out", f"sout{i}", D + mlp, D)
        xs = b.node("Add", [xs, b.node("Mul", [out, gate], hint=f"sg{i}")], hint=f"xs{i}")

    img = b.node("Slice", [xs, b.const("img_s", np.array([L], np.int64)),
                           b.const("img_e", np.array([L + tokens], np.int64)), b.const("img_a", np.array([1], np.int64))],
                 hint="img_final")
    scale, shift = b.chunks(b.linear(temb_silu, "norm_out.linear", "out_mod", D, 2 * D), 2, "o")
    img = b.modulate(b.layer_norm(img, "norm_out"), shift, scale, "img_out")
    out = b.rename(b.linear(img, "proj_out", "proj_out", D, C_out), "sample")
    b.g.outputs.append(out)
    b.g.metadata.update({"producer": "model_zoo.generation.flux_graph", "architecture": "FluxTransformer2DModel",
                         "latent_shape": f"{shape[0]},{shape[1]}", "text_len": str(L), "weight_format": weight_format})
    return b.g
