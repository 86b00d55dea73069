"""Parallel VAE decode, time_slice mode: the frame arithmetic (counts and alignment for many frames, ranks and
overlaps), equality with a single decode when the overlap covers the whole history, and the all-gathered
result over gloo."""
from __future__ import annotations

import pytest
import torch

from lite_boost.parallel.vae import decode_time_slice, overlap_deviation, time_slice_plan

from test_ulysses import spawn


def tiny_vae():
    from diffusers import AutoencoderKLWan
    torch.manual_seed(0)
    return AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 2, 2, 2], num_res_blocks=1, attn_scales=[],
                            temperal_downsample=[False, True, True], dropout=0.0).eval()


@pytest.mark.parametrize("frames", [2, 5, 8, 13, 21])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("overlap", [1, 2, 5])
def test_plan_covers_every_frame_once_in_order(frames, world, overlap):
    if frames < world:
        with pytest.raises(ValueError, match="cannot be split"):
            time_slice_plan(frames, world, overlap)
        return
    covered = []
    for start, end, s, drop in time_slice_plan(frames, world, overlap):
        decoded = 1 + 4 * (end - start - 1)   # what decoding latents [start, end) yields
        kept = decoded - drop
        first = 0 if s == 0 else 1 + 4 * (s - 1)   # global index of latent s's first frame
        covered += list(range(first, first + kept))
    assert covered == list(range(1 + 4 * (frames - 1)))


def test_overlap_must_be_positive():
    with pytest.raises(ValueError, match="overlap >= 1"):
        time_slice_plan(8, 2, 0)


def test_full_history_overlap_is_exact_and_deviation_is_reported():
    vae = tiny_vae()
    z = torch.randn(1, 4, 6, 4, 4)
    with torch.no_grad():
        dev = overlap_deviation(vae, z, world=2, overlaps=[1, 2, 6])
    assert dev[6] < 1e-5              # each chunk decodes from frame 0: the single decode exactly
    assert all(v >= 0 for v in dev.values())


def _gathered(rank, world):
    vae = tiny_vae()
    z = torch.randn(1, 4, 7, 4, 4, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = vae.decode(z, return_dict=False)[0]
        out = decode_time_slice(vae, z, overlap=7)
    assert out.shape == full.shape
    torch.testing.assert_close(out, full, atol=1e-5, rtol=1e-5)


def test_time_slice_decode_across_ranks():
    spawn(_gathered, 2)


def _exact(rank, world):
    from lite_boost.parallel import decode_exact
    vae = tiny_vae()
    z = torch.randn(1, 4, 6, 4, 4, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = vae.decode(z, return_dict=False)[0]
        out = decode_exact(vae, z)
    torch.testing.assert_close(out, full, atol=1e-5, rtol=1e-5)
    vae22 = tiny_vae22()   # Wan 2.2's patchified residual decoder: its up blocks' first_chunk, then unpatchify
    with torch.no_grad():
        torch.testing.assert_close(decode_exact(vae22, z), vae22.decode(z, return_dict=False)[0], atol=1e-5,
                                   rtol=1e-5)


def tiny_vae22():
    from diffusers import AutoencoderKLWan
    torch.manual_seed(1)
    vae = AutoencoderKLWan(base_dim=8, decoder_base_dim=12, z_dim=4, dim_mult=[1, 2, 2], num_res_blocks=1,
                           attn_scales=[], temperal_downsample=[False, True], in_channels=12, out_channels=12,
                           patch_size=2, is_residual=True).eval()
    with torch.no_grad():
        for p in vae.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return vae


@pytest.mark.parametrize("world", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_exact_decode_equals_single_device(world):
    """The decoder's stages split over the ranks, frames streamed through them: the single decode's result (Wan 2.1's
    VAE and Wan 2.2's patchified one)."""
    spawn(_exact, world)


def _pipeline_vae(rank, world):
    """ParallelManager on a pipeline-like object: its VAE's decode becomes the exact parallel decode."""
    import types

    from lite_boost import ParallelManager
    from lite_boost.parallel import restore
    vae = tiny_vae()
    z = torch.randn(1, 4, 5, 4, 4, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        want = vae.decode(z).sample
        from test_parallel_wan import tiny_wan
        pipe = types.SimpleNamespace(transformer=tiny_wan(), vae=vae)
        ParallelManager(pipe, {"vae": {"alg": "exact"}})
        assert vae._lite_boost_parallel == {"alg": "exact"}
        torch.testing.assert_close(vae.decode(z).sample, want, atol=1e-5, rtol=1e-5)
        restore(pipe)
        assert "decode" not in vars(vae)


def test_parallel_manager_converts_a_pipelines_vae():
    spawn(_pipeline_vae, 2)
