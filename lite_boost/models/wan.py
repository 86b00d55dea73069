"""Ulysses sequence parallelism for diffusers' `WanTransformer3DModel` (Wan 2.1 / 2.2 text/image-to-video DiT).

Conversion in place: every rank keeps all weights; the token sequence is split across ranks before the first
block and gathered after the last, so the model takes the same arguments and returns the same full output on
every rank. Inside, each block's self-attention (`attn1`) runs `ulysses_attention` (four all-to-alls); its
rotary tables (and Wan 2.2 TI2V's per-token modulations) are sliced to the rank's tokens; cross-attention (`attn2`) attends the replicated text/image
context locally with no communication. `restore_wan_dit` undoes it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..parallel.ulysses import gather_sequence, shard_sequence, ulysses_attention, world_size
from ..parallel.decode_hook import install_parallel_decode, restore_parallel_decode


@dataclass
class _Shard:
    group: object = None
    length: int = 0                      # tokens of the current forward (before padding)
    rotary: dict = field(default_factory=dict)   # id of the full tables (or per-token temb) -> this rank's slice
    grid: tuple = ()                     # post-patch (frames, height, width) of the current forward
    calls: int = 0                       # forwards so far (denoising steps, or 2 per step with separate CFG)
    attention: dict = field(default_factory=dict)   # config: sparse_type, sparsity, dense_steps, block_size
    rope_cached: bool = False            # rotate with lite_boost's cached tables (C++ rotation) instead
    rope_tables: tuple = ()              # (cos, sin) [local tokens, head_dim / 2] of the current forward


def _apply_rotary(x: torch.Tensor, freqs_cos: torch.Tensor, freqs_sin: torch.Tensor) -> torch.Tensor:
    """diffusers' Wan rotation (interleaved pairs), on this rank's tokens."""
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    cos, sin = freqs_cos[..., 0::2], freqs_sin[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out.type_as(x)


class UlyssesWanAttnProcessor:
    """Self-attention over sequence shards; anything else goes to the original processor unchanged."""

    def __init__(self, original, shard: _Shard):
        self.original = original
        self.shard = shard

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None):
        if encoder_hidden_states is not None or attention_mask is not None or attn.add_k_proj is not None:
            return self.original(attn, hidden_states, encoder_hidden_states, attention_mask, rotary_emb)
        from diffusers.models.attention_dispatch import dispatch_attention_fn
        from diffusers.models.transformers.transformer_wan import _get_qkv_projections
        query, key, value = _get_qkv_projections(attn, hidden_states, None)
        query, key = attn.norm_q(query), attn.norm_k(key)   # per token (RMSNorm across heads): local
        query, key, value = (t.unflatten(2, (attn.heads, -1)) for t in (query, key, value))
        if self.shard.rope_cached and self.shard.rope_tables:
            from ..ops.rope import apply_rope
            cos, sin = self.shard.rope_tables
            query, key = apply_rope(query, cos, sin), apply_rope(key, cos, sin)
        elif rotary_emb is not None:
            query, key = _apply_rotary(query, *rotary_emb), _apply_rotary(key, *rotary_emb)
        backend = getattr(self.original, "_attention_backend", None)
        cfg = self.shard.attention

        def attend(q, k, v):
            if cfg.get("sparse_type") == "rf_v2" and self.shard.calls > int(cfg.get("dense_steps", 0)):
                from ..ops.sparse_attention import sparse_attention
                return sparse_attention(q, k, v, input_layout="BSND", sparse_type="rf_v2",
                                        latent_shape_q=self.shard.grid, sparsity=float(cfg.get("sparsity", 0.0)),
                                        block_size=int(cfg.get("block_size", 128)))
            return dispatch_attention_fn(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, backend=backend)

        out = ulysses_attention(query, key, value, length=self.shard.length, attention=attend, group=self.shard.group)
        out = out.flatten(2, 3).type_as(query)
        return attn.to_out[1](attn.to_out[0](out))


def _slice_rotary(shard: _Shard, rotary_emb):
    """This rank's rows of the [1, S, 1, D] cos/sin tables (padded like the tokens), computed once per forward."""
    if rotary_emb is None:
        return None
    key = id(rotary_emb[0])
    if key not in shard.rotary:
        for stale in [k for k in shard.rotary if not isinstance(k, tuple)]:
            del shard.rotary[stale]
        shard.rotary[key] = tuple(shard_sequence(t, dim=1, group=shard.group)[0] for t in rotary_emb)
    return shard.rotary[key]


def _slice_temb(shard: _Shard, temb):
    """Per-token modulations [B, S, 6, D] (Wan 2.2 TI2V's timestep per token): this rank's tokens, sliced once per
    forward like the rotary tables; per-sample ones [B, 6, D] stay whole."""
    if temb.ndim != 4:
        return temb
    key = ("temb", id(temb))
    if key not in shard.rotary:
        shard.rotary[key] = shard_sequence(temb, dim=1, group=shard.group)[0]
    return shard.rotary[key]


