"""The NABLA reference shared by the Kandinsky 5 tests (runtime graph and lite_boost): diffusers' sparse_params for
a latent, and an exact block-sparse attention for its BlockMask on the CPU."""
from __future__ import annotations

import contextlib

import torch


def nabla_params(model, shape) -> dict:
    """Kandinsky5T2VPipeline.get_sparse_params for a latent (frames, height, width) of `model`'s config."""
    from diffusers import Kandinsky5T2VPipeline
    t, h, w = shape[0], shape[1] // 2, shape[2] // 2
    c = model.config
    sta = Kandinsky5T2VPipeline.fast_sta_nabla(t, h // 8, w // 8, c.attention_wT, c.attention_wH, c.attention_wW,
                                               device="cpu")
    return {"sta_mask": sta[None, None], "attention_type": "nabla", "to_fractal": True, "P": c.attention_P,
            "wT": c.attention_wT, "wW": c.attention_wW, "wH": c.attention_wH, "add_sta": c.attention_add_sta,
            "visual_shape": (t, h, w), "method": c.attention_method}


@contextlib.contextmanager
def exact_block_masks():
    """diffusers attends NABLA's BlockMask with flex_attention, whose eager CPU path treats the block mask as a hint
    (it computes dense attention unless compiled); inside this context a BlockMask is expanded to a dense boolean mask
    for SDPA instead: the block-sparse result the compiled kernel gives. Patches diffusers' dispatch where the
    Kandinsky model and lite_boost look it up."""
    from diffusers.models import attention_dispatch
    from diffusers.models.transformers import transformer_kandinsky
    from torch.nn.attention.flex_attention import BlockMask
    real = attention_dispatch.dispatch_attention_fn

    def dispatch(query, key, value, attn_mask=None, **kwargs):
        if isinstance(attn_mask, BlockMask):
            q_block, k_block = attn_mask.BLOCK_SIZE
            dense = attn_mask.to_dense().bool().repeat_interleave(q_block, -2).repeat_interleave(k_block, -1)
            out = torch.nn.functional.scaled_dot_product_attention(
                query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                attn_mask=dense[..., :query.shape[1], :key.shape[1]])
            return out.transpose(1, 2)
        return real(query, key, value, attn_mask=attn_mask, **kwargs)

    attention_dispatch.dispatch_attention_fn = transformer_kandinsky.dispatch_attention_fn = dispatch
    try:
        yield
    finally:
        attention_dispatch.dispatch_attention_fn = transformer_kandinsky.dispatch_attention_fn = real
