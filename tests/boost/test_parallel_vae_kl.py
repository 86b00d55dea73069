"""The exact row-parallel decode of diffusers' AutoencoderKL (lite_boost.parallel.vae_rows) on gloo in spawned
processes: bands of latent rows (not dividing by the world size), halo rows for the 3x3 convolutions, GroupNorm's
statistics all-reduced, the mid block's attention over gathered keys / values; every rank gets the single-process
image within 1e-5, with and without post_quant_conv, and restore undoes it."""
from __future__ import annotations

import pytest
import torch

from lite_boost import ParallelManager
from lite_boost.parallel import restore
from lite_boost.parallel.vae_rows import band

from test_ulysses import spawn


def tiny_vae(post_quant: bool = True, blocks=(8, 16, 16)):
    from diffusers import AutoencoderKL
    torch.manual_seed(0)
    vae = AutoencoderKL(block_out_channels=list(blocks), down_block_types=["DownEncoderBlock2D"] * len(blocks),
                        up_block_types=["UpDecoderBlock2D"] * len(blocks), layers_per_block=1, norm_num_groups=4,
                        latent_channels=4, use_post_quant_conv=post_quant, use_quant_conv=post_quant).eval()
    with torch.no_grad():
        for p in vae.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return vae


def _matches(rank, world):
    g = torch.Generator().manual_seed(3)
    for post_quant, rows in ((True, 5), (False, 7)):
        vae = tiny_vae(post_quant)
        z = torch.randn(2, 4, rows, 6, generator=g)
        with torch.no_grad():
            want = vae.decode(z).sample
            ParallelManager(vae)
            got = vae.decode(z).sample
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            assert got.shape == (2, 3, 4 * rows, 24)
            restore(vae)
            torch.testing.assert_close(vae.decode(z).sample, want, atol=1e-6, rtol=1e-6)
    if world == 2:
        with pytest.raises(ValueError, match="exact"):
            ParallelManager(tiny_vae(), {"vae": {"alg": "time_slice"}})
        with pytest.raises(ValueError, match="latent rows"):
            ParallelManager(tiny_vae()).decode(torch.zeros(1, 4, 1, 6))


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_row_parallel_decode_equals_single_process(world):
    spawn(_matches, world)


def test_bands_cover_the_rows_once():
    for rows in range(1, 30):
        for n in range(1, min(rows, 6) + 1):
            spans = [band(rows, n, r) for r in range(n)]
            assert spans[0][0] == 0 and spans[-1][1] == rows
            assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
            assert max(e - s for s, e in spans) - min(e - s for s, e in spans) <= 1
