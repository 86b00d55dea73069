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


def tnd_dense_select(lens, kv_lens, bq: int, bk: int, heads: int, max_selected: int):
    """(select_idx, select_num_idx) selecting every key block of each query block's own sample, for a TND batch."""
    blocks = [math.ceil(n / bq) for n in lens]
    idx = torch.full((sum(blocks), heads, max_selected), -1)
    num = torch.zeros(sum(blocks), heads, dtype=torch.int64)
    g = 0
    for n, kn in zip(lens, kv_lens):
        for _ in range(math.ceil(n / bq)):
            kb = math.ceil(kn / bk)
            idx[g, :, :kb] = torch.arange(kb)
            num[g] = kb
            g += 1
    return idx, num


def assert_tnd_equals_reference(out, lse, q, k, v, lens, kv_lens):
    """Each sample of a TND result against float64 attention over that sample alone."""
    q0 = k0 = 0
    for n, kn in zip(lens, kv_lens):
        want, want_lse = reference(q[q0:q0 + n].permute(1, 0, 2)[None], k[k0:k0 + kn].permute(1, 0, 2)[None],
                                   v[k0:k0 + kn].permute(1, 0, 2)[None])
        torch.testing.assert_close(out[q0:q0 + n], want[0].permute(1, 0, 2).float(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lse[q0:q0 + n], want_lse[0].T.float(), atol=1e-5, rtol=1e-5)
        q0, k0 = q0 + n, k0 + kn
