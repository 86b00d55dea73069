"""Ulysses sequence parallelism for diffusers' `WanAnimateTransformer3DModel` (Wan 2.2 Animate).

Its transformer blocks are Wan's: they are sharded as `boost_wan_dit` shards them (tokens split before the first
block, gathered after the last, Ulysses self-attention; sparse attention and cached RoPE as configured). Between
blocks the face adapters run on the rank's tokens (the one after the last block on the gathered sequence, as in the
original): each token attends to the motion tokens of its own latent frame
(the motion features are replicated), so a rank only needs the frame of each of its tokens, which its position in
the whole sequence gives; no communication. The motion and face encoders and the pose embedding run before the
first block, replicated."""
from __future__ import annotations

import torch

from ..parallel.ulysses import rank, world_size
from .wan import boost_wan_dit, restore_wan_dit


class LocalFaceAttnProcessor:
    """WanAnimateFaceBlockAttnProcessor on a rank's tokens (padded at the end like the sequence shards)."""

    def __init__(self, original, shard, per_frame: list):
        self.original = original
        self.shard = shard
        self.per_frame = per_frame   # [tokens per latent frame], set by the model's pre-hook each forward

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None):
        if hidden_states.shape[1] == self.shard.length:   # after the last block: the gathered, whole sequence
            return self.original(attn, hidden_states, encoder_hidden_states, attention_mask)
        if attention_mask is not None:
            raise NotImplementedError("a face-adapter mask under sequence parallelism")
        hidden_states = attn.pre_norm_q(hidden_states)
        motion = attn.pre_norm_kv(encoder_hidden_states)
        B, T, N, _ = motion.shape
        local = hidden_states.shape[1]
        q = attn.norm_q(attn.to_q(hidden_states).unflatten(2, (attn.heads, -1)))          # [B, s, H, D]
        k = attn.norm_k(attn.to_k(motion.flatten(1, 2)).view(B, T, N, attn.heads, -1))    # [B, T, N, H, D]
        v = attn.to_v(motion.flatten(1, 2)).view(B, T, N, attn.heads, -1)
        start = rank(self.shard.group) * local
        positions = torch.arange(start, start + local, device=q.device)
        frames = torch.clamp(positions // self.per_frame[0], max=T - 1)   # padding rows: any frame, dropped later
        out = torch.empty_like(q)
        for t in torch.unique(frames).tolist():   # the rank's tokens of frame t attend to its motion tokens
            rows = (frames == t).nonzero().flatten()
            qt = q[:, rows].transpose(1, 2)                                         # [B, H, r, D]
            kt, vt = k[:, t].transpose(1, 2), v[:, t].transpose(1, 2)               # [B, H, N, D]
            out[:, rows] = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt).transpose(1, 2)
        return attn.to_out(out.flatten(2, 3).type_as(q))


def boost_wan_animate(model, config: dict | None = None):
    """Converts a WanAnimateTransformer3DModel in place (see the module docstring); configs as boost_wan_dit's."""
    if getattr(model, "_lite_boost_parallel", None):
        return model
    boost_wan_dit(model, config)
    state = getattr(model, "_lite_boost_parallel", None)
    if not state or world_size(state["shard"].group) == 1:
        return model
    per_frame = [0]
    p_t, p_h, p_w = model.config.patch_size

    def record(module, args, kwargs):
        x = kwargs.get("hidden_states", args[0] if args else None)
        per_frame[0] = (x.shape[3] // p_h) * (x.shape[4] // p_w)

    state["hooks"].append(model.register_forward_pre_hook(record, with_kwargs=True))
    for adapter in model.face_adapter:
        adapter.set_processor(LocalFaceAttnProcessor(adapter.processor, state["shard"], per_frame))
    return model


def restore_wan_animate(model):
    for adapter in getattr(model, "face_adapter", []):
        if isinstance(adapter.processor, LocalFaceAttnProcessor):
            adapter.set_processor(adapter.processor.original)
    return restore_wan_dit(model)
