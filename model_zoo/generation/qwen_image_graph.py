"""The Qwen-Image transformer (diffusers `QwenImageTransformer2DModel`, a dual-stream MMDiT) built from its
checkpoint's tensors, already fused, in the converter's IR: one denoising evaluation for one image size, any text
length up to `max_text_len`.

Inputs: `hidden_states` [batch, tokens, in_channels] (the 2x2-packed latent, rows then columns),
`encoder_hidden_states` [batch, text_len, joint_attention_dim] (Qwen2.5-VL hidden states),
`encoder_hidden_states_mask` [batch, text_len] int64 (1 = a real token) and `timestep` [batch] (t / 1000, as the
pipeline passes it). Output: `sample` [batch, tokens, 4 out_channels].

Text: RMSNorm then a projection; time: diffusers Timesteps(256, scale 1000) and an MLP. Every block modulates both
streams (shift / scale / gate for attention and MLP), RMS-normalises each head's q / k, rotates them with MSRoPE
(frame, row, column axes; rows and columns centred on the image: -h/2 .. h/2 - 1; text positions after the image's
largest index), attends jointly over [text, image] with the padding keys masked, and runs GELU-tanh MLPs."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from converter.ir import ConverterError, Graph

from .flux_graph import DualStreamNames, _FluxBuilder, dual_stream_block
from ..graph_builder import F32, I64
from .wan_graph import timestep_frequencies

DEFAULT_LATENT = (1, 128, 128)   # 1024 x 1024
MAX_TEXT_LEN = 1024
_BOOL = np.dtype(np.bool_)


def _axis_angles(positions: np.ndarray, dim: int, theta: float) -> np.ndarray:
    """diffusers' QwenEmbedRope.rope_params in float32: position x theta^(-2j/dim)."""
    exponent = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    freqs = (np.float32(1.0) / np.power(np.float32(theta), exponent)).astype(np.float32)
    return positions.astype(np.float32)[:, None] * freqs[None, :]


