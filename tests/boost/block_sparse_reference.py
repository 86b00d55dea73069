"""Block selections and the float64 attention reference the RainFusion kernels' tests compare against."""
from __future__ import annotations

import math

import torch


def dense_select(q_blocks: int, heads: int, kv_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.arange(kv_blocks).expand(q_blocks, heads, kv_blocks).contiguous()
    return idx, torch.full((q_blocks, heads), kv_blocks)


def random_select(q_blocks: int, heads: int, kv_blocks: int, keep: float, gen: torch.Generator):
    chosen = torch.rand(q_blocks, heads, kv_blocks, generator=gen) < keep
    num = chosen.sum(-1)
    idx = torch.full((q_blocks, heads, kv_blocks), -1, dtype=torch.int64)
    for g in range(q_blocks):
        for h in range(heads):
            sel = torch.nonzero(chosen[g, h]).flatten()
            idx[g, h, :len(sel)] = sel
    return idx, num, chosen


def reference(q, k, v, token_keep=None, scale=None):
    """BNSD float64 attention; token_keep [B or 1, H, S, L] bool; rows attending nothing give 0 and lse -inf."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1).double(), v.repeat_interleave(rep, 1).double()
    s = q.double() @ k.transpose(-1, -2) * (scale or 1 / math.sqrt(q.shape[-1]))
    if token_keep is not None:
        s = s.masked_fill(~token_keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return p @ v, lse


def block_mask(chosen, s, l, bq, bk, heads):
    """[1, H, S, L] token mask of a block selection of one sample."""
    m = chosen.repeat_interleave(bq, 0)[:s].permute(1, 0, 2).repeat_interleave(bk, 2)[..., :l]
    return m[None]
