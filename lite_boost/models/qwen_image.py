"""Ulysses sequence parallelism for diffusers' `QwenImageTransformer2DModel` (Qwen-Image's dual-stream MMDiT).

As for FLUX (lite_boost/models/flux.py): every rank keeps all weights, the whole text stream and 1/N of the image
tokens. In each block's joint attention the image q / k / v take the four Ulysses all-to-alls, the text q / k / v
are cut to the rank's H/N heads locally; each stream gets its own MSRoPE rotation (the image's over the whole image),
the joint attention keeps diffusers' text padding mask, the image part goes back by all-to-all and the text part is
all-gathered over heads. Edit models' zero_cond_t (two modulations per sample) is refused while sharded."""
from __future__ import annotations

import torch

from ..parallel.ulysses import rank, ulysses_attention, world_size
from .flux import _gather_heads, _Shard, restore_joint_blocks, shard_joint_blocks

_BLOCK_ARGS = ("hidden_states", "encoder_hidden_states", "encoder_hidden_states_mask", "temb", "image_rotary_emb")


class UlyssesQwenImageAttnProcessor:
    def __init__(self, original, shard: _Shard):
        self.original = original
        self.shard = shard

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, encoder_hidden_states_mask=None,
                 attention_mask=None, image_rotary_emb=None):
        from diffusers.models.attention_dispatch import dispatch_attention_fn
        from diffusers.models.transformers.transformer_qwenimage import apply_rotary_emb_qwen
        if encoder_hidden_states is None or attention_mask is not None:
            raise NotImplementedError("Qwen-Image attention without a text stream, or with an external mask, under "
                                      "sequence parallelism")
        shard, group = self.shard, self.shard.group
        n, r = world_size(group), rank(group)
        split = (lambda t: t.unflatten(-1, (-1, attn.inner_dim // attn.heads)))
        q, k, v = (split(f(hidden_states)) for f in (attn.to_q, attn.to_k, attn.to_v))
        qt, kt, vt = (split(f(encoder_hidden_states)) for f in (attn.add_q_proj, attn.add_k_proj, attn.add_v_proj))
        if attn.norm_q is not None:
            q = attn.norm_q(q)
        if attn.norm_k is not None:
            k = attn.norm_k(k)
        if attn.norm_added_q is not None:
            qt = attn.norm_added_q(qt)
        if attn.norm_added_k is not None:
            kt = attn.norm_added_k(kt)
        img_freqs, txt_freqs = image_rotary_emb
        qt, kt = apply_rotary_emb_qwen(qt, txt_freqs, use_real=False), apply_rotary_emb_qwen(kt, txt_freqs,
                                                                                              use_real=False)
        L, hs = qt.shape[1], q.shape[2] // n
        heads = slice(r * hs, (r + 1) * hs)
        held = {}

        def attend(qi, ki, vi):   # the whole image for this rank's heads
            qi = apply_rotary_emb_qwen(qi, img_freqs[:qi.shape[1]], use_real=False)
            ki = apply_rotary_emb_qwen(ki, img_freqs[:ki.shape[1]], use_real=False)
            mask = None
            if encoder_hidden_states_mask is not None:
                image_keys = torch.ones(qi.shape[0], qi.shape[1], dtype=torch.bool, device=qi.device)
                mask = torch.cat([encoder_hidden_states_mask.bool(), image_keys], dim=1)[:, None, None, :]
            out = dispatch_attention_fn(torch.cat([qt[:, :, heads], qi], dim=1), torch.cat([kt[:, :, heads], ki], 1),
                                        torch.cat([vt[:, :, heads], vi], dim=1), attn_mask=mask, dropout_p=0.0,
                                        is_causal=False)
            held["text"] = out[:, :L]
            return out[:, L:]

        image = ulysses_attention(q, k, v, length=shard.length, attention=attend, group=group).flatten(2, 3)
        text = _gather_heads(held["text"], group).flatten(2, 3)
        image = attn.to_out[0](image.to(q.dtype).contiguous())
        if len(attn.to_out) > 1:
            image = attn.to_out[1](image)
        return image, attn.to_add_out(text.to(q.dtype).contiguous())


def boost_qwen_image(model, config: dict | None = None):
    """Converts a QwenImageTransformer2DModel in place for Ulysses over the process group (no-op at world size 1)."""
    config = config or {}
    group = config.get("group")
    if config.get("attention") or config.get("rope") == "cached":
        raise NotImplementedError("sparse attention and cached RoPE are built for Wan's 3-D token grid, not Qwen-Image")
    n = world_size(group)
    if n == 1 or getattr(model, "_lite_boost_parallel", None):
        return model
    if model.config.get("zero_cond_t"):
        raise NotImplementedError("Qwen-Image-Edit's zero_cond_t (per-token modulation) under sequence parallelism")
    heads = model.config.num_attention_heads
    if heads % n:
        raise ValueError(f"Ulysses needs the attention heads ({heads}) to divide by the world size ({n})")
    return shard_joint_blocks(model, list(model.transformer_blocks), UlyssesQwenImageAttnProcessor, group,
                              names=_BLOCK_ARGS)


def restore_qwen_image(model):
    return restore_joint_blocks(model, list(model.transformer_blocks), UlyssesQwenImageAttnProcessor)
