"""Parallel decode for diffusers' `AutoencoderKLHunyuanVideo` (HunyuanVideo's causal 3-D VAE; Kandinsky 5 Video Lite).

diffusers decodes a latent longer than 4 frames in temporal tiles (`_temporal_tiled_decode`: 5 latent frames every
3, each through the whole decoder on its own, GroupNorm included, then the first frame of every later tile dropped
and 4 overlapping frames blended). The tiles are independent, so the ranks split them round-robin: rank r decodes
tiles r, r + N, ..., every tile is broadcast from its owner (all ranks know every tile's shape), and each rank
blends the same list, which gives exactly the single-process video. No halo arithmetic is needed: the overlap is the
tiles' own (tile_sample_min_num_frames - tile_sample_stride_num_frames = 4 frames), and a tile's receptive field is
the tile. Latents of 4 frames or fewer are one tile, decoded whole on every rank. `alg` exact and time_slice are the
same here."""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..parallel.ulysses import rank, world_size


def _tile_starts(vae, frames: int) -> tuple[list[int], int]:
    stride = vae.tile_sample_stride_num_frames // vae.temporal_compression_ratio
    return list(range(0, frames, stride)), vae.tile_sample_min_num_frames // vae.temporal_compression_ratio


def boost_hunyuan_video_vae(vae, config: dict | None = None):
    """Converts an AutoencoderKLHunyuanVideo in place: its temporal tiles decoded across the process group."""
    config = config or {}
    group = config.get("group")
    if config.get("alg", "exact") not in ("exact", "time_slice"):
        raise NotImplementedError(f"vae alg {config.get('alg')!r} for AutoencoderKLHunyuanVideo (built: exact, "
                                  "time_slice: both split its temporal tiles)")
    n = world_size(group)
    if n == 1 or getattr(vae, "_lite_boost_parallel", None):
        return vae

    def decode_tile(tile: torch.Tensor) -> torch.Tensor:
        latent_h, latent_w = tile.shape[-2:]
        if vae.use_tiling and (latent_w > vae.tile_sample_min_width // vae.spatial_compression_ratio or
                               latent_h > vae.tile_sample_min_height // vae.spatial_compression_ratio):
            return vae.tiled_decode(tile, return_dict=True).sample
        return vae.decoder(vae.post_quant_conv(tile))

    def parallel_temporal_tiled_decode(z: torch.Tensor, return_dict: bool = True):
        from diffusers.models.autoencoders.vae import DecoderOutput
        b, _, frames, h, w = z.shape
        starts, span = _tile_starts(vae, frames)
        r = rank(group)
        row = []
        for i, start in enumerate(starts):
            tile = z[:, :, start:start + span + 1]
            owner = i % n
            if owner == r:
                decoded = decode_tile(tile).contiguous()
            else:
                t = tile.shape[2]
                decoded = torch.empty(b, vae.config.out_channels, (t - 1) * vae.temporal_compression_ratio + 1,
                                      h * vae.spatial_compression_ratio, w * vae.spatial_compression_ratio,
                                      dtype=z.dtype, device=z.device)
            dist.broadcast(decoded, src=dist.get_global_rank(group, owner) if group is not None else owner,
                           group=group)
            row.append(decoded[:, :, 1:] if i > 0 else decoded)
        blend, stride = (vae.tile_sample_min_num_frames - vae.tile_sample_stride_num_frames,
                         vae.tile_sample_stride_num_frames)
        result = []
        for i, tile in enumerate(row):   # diffusers' blending, in place, unchanged
            if i > 0:
                result.append(vae.blend_t(row[i - 1], tile, blend)[:, :, :stride])
            else:
                result.append(tile[:, :, :stride + 1])
        dec = torch.cat(result, dim=2)[:, :, :(frames - 1) * vae.temporal_compression_ratio + 1]
        return DecoderOutput(sample=dec) if return_dict else (dec,)

    vae._temporal_tiled_decode = parallel_temporal_tiled_decode
    vae._lite_boost_parallel = {"group": group}
    return vae


def restore_hunyuan_video_vae(vae):
    if getattr(vae, "_lite_boost_parallel", None):
        del vae._temporal_tiled_decode   # the class's method again
        vae._lite_boost_parallel = None
    return vae
