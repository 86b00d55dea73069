"""The Kandinsky 5 CrossDiT (diffusers `Kandinsky5Transformer3DModel`) built from its checkpoint's tensors, already
fused, in the converter's IR: one denoising evaluation for one latent size (frames, height, width), any text length
up to 1024 tokens.

Inputs: `hidden_states` [batch, frames, height, width, channels] (channels last, as the Kandinsky pipelines keep their
latents; with visual_cond the noisy latent, the condition latent and its mask channel), `encoder_hidden_states`
[batch, text_len, in_text_dim] (Qwen2.5-VL states), `pooled_projections` [batch, in_text_dim2] (CLIP's pooled output)
and `timestep` [batch] (the scheduler's t, 0..1000). Output: `sample` [batch, frames, height, width, out_visual_dim].

Time: cos / sin of t x 10000^(-j / (D/2)) (cos first), an MLP, plus the pooled CLIP embedding (Linear, LayerNorm).
Text: Linear + LayerNorm, then text blocks (adaLN self-attention with 1-D RoPE, GELU MLP). Visual tokens (1 x 2 x 2
patches): blocks of adaLN self-attention with 3-D RoPE (frame, row, column axes of axes_dims), cross-attention to the
refined text, GELU MLP. Every attention RMS-normalises each head's q / k (eps: float32's machine epsilon, as
nn.RMSNorm without eps); the self-attentions round q / k to bfloat16 after RoPE (the reference model's
apply_rotary returns bfloat16 even in float32 pipelines, so the graph casts there too to give the same numbers).
The modulated output LayerNorm and the 2 x 2 unpatchify end it.

NABLA (attention_type "nabla", the 10 s video checkpoints): the visual tokens are put in diffusers' fractal order
(each frame's 8 x 8 token squares contiguous: 64-token blocks) after the patch embedding and back before the output
layer, the RoPE tables with them; each visual self-attention averages q and k over every block, takes the softmax of
the block-mean scores per head, keeps the key blocks whose ascending cumulative probability reaches 1 - P (TopK,
CumSum, ScatterElements), ORs the STA window (|frames| <= wT / 2, |block rows| <= wH / 2, |block columns| <= wW / 2:
a constant) and attends only those 64 x 64 blocks (the Attention operator's block mask)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from converter.dtypes import BFLOAT16
from converter.ir import ConverterError, Graph, Node, Tensor

from .flux_graph import _FluxBuilder
from ..graph_builder import F32, I64

DEFAULT_LATENT = (1, 128, 128)   # a 1024 x 1024 image through the 8x VAE
MAX_TEXT_LEN = 1024              # Kandinsky5RoPE1D's table
_LN_EPS = 1e-5                   # nn.LayerNorm's default
_RMS_EPS = float(np.finfo(np.float32).eps)
_BOOL = np.dtype(np.bool_)


def video_rope_scale(height: int, width: int) -> tuple[float, float, float]:
    """Kandinsky5T2VPipeline._get_scale_factor: the (frame, row, column) RoPE divisors of a video size in pixels."""
    return (1.0, 2.0, 2.0) if 480 <= height <= 854 and 480 <= width <= 854 else (1.0, 3.16, 3.16)


def _freqs(dim: int, max_period: float = 10000.0) -> np.ndarray:
    """Kandinsky's get_freqs in float32: exp(-ln(max_period) j / dim), j < dim."""
    return np.exp(np.float32(-np.log(max_period)) * np.arange(dim, dtype=np.float32) / np.float32(dim)).astype(F32)


