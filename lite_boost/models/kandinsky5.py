"""Ulysses sequence parallelism for diffusers' `Kandinsky5Transformer3DModel` (Kandinsky 5's CrossDiT).

Every rank keeps all weights and the whole text stream (the two text blocks run replicated: a few hundred tokens
against 10^4 visual ones) and 1/N of the visual tokens with their rows of the 3-D RoPE table: split before the first
visual block, gathered after the last. A visual block's self-attention takes the four Ulysses all-to-alls (q / k
normalised, rotated and rounded to bfloat16 per token, as the model does, before they move); its cross-attention
reads the replicated text with the rank's own queries and its MLP and modulations are per token, so neither
communicates. NABLA sparse attention (the 10 s video checkpoints) runs after the all-to-alls, where each rank holds
the whole (fractal-ordered) sequence for its heads: the block map and its selection are per head, so each rank
computes diffusers' nablaT_v2 for its own heads and attends with the model's attention backend (flex)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..parallel.ulysses import gather_sequence, shard_sequence, ulysses_attention, world_size


@dataclass
class _Shard:
    group: object = None
    length: int = 0                      # visual tokens of the current forward (before padding)
    rope: object = None                  # this rank's RoPE rows during a forward
    handles: list = field(default_factory=list)


def _rotate_like_kandinsky(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Kandinsky5AttnProcessor's apply_rotary: 2 x 2 rotations of pairs in float32, the result in bfloat16, back to
    x's dtype."""
    pairs = x.reshape(*x.shape[:-1], -1, 1, 2).to(torch.float32)
    return (rope * pairs).sum(dim=-1).reshape(*x.shape).to(torch.bfloat16).type_as(x)


class UlyssesKandinsky5AttnProcessor:
    """A visual block's self-attention over this rank's tokens (`rotary_emb`: their RoPE rows)."""

    def __init__(self, original, shard: _Shard):
        self.original = original
        self.shard = shard

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, rotary_emb=None, sparse_params=None):
        from diffusers.models.attention_dispatch import dispatch_attention_fn
        if encoder_hidden_states is not None or rotary_emb is None:
            raise NotImplementedError("Kandinsky 5 self-attention without RoPE under sequence parallelism")
        split = (lambda t: t.unflatten(-1, (attn.num_heads, -1)))
        q, k, v = (split(f(hidden_states)) for f in (attn.to_query, attn.to_key, attn.to_value))
        q = _rotate_like_kandinsky(attn.query_norm(q.float()).type_as(q), rotary_emb)
        k = _rotate_like_kandinsky(attn.key_norm(k.float()).type_as(k), rotary_emb)
        backend = getattr(self.original, "_attention_backend", None)

        def attend(qi, ki, vi):   # the whole sequence, this rank's heads
            if sparse_params is None:
                return dispatch_attention_fn(qi, ki, vi, backend=backend)
            from diffusers.models.transformers.transformer_kandinsky import nablaT_v2
            mask = nablaT_v2(qi, ki, sparse_params["sta_mask"], thr=sparse_params["P"])
            return dispatch_attention_fn(qi, ki, vi, attn_mask=mask, backend=backend)

        out = ulysses_attention(q, k, v, length=self.shard.length, group=self.shard.group, attention=attend)
        return attn.out_layer(out.flatten(-2, -1))


def boost_kandinsky5(model, config: dict | None = None):
    """Converts a Kandinsky5Transformer3DModel in place for Ulysses over the process group (no-op at world size 1)."""
    config = config or {}
    group = config.get("group")
    if config.get("attention") or config.get("rope") == "cached":
        raise NotImplementedError("lite_boost's sparse attention and cached RoPE are built for Wan's DiT, not "
                                  "Kandinsky 5 (whose RoPE tables are already cached in the model)")
    n = world_size(group)
    if n == 1 or getattr(model, "_lite_boost_parallel", None):
        return model
    heads = model.config.model_dim // sum(model.config.axes_dims)
    if heads % n:
        raise ValueError(f"Ulysses needs the attention heads ({heads}) to divide by the world size ({n})")
    blocks = list(model.visual_transformer_blocks)
    shard = _Shard(group=group)

    def split_input(module, args):   # (visual_embed, text_embed, time_embed, rope, sparse_params)
        visual, text, time, rope, sparse = args
        visual, shard.length = shard_sequence(visual, dim=1, group=group)
        shard.rope, _ = shard_sequence(rope, dim=1, group=group)
        return visual, text, time, shard.rope, sparse

    def local_rope(module, args):   # every later block gets the model's whole RoPE table: this rank's rows
        return (*args[:3], shard.rope, *args[4:])

    def gather_output(module, args, output):
        shard.rope = None
        return gather_sequence(output, shard.length, dim=1, group=group)

    shard.handles = [blocks[0].register_forward_pre_hook(split_input)]
    shard.handles += [block.register_forward_pre_hook(local_rope) for block in blocks[1:]]
    shard.handles.append(blocks[-1].register_forward_hook(gather_output))
    for block in blocks:
        block.self_attention.set_processor(UlyssesKandinsky5AttnProcessor(block.self_attention.processor, shard))
    model._lite_boost_parallel = {"hooks": shard.handles, "shard": shard}
    return model


def restore_kandinsky5(model):
    """Undoes boost_kandinsky5: no hooks, the original processors."""
    state = getattr(model, "_lite_boost_parallel", None)
    if not state:
        return model
    for h in state["hooks"]:
        h.remove()
    for block in model.visual_transformer_blocks:
        if isinstance(block.self_attention.processor, UlyssesKandinsky5AttnProcessor):
            block.self_attention.set_processor(block.self_attention.processor.original)
    model._lite_boost_parallel = None
    return model
