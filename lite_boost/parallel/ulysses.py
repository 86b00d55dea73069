"""Ulysses (DeepSpeed-Ulysses) sequence parallelism.

Each of N ranks holds every weight and 1/N of the tokens. For self-attention the ranks exchange data so that
each holds the whole sequence for H/N heads (one all-to-all per tensor), attend locally, and exchange back:

    q, k, v  [B, S/N, H, D] on every rank
      -- all-to-all x3 -->  [B, S, H/N, D]   (heads scattered, sequence gathered)
      -- attention (any kernel: dense, RainFusion sparse) over the full sequence -->
    out      [B, S, H/N, D]
      -- all-to-all -->     [B, S/N, H, D]

Four all-to-alls per self-attention, each moving (N-1)/N of one [B, S/N, H, D] tensor per rank; cross-attention
to a replicated context needs none. A sequence that does not divide by N is padded at the end; the padding is
cut off before attention (it is never a key) and its rows are zero after it. Heads (query and key/value) must
divide by N.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.distributed as dist
from torch import Tensor


def world_size(group=None) -> int:
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def rank(group=None) -> int:
    return dist.get_rank(group) if dist.is_available() and dist.is_initialized() else 0


def _check_heads(heads: int, n: int, what: str) -> None:
    if heads % n:
        raise ValueError(f"Ulysses needs the {what} heads ({heads}) to divide by the world size ({n})")


def seq_to_heads(x: Tensor, group=None) -> Tensor:
    """[B, S/N, H, D] per rank -> [B, S, H/N, D]: rank r keeps heads [r H/N, (r+1) H/N) of the whole sequence."""
    n = world_size(group)
    if n == 1:
        return x
    b, s, h, d = x.shape
    _check_heads(h, n, "attention")
    send = x.reshape(b, s, n, h // n, d).permute(2, 0, 1, 3, 4).contiguous()   # chunk j: the heads of rank j
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)                           # chunk j: rank j's tokens
    return recv.permute(1, 0, 2, 3, 4).reshape(b, n * s, h // n, d)


def heads_to_seq(x: Tensor, group=None) -> Tensor:
    """The inverse of seq_to_heads: [B, S, H/N, D] -> [B, S/N, H, D]."""
    n = world_size(group)
    if n == 1:
        return x
    b, s_full, h, d = x.shape
    if s_full % n:
        raise ValueError(f"sequence {s_full} does not divide by the world size {n}")
    s = s_full // n
    send = x.reshape(b, n, s, h, d).permute(1, 0, 2, 3, 4).contiguous()        # chunk j: rank j's tokens
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)                           # chunk j: heads of rank j
    return recv.permute(1, 2, 0, 3, 4).reshape(b, s, n * h, d)


def shard_sequence(x: Tensor, dim: int = 1, group=None) -> tuple[Tensor, int]:
    """This rank's slice of x along `dim`, padded at the end to a multiple of the world size; returns
    (slice, the true length)."""
    n, r = world_size(group), rank(group)
    length = x.shape[dim]
    per = -(-length // n)
    if per * n != length:
        pad = list(x.shape)
        pad[dim] = per * n - length
        x = torch.cat([x, x.new_zeros(pad)], dim=dim)
    return x.narrow(dim, r * per, per).contiguous(), length


def gather_sequence(x: Tensor, length: int, dim: int = 1, group=None) -> Tensor:
    """Every rank's slice concatenated along `dim` (the full tensor on every rank), padding removed."""
    n = world_size(group)
    if n == 1:
        return x.narrow(dim, 0, length)
    parts = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=dim).narrow(dim, 0, length)


def ulysses_attention(q: Tensor, k: Tensor, v: Tensor, length: Optional[int] = None,
                      attention: Optional[Callable[[Tensor, Tensor, Tensor], Tensor]] = None, group=None) -> Tensor:
    """Self-attention of sequence-sharded BSND tensors ([B, S/N, heads, D] on every rank, S/N equal everywhere,
    the last rank's tail padded when `length` < N S/N). `attention(q, k, v)` takes and returns full-sequence
    BSND tensors for this rank's heads (default: lite_boost's flash_attention). Returns [B, S/N, H, Dv]."""
    n = world_size(group)
    _check_heads(q.shape[2], n, "query")
    _check_heads(k.shape[2], n, "key/value")
    if attention is None:
        from ..ops.flash_attention import flash_attention

        def attention(q_, k_, v_):
            return flash_attention(q_, k_, v_, input_layout="BSND")

    qf, kf, vf = seq_to_heads(q, group), seq_to_heads(k, group), seq_to_heads(v, group)
    full = qf.shape[1]
    length = full if length is None else length
    if length < full:   # padding: never a key; its rows come back as zeros
        out = attention(qf[:, :length], kf[:, :length], vf[:, :length])
        out = torch.cat([out, out.new_zeros(out.shape[0], full - length, *out.shape[2:])], dim=1)
    else:
        out = attention(qf, kf, vf)
    return heads_to_seq(out, group)