def boost_wan_dit(model, config: dict | None = None):
    """Converts a WanTransformer3DModel in place: Ulysses over the process group (world size > 1), and the
    attention config (`attention: {sparse_type: rf_v2, sparsity, dense_steps, block_size}`) at any world size."""
    config = config or {}
    group = config.get("group")
    attention = dict(config.get("attention") or {})
    rope = config.get("rope")
    if rope not in (None, "cached", "diffusers"):
        raise ValueError(f"rope must be 'cached' or 'diffusers', got {rope!r}")
    if attention.get("sparse_type") not in (None, "rf_v2"):
        raise ValueError(f"attention sparse_type must be None or 'rf_v2', got {attention.get('sparse_type')!r}")
    n = world_size(group)
    if (n == 1 and not attention and rope != "cached") or getattr(model, "_lite_boost_parallel", None):
        return model
    heads = model.config.num_attention_heads
    if heads % n:
        raise ValueError(f"Ulysses needs the attention heads ({heads}) to divide by the world size ({n})")
    shard = _Shard(group=group, attention=attention, rope_cached=rope == "cached")
    head_dim = model.config.attention_head_dim
    handles = []
    p_t, p_h, p_w = model.config.patch_size

    def record(module, args, kwargs):   # the latent grid and the step count, for sparse attention
        x = kwargs.get("hidden_states", args[0] if args else None)
        shard.grid = (x.shape[2] // p_t, x.shape[3] // p_h, x.shape[4] // p_w)
        shard.length = shard.grid[0] * shard.grid[1] * shard.grid[2]
        shard.calls += 1
        if shard.rope_cached:   # this rank's rows of the cached 3-D tables, padded like its tokens
            from ..ops.rope import rope_tables_3d
            cos, sin = rope_tables_3d(shard.grid, head_dim, device=x.device)
            shard.rope_tables = tuple(shard_sequence(t, dim=0, group=group)[0] if n > 1 else t for t in (cos, sin))

    handles.append(model.register_forward_pre_hook(record, with_kwargs=True))

    def split_input(module, args, kwargs):
        hidden, context, temb, rotary = args
        shard.length = hidden.shape[1]
        local, _ = shard_sequence(hidden, dim=1, group=group)
        return (local, context, _slice_temb(shard, temb), _slice_rotary(shard, rotary)), kwargs

    def slice_rotary(module, args, kwargs):
        hidden, context, temb, rotary = args
        return (hidden, context, _slice_temb(shard, temb), _slice_rotary(shard, rotary)), kwargs

    def gather_output(module, args, kwargs, output):
        shard.rotary.clear()
        return gather_sequence(output, shard.length, dim=1, group=group)

    blocks = list(model.blocks)
    for i, block in enumerate(blocks):
        if n > 1:
            handles.append(block.register_forward_pre_hook(split_input if i == 0 else slice_rotary, with_kwargs=True))
        block.attn1.set_processor(UlyssesWanAttnProcessor(block.attn1.processor, shard))
    if n > 1:
        handles.append(blocks[-1].register_forward_hook(gather_output, with_kwargs=True))
    model._lite_boost_parallel = {"hooks": handles, "shard": shard}
    return model


def restore_wan_dit(model):
    """Removes the conversion: original processors, no hooks."""
    state = getattr(model, "_lite_boost_parallel", None)
    if not state:
        return model
    for h in state["hooks"]:
        h.remove()
    for block in model.blocks:
        if isinstance(block.attn1.processor, UlyssesWanAttnProcessor):
            block.attn1.set_processor(block.attn1.processor.original)
    model._lite_boost_parallel = None
    return model


def boost_wan_vae(vae, config: dict | None = None):
    """Makes `vae.decode` decode across the ranks: config `alg` "exact" (default: equal to a single decode) or
    "time_slice" (with `overlap`, default 2: approximate, see lite_boost.parallel.vae)."""
    from ..parallel.vae import decode_time_slice
    from ..parallel.vae_exact import decode_exact
    config = config or {}
    alg, overlap, group = config.get("alg", "exact"), int(config.get("overlap", 2)), config.get("group")
    if alg not in ("exact", "time_slice"):
        raise ValueError(f"vae alg must be 'exact' or 'time_slice', got {alg!r}")
    if world_size(group) == 1 or getattr(vae, "_lite_boost_parallel", None):
        return vae

    return install_parallel_decode(
        vae, lambda z: decode_exact(vae, z, group) if alg == "exact" else decode_time_slice(vae, z, overlap, group),
        alg)


restore_wan_vae = restore_parallel_decode