def rope_tables(axes: Sequence[int], shape: tuple[int, int, int], max_text: int,
                scale: Sequence[float] = (1.0, 1.0, 1.0)):
    """(visual cos, sin [1, frames x rows x columns, head_dim/2], text cos, sin [1, max_text, head_dim/2]): the
    angles in float32 as the reference computes them (position x frequency, divided by the pipeline's scale)."""
    t, h, w = shape
    grids = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
    parts = [(g.ravel().astype(F32)[:, None] * _freqs(a // 2)[None]) / np.float32(s)
             for g, a, s in zip(grids, axes, scale)]
    visual = np.concatenate(parts, axis=1)
    text = np.arange(max_text, dtype=F32)[:, None] * _freqs(sum(axes) // 2)[None]

    def cos_sin(a):
        return np.cos(a).astype(F32)[None], np.sin(a).astype(F32)[None]
    return (*cos_sin(visual), *cos_sin(text))


NABLA_BLOCK = 64   # tokens per block: one frame's 8 x 8 token square


def fractal_order(shape: tuple[int, int, int]) -> np.ndarray:
    """diffusers' fractal_flatten (local_patching with (1, 8, 8)): position i of the fractal sequence holds token
    fractal_order(shape)[i] of the (frame, row, column) order."""
    t, h, w = shape
    idx = np.arange(t * h * w).reshape(t, h // 8, 8, w // 8, 8)
    return idx.transpose(0, 1, 3, 2, 4).reshape(-1)


def sta_block_mask(shape: tuple[int, int, int], wt: int, wh: int, ww: int) -> np.ndarray:
    """Kandinsky5T2VPipeline.fast_sta_nabla over the (frame, block row, block column) grid of 64-token blocks:
    [blocks, blocks] bool."""
    t, h, w = shape[0], shape[1] // 8, shape[2] // 8
    ft, fr, fc = (a.ravel() for a in np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij"))
    near = (np.abs(ft[:, None] - ft[None]) <= wt // 2) & (np.abs(fr[:, None] - fr[None]) <= wh // 2) & \
        (np.abs(fc[:, None] - fc[None]) <= ww // 2)
    return near


class _KandinskyBuilder(_FluxBuilder):
    nabla: dict | None = None   # set for NABLA attention: P and the STA mask constant

    def __init__(self, config: Mapping, weights, weight_format: str, group_size: int):
        hd = sum(int(a) for a in config["axes_dims"])
        D = int(config["model_dim"])
        if D % hd:
            raise ConverterError(f"model_dim {D} must divide by the head size sum(axes_dims) = {hd}")
        super().__init__({"num_attention_heads": D // hd, "attention_head_dim": hd}, weights, weight_format,
                         group_size)
        self.time_dim, self.ff_dim = int(config.get("time_dim", 512)), int(config["ff_dim"])

    def affine_norm(self, x: str, prefix: str, dim: int, hint: str) -> str:
        return self.node("LayerNormalization", [x, self.const(f"{hint}_g", self.weight(prefix + ".weight", (dim,))),
                                                self.const(f"{hint}_b", self.weight(prefix + ".bias", (dim,)))],
                         {"axis": -1, "epsilon": _LN_EPS}, hint=hint)

    def modulated(self, x: str, shift: str, scale: str, hint: str) -> str:
        return self.modulate(self.layer_norm(x, f"{hint}_ln", eps=_LN_EPS), shift, scale, hint)

    def gated(self, x: str, y: str, gate: str, hint: str) -> str:
        return self.node("Add", [x, self.node("Mul", [y, gate], hint=f"{hint}_g")], hint=hint)

    def attention_block(self, x: str, context: str | None, prefix: str, rope: tuple[str, str] | None,
                        hint: str, sparse: bool = False) -> str:
        """Kandinsky5Attention: self-attention (context None; q / k rotated, then rounded to bfloat16; `sparse`:
        NABLA's block selection) or cross-attention to `context`."""
        D = self.D
        kv_in = x if context is None else context

        def qk(src, proj, norm, h):
            y = self.head_norm(self.linear(src, prefix + proj, h, D, D), prefix + norm + ".weight", f"{h}n",
                               eps=_RMS_EPS)
            if rope is None:
                return y
            y = self.rope(y, *rope, f"{h}_rope")
            as_bf16 = self.node("Cast", [y], {"to": BFLOAT16}, hint=f"{h}_bf16", dtype=BFLOAT16)
            return self.node("Cast", [as_bf16], {"to": F32}, hint=f"{h}_r")

        q = qk(x, "to_query", "query_norm", f"{hint}q")
        k = qk(kv_in, "to_key", "key_norm", f"{hint}k")
        v = self.linear(kv_in, prefix + "to_value", f"{hint}v", D, D)
        if sparse:
            out = self.nabla_attention(q, k, v, hint)
        else:
            out = self.attention(q, k, v, f"{hint}_attn")
        return self.linear(out, prefix + "out_layer", f"{hint}o", D, D)

    def nabla_attention(self, q: str, k: str, v: str, hint: str) -> str:
        """nablaT_v2: the block map from block-mean q / k, top-CDF selection, OR the STA window, block-sparse
        attention (the visual tokens in fractal order)."""
        blocks, H, d = self.nabla["blocks"], self.heads, self.head_dim

        def i64(name, values):
            return self.const(f"{hint}_{name}", np.array(values, np.int64))

        def block_means(x, name):   # [B, S, H d] -> [B, H, blocks, d]
            x = self.node("Reshape", [x, i64(f"{name}_5d", [0, blocks, NABLA_BLOCK, H, d])], hint=f"{hint}_{name}5")
            x = self.node("ReduceMean", [x, i64(f"{name}_ax", [2])], {"keepdims": 0}, hint=f"{hint}_{name}m")
            return self.node("Transpose", [x], {"perm": [0, 2, 1, 3]}, hint=f"{hint}_{name}h")

        qa, ka = block_means(q, "qa"), block_means(k, "ka")
        scores = self.node("MatMul", [qa, self.node("Transpose", [ka], {"perm": [0, 1, 3, 2]}, hint=f"{hint}_kaT")],
                           hint=f"{hint}_map")
        scores = self.node("Mul", [scores, self.const(f"{hint}_scale", np.array(1 / np.sqrt(d), F32))],
                           hint=f"{hint}_maps")
        probs = self.node("Softmax", [scores], {"axis": -1}, hint=f"{hint}_mapp")
        ascending = self.g.unique_name(f"{hint}_asc")
        order = self.g.unique_name(f"{hint}_order")
        self.g.tensors[ascending] = Tensor(ascending, F32, None)
        self.g.tensors[order] = Tensor(order, I64, None)
        self.g.nodes.append(Node(self.g.unique_name(f"{hint}_topk"), "TopK", [probs, i64("k", [blocks])],
                                 [ascending, order], {"axis": -1, "largest": False, "sorted": True}))
        cdf = self.node("CumSum", [ascending, i64("cum_ax", 3)], hint=f"{hint}_cdf")
        keep = self.node("GreaterOrEqual", [cdf, self.const(f"{hint}_thr", np.array(1 - self.nabla["P"], F32))],
                         hint=f"{hint}_keep", dtype=_BOOL)
        zeros = self.node("Cast", [self.node("Mul", [probs, self.const(f"{hint}_zero", np.array(0, F32))],
                                             hint=f"{hint}_z")], {"to": _BOOL}, hint=f"{hint}_none", dtype=_BOOL)
        mask = self.node("ScatterElements", [zeros, order, keep], {"axis": -1}, hint=f"{hint}_sel", dtype=_BOOL)
        mask = self.node("Or", [mask, self.nabla["sta"]], hint=f"{hint}_blocks", dtype=_BOOL)
        return self.node("Attention", [q, k, v, "", "", "", "", "", "", mask],
                         {"q_num_heads": H, "kv_num_heads": H, "scale": 0.0, "is_causal": False, "q_layout": "BSND",
                          "k_layout": "BSND", "v_layout": "BSND", "out_layout": "BSND", "block_size": NABLA_BLOCK},
                         hint=f"{hint}_attn")

    def feed_forward(self, x: str, prefix: str, hint: str) -> str:
        h = self.linear(x, prefix + "in_layer", f"{hint}1", self.D, self.ff_dim, activation="gelu")
        return self.linear(h, prefix + "out_layer", f"{hint}2", self.ff_dim, self.D)


def build_kandinsky5_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                           group_size: int = 32, latent_shape: Sequence[int] | None = None,
                           text_len: int | None = None, rope_scale: Sequence[float] | None = None, **_) -> Graph:
    """`latent_shape`: ([frames,] height, width) of the VAE latent (default 1 x 128 x 128); `text_len`: the longest
    text the graph takes (default and most: 1024, the reference's RoPE table); `rope_scale`: the pipeline's
    (frame, row, column) RoPE divisors (text-to-image 1, 1, 1)."""
    if config.get("attention_type", "regular") not in ("regular", "nabla"):
        raise NotImplementedError(f"Kandinsky 5 attention_type {config.get('attention_type')!r} has no graph builder "
                                  "(built: regular, nabla)")
    patch = [int(p) for p in config.get("patch_size", (1, 2, 2))]
    if patch != [1, 2, 2]:
        raise NotImplementedError(f"Kandinsky 5 patch_size {patch} (built: [1, 2, 2], the released checkpoints')")
    axes = [int(a) for a in config.get("axes_dims", (16, 24, 24))]
    if len(axes) != 3 or any(a % 2 for a in axes):
        raise ConverterError(f"axes_dims {axes} must be three even sizes")
    b = _KandinskyBuilder(config, weights, weight_format, group_size)
    b.g.name = "kandinsky5_transformer"
    D, T_dim = b.D, b.time_dim
    C_vis = int(config.get("in_visual_dim", 4))
    C_in = 2 * C_vis + 1 if config.get("visual_cond") else C_vis
    C_out = int(config.get("out_visual_dim", 4))
    text_dim, pooled_dim = int(config.get("in_text_dim", 3584)), int(config.get("in_text_dim2", 768))
    shape = tuple(int(s) for s in (latent_shape or DEFAULT_LATENT))
    shape = (1,) * (3 - len(shape)) + shape
    if len(shape) != 3 or min(shape) <= 0 or shape[1] % 2 or shape[2] % 2:
        raise ConverterError(f"latent size {list(shape)} (frames, height, width) must be positive with even height "
                             "and width (2x2 patches)")
    frames, grid = shape[0], (shape[1] // 2, shape[2] // 2)
    tokens, max_text = frames * grid[0] * grid[1], int(text_len or MAX_TEXT_LEN)
    if not 0 < max_text <= MAX_TEXT_LEN:
        raise ConverterError(f"text_len {max_text}: the reference's text RoPE covers 1..{MAX_TEXT_LEN} tokens")

    def i64(hint, v):
        return b.const(hint, np.array(v, np.int64))

    x = b.input("hidden_states", [-1, *shape, C_in], F32)
    text = b.input("encoder_hidden_states", [-1, -1, text_dim], F32)
    pooled = b.input("pooled_projections", [-1, pooled_dim], F32)
    t_in = b.input("timestep", [-1], F32)

    # time: cos / sin of t x freqs (cos first), Linear, SiLU, Linear; plus the pooled text embedding
    angle = b.node("Mul", [b.node("Unsqueeze", [t_in, i64("t_axis", [1])], hint="t_col"),
                           b.const("t_freqs", _freqs(D // 2))], hint="t_angle")
    sinusoid = b.node("Concat", [b.node("Cos", [angle], hint="t_cos"), b.node("Sin", [angle], hint="t_sin")],
                      {"axis": -1}, hint="t_sinusoid")
    temb = b.linear(b.linear(sinusoid, "time_embeddings.in_layer", "time_1", D, T_dim, activation="silu"),
                    "time_embeddings.out_layer", "time_2", T_dim, T_dim)
    p = b.affine_norm(b.linear(pooled, "pooled_text_embeddings.in_layer", "pooled_in", pooled_dim, T_dim),
                      "pooled_text_embeddings.norm", T_dim, "pooled_norm")
    temb_silu = b.silu(b.node("Add", [temb, p], hint="temb"), "temb_silu")   # every modulation reads SiLU(temb)

    txt = b.affine_norm(b.linear(text, "text_embeddings.in_layer", "txt_in", text_dim, D), "text_embeddings.norm", D,
                        "txt_norm")
    # 1 x 2 x 2 patches, channels last: [B F, h, 2, w, 2, C] -> [B, F h w, 2 x 2 x C]
    h, w = grid
    patches = b.node("Transpose", [b.node("Reshape", [x, i64("patch_6d", [-1, h, 2, w, 2, C_in])], hint="x_6d")],
                     {"perm": [0, 1, 3, 2, 4, 5]}, hint="x_patches")
    img = b.linear(b.node("Reshape", [patches, i64("patch_rows", [-1, tokens, 4 * C_in])], hint="x_rows"),
                   "visual_embeddings.in_layer", "x_embed", 4 * C_in, D)

    vcos, vsin, tcos, tsin = rope_tables(axes, (frames, h, w), max_text, rope_scale or (1.0, 1.0, 1.0))
    order = None
    if config.get("attention_type") == "nabla":
        if h % 8 or w % 8:
            raise ConverterError(f"NABLA attention needs a token grid of multiples of 8 (diffusers' fractal 8 x 8 "
                                 f"blocks); the latent {list(shape)} gives {h} x {w} tokens per frame")
        order = fractal_order((frames, h, w))
        b.nabla = {"P": float(config.get("attention_P") or 0.9), "blocks": tokens // NABLA_BLOCK,
                   "sta": b.const("sta", sta_block_mask((frames, h, w), int(config.get("attention_wT") or 3),
                                                        int(config.get("attention_wH") or 3),
                                                        int(config.get("attention_wW") or 3))[None, None])}
        img = b.node("Gather", [img, i64("to_fractal", order)], {"axis": 1}, hint="x_fractal")
        vcos, vsin = vcos[:, order], vsin[:, order]
    length = b.node("Gather", [b.node("Shape", [text], hint="text_shape", dtype=I64), i64("len_at", [1])],
                    {"axis": 0}, hint="text_len", dtype=I64)
    cut = [i64("t_from", [0]), length, i64("t_axis1", [1])]
    text_rope = (b.node("Slice", [b.const("txt_cos", tcos)] + cut, hint="txt_cos_l"),
                 b.node("Slice", [b.const("txt_sin", tsin)] + cut, hint="txt_sin_l"))
    visual_rope = (b.const("img_cos", vcos), b.const("img_sin", vsin))

    for i in range(int(config.get("num_text_blocks", 2))):
        pre = f"text_transformer_blocks.{i}."
        m = b.chunks(b.linear(temb_silu, pre + "text_modulation.out_layer", f"tmod{i}", T_dim, 6 * D), 6, f"tm{i}")
        a = b.attention_block(b.modulated(txt, m[0], m[1], f"tsa{i}"), None, pre + "self_attention.", text_rope,
                              f"ts{i}")
        txt = b.gated(txt, a, m[2], f"txt_a{i}")
        f = b.feed_forward(b.modulated(txt, m[3], m[4], f"tff{i}"), pre + "feed_forward.", f"tf{i}_")
        txt = b.gated(txt, f, m[5], f"txt_f{i}")

    for i in range(int(config.get("num_visual_blocks", 32))):
        pre = f"visual_transformer_blocks.{i}."
        m = b.chunks(b.linear(temb_silu, pre + "visual_modulation.out_layer", f"vmod{i}", T_dim, 9 * D), 9, f"vm{i}")
        a = b.attention_block(b.modulated(img, m[0], m[1], f"vsa{i}"), None, pre + "self_attention.", visual_rope,
                              f"vs{i}", sparse=b.nabla is not None)
        img = b.gated(img, a, m[2], f"img_s{i}")
        c = b.attention_block(b.modulated(img, m[3], m[4], f"vca{i}"), txt, pre + "cross_attention.", None, f"vc{i}")
        img = b.gated(img, c, m[5], f"img_c{i}")
        f = b.feed_forward(b.modulated(img, m[6], m[7], f"vff{i}"), pre + "feed_forward.", f"vf{i}_")
        img = b.gated(img, f, m[8], f"img_f{i}")

    if order is not None:   # back from the fractal order
        img = b.node("Gather", [img, i64("from_fractal", np.argsort(order))], {"axis": 1}, hint="x_unfractal")
    shift, scale = b.chunks(b.linear(temb_silu, "out_layer.modulation.out_layer", "out_mod", T_dim, 2 * D), 2, "o")
    out = b.linear(b.modulated(img, shift, scale, "img_out"), "out_layer.out_layer", "proj_out", D, 4 * C_out)
    # [B F, h, w, C, 2, 2] -> [B F, h, 2, w, 2, C] -> [B, F, H, W, C]
    out = b.node("Transpose", [b.node("Reshape", [out, i64("out_6d", [-1, h, w, C_out, 2, 2])], hint="out_6d")],
                 {"perm": [0, 1, 4, 2, 5, 3]}, hint="out_patches")
    out = b.rename(b.node("Reshape", [out, i64("out_5d", [-1, frames, 2 * h, 2 * w, C_out])], hint="out_5d"),
                   "sample")
    b.g.outputs.append(out)
    b.g.metadata.update({"producer": "model_zoo.generation.kandinsky5_graph", "architecture": "Kandinsky5Transformer3DModel",
                         "latent_shape": ",".join(str(s) for s in shape), "weight_format": weight_format})
    return b.g
