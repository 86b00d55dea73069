"""Parallel decode of Wan's causal 3-D VAE across ranks: the `time_slice` mode.

Wan's decoder turns T latent frames into 1 + 4 (T - 1) video frames, in order, each latent frame's
convolutions reading a cache of the previous ones. `time_slice` gives each rank a contiguous run of latent
frames [s, e) and lets it decode, from scratch, the run extended back by `overlap` frames of context,
[s - o, e) with o = min(overlap, s). A decode that starts at latent frame s - o yields 1 + 4 (e - s + o - 1)
frames, the first standing for frame s - o alone; dropping the first 4 o - 3 leaves exactly the 4 (e - s)
frames of latents s .. e - 1 (rank 0, starting at 0, keeps all 1 + 4 (e - 1)). The ranks' frames are then
all-gathered and stitched, so every rank holds the whole video.

It is an approximation: the context a rank rebuilds from `overlap` frames is not the cache a single decode
carries from frame 0, so frames near a chunk start differ; with overlap >= s it is exact. `overlap_deviation`
measures the difference from a single-device decode, per overlap. (An `exact` mode, equal to the single
decode at any overlap, is not built yet.)
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from .ulysses import rank, world_size


def time_slice_plan(latent_frames: int, world: int, overlap: int) -> list[tuple[int, int, int, int]]:
    """Per rank: (decode start, decode end, latent start, frames to drop) for `world` contiguous chunks."""
    if overlap < 1:
        raise ValueError("time_slice needs overlap >= 1: a chunk decoded without context starts with a "
                         "single-frame latent that no other rank's frames line up with")
    if latent_frames < world:
        raise ValueError(f"{latent_frames} latent frames cannot be split across {world} ranks")
    plan = []
    for r in range(world):
        s, e = r * latent_frames // world, (r + 1) * latent_frames // world
        o = min(overlap, s)
        plan.append((s - o, e, s, 0 if s == 0 else 4 * o - 3))
    return plan


def decode_time_slice(vae, z: Tensor, overlap: int = 2, group=None) -> Tensor:
    """Decodes latents z [B, C, T, H, W] across the ranks of `group`; every rank returns the full video."""
    n, r = world_size(group), rank(group)
    if n == 1:
        return type(vae).decode(vae, z, return_dict=False)[0]
    start, end, _, drop = time_slice_plan(z.shape[2], n, overlap)[r]
    frames = type(vae).decode(vae, z[:, :, start:end], return_dict=False)[0][:, :, drop:]
    counts = [4 * (e - s) - (3 if s == 0 else 0) for s, e in
              ((i * z.shape[2] // n, (i + 1) * z.shape[2] // n) for i in range(n))]
    padded = torch.zeros(frames.shape[:2] + (max(counts),) + frames.shape[3:], dtype=frames.dtype,
                         device=frames.device)
    padded[:, :, :frames.shape[2]] = frames
    parts = [torch.empty_like(padded) for _ in range(n)]
    dist.all_gather(parts, padded, group=group)
    return torch.cat([p[:, :, :c] for p, c in zip(parts, counts)], dim=2)


def overlap_deviation(vae, z: Tensor, world: int, overlaps: list[int]) -> dict[int, float]:
    """Max abs difference between a single decode and the time_slice stitching (simulated in one process) for
    each overlap: how far the approximation is, on these latents and weights."""
    full = type(vae).decode(vae, z, return_dict=False)[0]
    out = {}
    for o in overlaps:
        pieces = [type(vae).decode(vae, z[:, :, a:b], return_dict=False)[0][:, :, d:] for a, b, _, d in
                  time_slice_plan(z.shape[2], world, o)]
        out[o] = float((torch.cat(pieces, dim=2) - full).abs().max())
    return out
