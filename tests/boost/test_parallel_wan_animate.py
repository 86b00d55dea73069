"""ParallelManager on diffusers' WanAnimateTransformer3DModel (Wan 2.2 Animate): Ulysses over gloo in spawned
processes equals the single-process model within 1e-5 (tokens divisible by the world size or not: a rank's shard
then ends inside a frame and is padded), the face adapters run per rank without communication (four all-to-alls
per block, as Wan's), restore undoes it."""
from __future__ import annotations

import pytest
import torch

from lite_boost import ParallelManager
from lite_boost.parallel import restore

from test_ulysses import count_all_to_all, spawn

TINY = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=12, in_channels=12, latent_channels=4,
            out_channels=4, text_dim=16, freq_dim=16, ffn_dim=32, num_layers=2, image_dim=16, added_kv_proj_dim=48,
            rope_max_seq_len=64, motion_encoder_channel_sizes={"16": 8, "8": 8, "4": 8}, motion_encoder_size=16,
            motion_style_dim=16, motion_dim=5, motion_encoder_dim=16, face_encoder_hidden_dim=8,
            face_encoder_num_heads=2, inject_face_latents_blocks=1)


def tiny_animate():
    from diffusers import WanAnimateTransformer3DModel
    torch.manual_seed(0)
    model = WanAnimateTransformer3DModel(**TINY).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def inputs(frames: int, h: int, w: int):
    g = torch.Generator().manual_seed(1)
    return dict(hidden_states=torch.randn(2, 12, frames, h, w, generator=g), timestep=torch.tensor([700.0, 300.0]),
                encoder_hidden_states=torch.randn(2, 512, 16, generator=g),   # diffusers: 512 text rows
                encoder_hidden_states_image=torch.randn(2, 5, 16, generator=g),
                pose_hidden_states=torch.randn(2, 4, frames - 1, h, w, generator=g),
                face_pixel_values=torch.rand(2, 3, 4 * (frames - 2) + 1, 16, 16, generator=g) * 2 - 1,
                return_dict=False)


def _matches(rank, world, grids):
    for frames, h, w in grids:
        model = tiny_animate()
        feed = inputs(frames, h, w)
        with torch.no_grad():
            want = model(**feed)[0]
            ParallelManager(model)
            with count_all_to_all() as calls:
                got = model(**feed)[0]
            assert len(calls) == 4 * 2, len(calls)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            restore(model)
            torch.testing.assert_close(model(**feed)[0], want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("world,grids", [(2, [(3, 6, 6), (4, 4, 6)]),
                                         pytest.param(4, [(3, 6, 6)], marks=pytest.mark.slow)])
def test_ulysses_wan_animate_equals_single_process(world, grids):
    """27 tokens (3 frames of 9: shards end inside frames, the last padded) and 24."""
    spawn(_matches, world, grids)
