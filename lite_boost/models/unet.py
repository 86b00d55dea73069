"""Sequence parallelism for diffusers' `UNet2DConditionModel` (Stable Diffusion 1.x / 2.x / XL).

A UNet's self-attention is over the pixels of one resolution level (4,096 tokens at SD 1.5's 64 x 64 latents,
16,384 at SDXL's top level when it had attention), and its transformer blocks (self-attention, cross-attention to
the text, GEGLU feed-forward) are where most of its work at high resolution is. Each spatial transformer's token
sequence is split across the ranks before its first block and gathered after its last: LayerNorms, the
cross-attention to the replicated text and the feed-forward run on 1/N of the tokens. Self-attention needs every
token's key and value: with heads divisible by N it takes the Ulysses all-to-alls (the whole sequence for H/N
heads); otherwise (SD 2.x's 5-head level at 2 ranks) every rank all-gathers k and v and attends its own queries over
them. The ResNets, convolutions and GroupNorms stay replicated (a convolution needs its neighbours' pixels: patch
parallelism with halo exchange and GroupNorm statistics all-reduced is not built), so the speed-up is bounded by the
transformers' share of the step. Exact: the same arithmetic, only split. `restore_unet` undoes it."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..parallel.ulysses import gather_sequence, shard_sequence, ulysses_attention, world_size


@dataclass
class _Shard:
    group: object = None
    length: int = 0   # tokens of the current transformer (before padding)


class SequenceParallelSelfAttnProcessor:
    """A BasicTransformerBlock's attn1 over this rank's tokens: Ulysses when the heads divide by the world size,
    else k / v all-gathered."""

    def __init__(self, original, shard: _Shard):
        self.original = original
        self.shard = shard

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, temb=None, **kwargs):
        if encoder_hidden_states is not None or attention_mask is not None or kwargs:
            raise NotImplementedError("a self-attention mask, context or extra arguments under UNet sequence "
                                      "parallelism")
        if attn.spatial_norm is not None or attn.group_norm is not None or attn.residual_connection \
                or attn.rescale_output_factor != 1.0 or hidden_states.ndim != 3:
            raise NotImplementedError("UNet self-attention with spatial / group norm, a residual connection or "
                                      "output rescaling under sequence parallelism")
        group, length = self.shard.group, self.shard.length
        heads = attn.heads
        split = (lambda t: t.unflatten(-1, (heads, -1)))   # [B, S/N, H, D]
        q, k, v = (split(f(hidden_states)) for f in (attn.to_q, attn.to_k, attn.to_v))
        if attn.norm_q is not None:
            q, k = attn.norm_q(q), attn.norm_k(k)

        def sdpa(qf, kf, vf):   # BSND in, BSND out
            out = F.scaled_dot_product_attention(qf.transpose(1, 2), kf.transpose(1, 2), vf.transpose(1, 2),
                                                 scale=attn.scale)
            return out.transpose(1, 2)

        if heads % world_size(group) == 0:
            out = ulysses_attention(q, k, v, length=length, attention=sdpa, group=group)
        else:
            kf = gather_sequence(k, length, dim=1, group=group)
            vf = gather_sequence(v, length, dim=1, group=group)
            out = sdpa(q, kf, vf)
        out = attn.to_out[0](out.flatten(2, 3).to(q.dtype))
        return attn.to_out[1](out)


def _spatial_transformers(model) -> list:
    from diffusers.models.transformers.transformer_2d import Transformer2DModel
    return [m for m in model.modules() if isinstance(m, Transformer2DModel) and len(m.transformer_blocks)]


def boost_unet(model, config: dict | None = None):
    """Converts a UNet2DConditionModel in place: every spatial transformer's tokens split over the process group
    (a no-op at world size 1)."""
    config = config or {}
    group = config.get("group")
    if config.get("attention") or config.get("rope") == "cached":
        raise NotImplementedError("sparse attention and cached RoPE are built for Wan's 3-D token grid, not UNets")
    if world_size(group) == 1 or getattr(model, "_lite_boost_parallel", None):
        return model
    handles = []
    for transformer in _spatial_transformers(model):
        shard = _Shard(group=group)
        blocks = transformer.transformer_blocks

        def split_input(module, args, kwargs, shard=shard):
            x = args[0] if args else kwargs.pop("hidden_states")
            x, shard.length = shard_sequence(x, dim=1, group=group)
            return (x, *args[1:]), kwargs

        def gather_output(module, args, kwargs, output, shard=shard):
            return gather_sequence(output, shard.length, dim=1, group=group)

        handles.append(blocks[0].register_forward_pre_hook(split_input, with_kwargs=True))
        handles.append(blocks[-1].register_forward_hook(gather_output, with_kwargs=True))
        for block in blocks:
            if getattr(block, "only_cross_attention", False):
                raise NotImplementedError("only_cross_attention transformer blocks under UNet sequence parallelism")
            block.attn1.set_processor(SequenceParallelSelfAttnProcessor(block.attn1.processor, shard))
    model._lite_boost_parallel = {"hooks": handles}
    return model


def restore_unet(model):
    state = getattr(model, "_lite_boost_parallel", None)
    if not state:
        return model
    for h in state["hooks"]:
        h.remove()
    for transformer in _spatial_transformers(model):
        for block in transformer.transformer_blocks:
            if isinstance(block.attn1.processor, SequenceParallelSelfAttnProcessor):
                block.attn1.set_processor(block.attn1.processor.original)
    model._lite_boost_parallel = None
    return model
