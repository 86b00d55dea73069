"""Parallel VAE decode across ranks, `exact` mode: the decoder's layers are split into contiguous stages, one per
rank, and the latent frames stream through them.

Wan's decoder (2.1's, and 2.2's patchified residual one: its output un-patchified at the end) runs frame by frame, each causal convolution keeping a cache of the frames before. Here rank r
owns stages r (conv_in + mid block, the up blocks, norm + conv_out, balanced by count) and their caches; it
receives frame i's activation from rank r - 1, runs its layers, and sends the result on, while the previous
rank already works on frame i + 1. Every layer sees the same inputs in the same order with the same cache as
in a single decode, so the output is equal to it (float32, to rounding), whatever the split.

Speed-up model: with F latent frames and stage times t_1..t_N, one device takes F sum(t); the pipeline takes
about (F + N - 1) max(t): close to N x for F >> N and balanced stages. The video then goes from the last rank to
every rank (one broadcast).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from .ulysses import rank, world_size


def _conv_with_cache(conv, x: Tensor, cache: list, idx: list) -> Tensor:
    """diffusers' cached causal convolution step (conv_in / conv_out of the decoder)."""
    i = idx[0]
    cache_x = x[:, :, -2:].clone()
    if cache_x.shape[2] < 2 and cache[i] is not None:
        cache_x = torch.cat([cache[i][:, :, -1:].to(cache_x.device), cache_x], dim=2)
    x = conv(x, cache[i])
    cache[i] = cache_x
    idx[0] += 1
    return x


def decoder_stages(decoder) -> list:
    """The decoder as a list of callables f(x, cache, idx, first_chunk) in execution order."""
    def head(x, cache, idx, first):
        return decoder.mid_block(_conv_with_cache(decoder.conv_in, x, cache, idx), feat_cache=cache, feat_idx=idx)

    def up(block):
        return lambda x, cache, idx, first: block(x, feat_cache=cache, feat_idx=idx, first_chunk=first)

    def tail(x, cache, idx, first):
        return _conv_with_cache(decoder.conv_out, decoder.nonlinearity(decoder.norm_out(x)), cache, idx)

    return [head] + [up(b) for b in decoder.up_blocks] + [tail]


def _split(count: int, parts: int) -> list[range]:
    return [range(p * count // parts, (p + 1) * count // parts) for p in range(parts)]


def _send(x: Tensor, dst: int, group) -> list:
    shape = torch.tensor(list(x.shape), dtype=torch.int64)
    return [dist.isend(shape, dst, group=group), dist.isend(x.contiguous(), dst, group=group)]


def _recv(src: int, ndim: int, dtype, group) -> Tensor:
    shape = torch.empty(ndim, dtype=torch.int64)
    dist.recv(shape, src, group=group)
    x = torch.empty(shape.tolist(), dtype=dtype)
    dist.recv(x, src, group=group)
    return x


def decode_exact(vae, z: Tensor, group=None) -> Tensor:
    """Decodes latents z [B, C, T, H, W] with the decoder's stages spread over the ranks; every rank returns the
    full video, equal to `type(vae).decode(vae, z)`."""
    n, r = world_size(group), rank(group)
    if n == 1:
        return type(vae).decode(vae, z, return_dict=False)[0]
    stages = decoder_stages(vae.decoder)
    if len(stages) < n:
        raise ValueError(f"the decoder has {len(stages)} stages, fewer than the {n} ranks")
    mine = [stages[i] for i in _split(len(stages), n)[r]]
    cache: list = [None] * vae._cached_conv_counts["decoder"]   # slots used in call order: a local count suffices
    x_all = vae.post_quant_conv(z) if r == 0 else None
    frames, pending = [], []
    ranks = [dist.get_global_rank(group, i) if group is not None else i for i in range(n)]
    for i in range(z.shape[2]):
        x = x_all[:, :, i:i + 1] if r == 0 else _recv(ranks[r - 1], 5, z.dtype, group)
        idx = [0]
        for stage in mine:
            x = stage(x, cache, idx, i == 0)
        if r < n - 1:
            for w in pending:
                w.wait()
            pending = _send(x, ranks[r + 1], group)
        else:
            frames.append(x)
    for w in pending:
        w.wait()
    if r == n - 1:
        video = torch.cat(frames, dim=2)
        if getattr(vae.config, "patch_size", None):   # Wan 2.2: the decoder's channels are patches of pixels
            from diffusers.models.autoencoders.autoencoder_kl_wan import unpatchify
            video = unpatchify(video, patch_size=vae.config.patch_size)
        video = torch.clamp(video, -1.0, 1.0)
        shape = torch.tensor(list(video.shape), dtype=torch.int64)
    else:
        shape = torch.empty(5, dtype=torch.int64)
    dist.broadcast(shape, ranks[n - 1], group=group)
    if r != n - 1:
        video = torch.empty(shape.tolist(), dtype=z.dtype)
    dist.broadcast(video, ranks[n - 1], group=group)
    return video