def msrope_tables(axes: Sequence[int], grids: Sequence[tuple[int, int]], max_text: int, theta: float = 10000.0):
    """(image cos, image sin [1, tokens, head_dim/2], text cos, text sin [1, max_text, head_dim/2]) for the images of
    `grids` ((h, w) token grids), one after another: image i on frame i (Qwen-Image-Edit's source image is the
    second), each centred on its own rows and columns; the text after the largest half side of them all."""
    if isinstance(grids[0], int):
        grids = [tuple(grids)]
    image = []
    for frame, (h, w) in enumerate(grids):
        r, c = np.meshgrid(np.arange(-(h - h // 2), h // 2), np.arange(-(w - w // 2), w // 2), indexing="ij")
        image.append(np.concatenate([_axis_angles(np.full(h * w, frame), axes[0], theta),
                                     _axis_angles(r.ravel(), axes[1], theta), _axis_angles(c.ravel(), axes[2], theta)],
                                    axis=1))
    image = np.concatenate(image)
    text_pos = max(max(h // 2, w // 2) for h, w in grids) + np.arange(max_text)
    text = np.concatenate([_axis_angles(text_pos, a, theta) for a in axes], axis=1)
    cast = (lambda a: np.cos(a.astype(np.float64)).astype(F32)[None], lambda a: np.sin(a.astype(np.float64))
            .astype(F32)[None])
    return cast[0](image), cast[1](image), cast[0](text), cast[1](text)


def build_qwen_image_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                           group_size: int = 32, latent_shape: Sequence[int] | None = None,
                           text_len: int | None = None, condition_shape: Sequence[int] | None = None, **_) -> Graph:
    """`latent_shape`: ([1,] height, width) of the VAE latent (default 128 x 128); `text_len`: the longest text the
    graph takes (default 1024); `condition_shape`: ([1,] height, width) of an edit's source-image latent
    (Qwen-Image-Edit): `hidden_states` then holds the noise's packed tokens followed by the source's (frame 1 of the
    RoPE), and `sample` the noise's rows only."""
    for key in ("zero_cond_t", "use_additional_t_cond", "use_layer3d_rope", "guidance_embeds"):
        if config.get(key):
            raise NotImplementedError(f"QwenImageTransformer2DModel with {key} has no graph builder yet")
    if int(config.get("patch_size", 2)) != 2:
        raise NotImplementedError(f"Qwen-Image patch_size {config.get('patch_size')} (built: 2)")
    b = _FluxBuilder(config, weights, weight_format, group_size)
    b.g.name = "qwen_image_transformer"
    D, hd = b.D, b.head_dim
    C_in, C_out = int(config.get("in_channels", 64)), int(config.get("out_channels") or 16)
    joint = int(config.get("joint_attention_dim", 3584))
    axes = [int(a) for a in config.get("axes_dims_rope", (16, 56, 56))]
    if sum(axes) != hd:
        raise ConverterError(f"axes_dims_rope {axes} must sum to attention_head_dim {hd}")
    shapes = [tuple(int(s) for s in (latent_shape or DEFAULT_LATENT))[-2:]]
    if condition_shape is not None:
        shapes.append(tuple(int(s) for s in condition_shape)[-2:])
    for shape in shapes:
        if len(shape) != 2 or min(shape) <= 0 or shape[0] % 2 or shape[1] % 2:
            raise ConverterError(f"latent size {list(shape)} (height, width) must be positive and even (2x2 packing)")
    shape = shapes[0]
    grids = [(h // 2, w // 2) for h, w in shapes]
    out_tokens = grids[0][0] * grids[0][1]
    tokens, max_text = sum(h * w for h, w in grids), int(text_len or MAX_TEXT_LEN)

    x = b.input("hidden_states", [-1, tokens, C_in], F32)
    text = b.input("encoder_hidden_states", [-1, -1, joint], F32)
    mask = b.input("encoder_hidden_states_mask", [-1, -1], I64)
    t_in = b.input("timestep", [-1], F32)

    def i64(hint, v):
        return b.const(hint, np.array(v, np.int64))

    # time: Timesteps(256, flip_sin_to_cos, scale 1000): sin / cos of 1000 * (t * f), then the MLP
    angle = b.node("Mul", [b.node("Mul", [b.node("Unsqueeze", [t_in, i64("t_axis", [1])], hint="t_col"),
                                          b.const("t_freqs", timestep_frequencies(256))], hint="t_f"),
                           b.const("t_scale", np.array(1000.0, F32))], hint="t_angle")
    sinusoid = b.node("Concat", [b.node("Cos", [angle], hint="t_cos"), b.node("Sin", [angle], hint="t_sin")],
                      {"axis": -1}, hint="t_sinusoid")
    tp = "time_text_embed.timestep_embedder."
    temb = b.linear(b.linear(sinusoid, tp + "linear_1", "time_1", 256, D, activation="silu"), tp + "linear_2",
                    "time_2", D, D)
    temb_silu = b.silu(temb, "temb_silu")
    img = b.linear(x, "img_in", "img_in", C_in, D)
    txt = b.node("RMSNormalization", [text, b.const("txt_norm", b.weight("txt_norm.weight", (joint,)))],
                 {"axis": -1, "epsilon": 1e-6}, hint="txt_normed")
    txt = b.linear(txt, "txt_in", "txt_in", joint, D)

    # the joint keys' mask [B, 1, 1, L + N]: the text's, then every image token
    length = b.node("Gather", [b.node("Shape", [text], hint="text_shape", dtype=I64), i64("len_at", [1])], {"axis": 0},
                    hint="text_len", dtype=I64)
    batch = b.node("Gather", [b.node("Shape", [text], hint="text_shape_b", dtype=I64), i64("batch_at", [0])],
                   {"axis": 0}, hint="batch", dtype=I64)
    image_keys = b.node("Expand", [b.const("image_keys", np.ones((1, tokens), np.bool_)),
                                   b.node("Concat", [batch, i64("tokens", [tokens])], {"axis": 0}, hint="img_mask_shape",
                                          dtype=I64)], hint="image_keys", dtype=_BOOL)
    keys = b.node("Concat", [b.node("Cast", [mask], {"to": _BOOL}, hint="text_keys", dtype=_BOOL), image_keys],
                  {"axis": 1}, hint="keys", dtype=_BOOL)
    keys = b.node("Unsqueeze", [keys, i64("keys_axes", [1, 2])], hint="keys_4d", dtype=_BOOL)

    icos, isin, tcos, tsin = msrope_tables(axes, grids, max_text)
    icos, isin = b.const("img_cos", icos), b.const("img_sin", isin)
    cut = [i64("t_from", [0]), length, i64("t_axis1", [1])]
    tcos = b.node("Slice", [b.const("txt_cos", tcos)] + cut, hint="txt_cos_l")
    tsin = b.node("Slice", [b.const("txt_sin", tsin)] + cut, hint="txt_sin_l")

    def attention(q, k, v, hint):
        return b.mha([q, k, v, keys], b.heads, hint)

    names = DualStreamNames(img_mod="img_mod.1", txt_mod="txt_mod.1", img_mlp="img_mlp", txt_mlp="txt_mlp")
    for i in range(int(config.get("num_layers", 60))):
        img, txt = dual_stream_block(b, f"transformer_blocks.{i}.", i, img, txt, temb_silu, names, (icos, isin),
                                     (tcos, tsin), attention, length)

    if out_tokens != tokens:   # an edit: the source image's rows are context, not output
        img = b.node("Slice", [img, i64("out_from", [0]), i64("out_to", [out_tokens]), i64("out_axis", [1])],
                     hint="img_noise_rows")
    scale, shift = b.chunks(b.linear(temb_silu, "norm_out.linear", "out_mod", D, 2 * D), 2, "o")
    img = b.modulate(b.layer_norm(img, "norm_out"), shift, scale, "img_out")
    out = b.rename(b.linear(img, "proj_out", "proj_out", D, 4 * C_out), "sample")
    b.g.outputs.append(out)
    b.g.metadata.update({"producer": "model_zoo.generation.qwen_image_graph", "architecture": "QwenImageTransformer2DModel",
                         "latent_shape": f"{shape[0]},{shape[1]}", "weight_format": weight_format,
                         **({"condition_shape": f"{shapes[1][0]},{shapes[1][1]}"} if len(shapes) > 1 else {})})
    return b.g
