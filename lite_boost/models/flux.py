"""Ulysses sequence parallelism for diffusers' `FluxTransformer2DModel` (FLUX.1's MMDiT).

FLUX attends jointly over [text, image] tokens. Every rank keeps all weights, all text tokens and 1/N of the image
tokens (split before the first block, gathered after the last). In each attention (double- and single-stream
blocks) the image q / k / v take the Ulysses all-to-alls (the whole image for H/N heads), the text q / k / v are
cut to the same H/N heads locally; the joint sequence gets its rotary embedding and attention; the image part goes
back by the fourth all-to-all and the text part is all-gathered over heads, so the text stream stays replicated and
identical on every rank. Cost per attention: the four all-to-alls of the image tokens plus one all-gather of the
text output ([B, L, H/N, D] per rank). `restore_flux` undoes it; ControlNet residuals are refused while sharded."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..parallel.ulysses import gather_sequence, rank, shard_sequence, ulysses_attention, world_size


@dataclass
class _Shard:
    group: object = None
    length: int = 0                       # image tokens of the current forward (before padding)
    text_len: int = 0
    held: dict = field(default_factory=dict)


def _gather_heads(x: torch.Tensor, group) -> torch.Tensor:
    """[B, L, H/N, D] on every rank -> [B, L, H, D] (rank order = head order)."""
    parts = [torch.empty_like(x) for _ in range(world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=2)


class UlyssesFluxAttnProcessor:
    def __init__(self, original, shard: _Shard):
        self.original = original
        self.shard = shard

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, image_rotary_emb=None,
                 **kwargs):
        if attention_mask is not None or kwargs or image_rotary_emb is None:
            raise NotImplementedError("FLUX attention masks, IP-adapters or no rotary embedding under sequence "
                                      "parallelism")
        from diffusers.models.attention_dispatch import dispatch_attention_fn
        from diffusers.models.embeddings import apply_rotary_emb
        shard, group = self.shard, self.shard.group
        n, r = world_size(group), rank(group)
        double = encoder_hidden_states is not None
        split = (lambda t: t.unflatten(-1, (-1, attn.head_dim)))
        if double:
            q, k, v = (split(f(hidden_states)) for f in (attn.to_q, attn.to_k, attn.to_v))
            qt, kt, vt = (split(f(encoder_hidden_states)) for f in (attn.add_q_proj, attn.add_k_proj,
                                                                    attn.add_v_proj))
            qt, kt = attn.norm_added_q(qt), attn.norm_added_k(kt)
            q, k = attn.norm_q(q), attn.norm_k(k)
        else:   # the joint sequence: the text rows, then this rank's image rows
            L = shard.text_len
            q, k, v = (split(f(hidden_states)) for f in (attn.to_q, attn.to_k, attn.to_v))
            q, k = attn.norm_q(q), attn.norm_k(k)
            qt, kt, vt = q[:, :L], k[:, :L], v[:, :L]
            q, k, v = q[:, L:], k[:, L:], v[:, L:]
        L, hs = qt.shape[1], q.shape[2] // n
        heads = slice(r * hs, (r + 1) * hs)
        cos, sin = image_rotary_emb
        held = {}

        def attend(qi, ki, vi):   # the whole image for this rank's heads, the text cut to the same heads
            seq = L + qi.shape[1]
            rotary = (cos[:seq], sin[:seq])
            qj = apply_rotary_emb(torch.cat([qt[:, :, heads], qi], dim=1), rotary, sequence_dim=1)
            kj = apply_rotary_emb(torch.cat([kt[:, :, heads], ki], dim=1), rotary, sequence_dim=1)
            vj = torch.cat([vt[:, :, heads], vi], dim=1)
            out = dispatch_attention_fn(qj, kj, vj, attn_mask=None)
            held["text"] = out[:, :L]
            return out[:, L:]

        image = ulysses_attention(q, k, v, length=shard.length, attention=attend, group=group).flatten(2, 3)
        text = _gather_heads(held["text"], group).flatten(2, 3)
        image, text = image.to(q.dtype), text.to(q.dtype)
        if double:
            image = attn.to_out[1](attn.to_out[0](image))
            return image, attn.to_add_out(text)
        return torch.cat([text, image], dim=1)


_BLOCK_ARGS = ("hidden_states", "encoder_hidden_states", "temb", "image_rotary_emb")


def _args(args, kwargs, names=_BLOCK_ARGS):
    values = dict(zip(names, args))
    values.update({k: v for k, v in kwargs.items() if k in names})
    rest = {k: v for k, v in kwargs.items() if k not in names}
    return values, rest


def boost_flux(model, config: dict | None = None):
    """Converts a FluxTransformer2DModel in place for Ulysses over the process group (a no-op at world size 1)."""
    config = config or {}
    group = config.get("group")
    if config.get("attention") or config.get("rope") == "cached":
        raise NotImplementedError("sparse attention and cached RoPE are built for Wan's 3-D token grid, not FLUX")
    n = world_size(group)
    if n == 1 or getattr(model, "_lite_boost_parallel", None):
        return model
    heads = model.config.num_attention_heads
    if heads % n:
        raise ValueError(f"Ulysses needs the attention heads ({heads}) to divide by the world size ({n})")

    def refuse_controlnet(module, args, kwargs):
        if kwargs.get("controlnet_block_samples") is not None or kwargs.get("controlnet_single_block_samples") \
                is not None:
            raise NotImplementedError("ControlNet residuals under FLUX sequence parallelism")

    handles = [model.register_forward_pre_hook(refuse_controlnet, with_kwargs=True)]
    return shard_joint_blocks(model, _flux_blocks(model), UlyssesFluxAttnProcessor, group, handles=handles)


def _flux_blocks(model) -> list:
    return list(model.transformer_blocks) + list(model.single_transformer_blocks)


def shard_joint_blocks(model, blocks: list, processor_cls, group, names=_BLOCK_ARGS, handles=None):
    """The sharding shared by the joint [text, image] attention models: the image tokens split before blocks[0]
    (arguments by `names`) and gathered after blocks[-1] (its output is (text, image)); every block's `attn` gets
    `processor_cls(original, shard)`."""
    shard = _Shard(group=group)
    handles = list(handles or [])

    def split_input(module, args, kwargs):
        values, rest = _args(args, kwargs, names)
        shard.text_len = values["encoder_hidden_states"].shape[1]
        values["hidden_states"], shard.length = shard_sequence(values["hidden_states"], dim=1, group=group)
        return (), {**values, **rest}

    def gather_output(module, args, kwargs, output):
        text, image = output
        return text, gather_sequence(image, shard.length, dim=1, group=group)

    handles.append(blocks[0].register_forward_pre_hook(split_input, with_kwargs=True))
    handles.append(blocks[-1].register_forward_hook(gather_output, with_kwargs=True))
    for block in blocks:
        block.attn.set_processor(processor_cls(block.attn.processor, shard))
    model._lite_boost_parallel = {"hooks": handles, "shard": shard}
    return model


def restore_joint_blocks(model, blocks: list, processor_cls):
    """Undoes shard_joint_blocks: no hooks, the original processors."""
    state = getattr(model, "_lite_boost_parallel", None)
    if not state:
        return model
    for h in state["hooks"]:
        h.remove()
    for block in blocks:
        if isinstance(block.attn.processor, processor_cls):
            block.attn.set_processor(block.attn.processor.original)
    model._lite_boost_parallel = None
    return model


def restore_flux(model):
    return restore_joint_blocks(model, _flux_blocks(model), UlyssesFluxAttnProcessor)
