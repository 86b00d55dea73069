"""ParallelManager on diffusers' FluxTransformer2DModel: Ulysses over the joint [text, image] attention on gloo in
spawned processes equals the single-process model (image tokens divisible by the world size or not, 2 and 4 ranks),
restore undoes it; what it does not cover is refused by name."""
from __future__ import annotations

import pytest
import torch

from lite_boost import ParallelManager
from lite_boost.parallel import restore

from test_ulysses import count_all_to_all, spawn


def tiny_flux(heads: int = 4, guidance: bool = True):
    from diffusers import FluxTransformer2DModel
    torch.manual_seed(0)
    model = FluxTransformer2DModel(patch_size=1, in_channels=8, num_layers=2, num_single_layers=2,
                                   attention_head_dim=16, num_attention_heads=heads, joint_attention_dim=24,
                                   pooled_projection_dim=12, guidance_embeds=guidance, axes_dims_rope=(4, 6, 6)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def inputs(rows: int, cols: int, text: int = 7):
    g = torch.Generator().manual_seed(1)
    ids = torch.zeros(rows * cols, 3)
    ids[:, 1] = torch.arange(rows).repeat_interleave(cols).float()
    ids[:, 2] = torch.arange(cols).repeat(rows).float()
    return dict(hidden_states=torch.randn(2, rows * cols, 8, generator=g),
                encoder_hidden_states=torch.randn(2, text, 24, generator=g),
                pooled_projections=torch.randn(2, 12, generator=g), timestep=torch.tensor([0.9, 0.4]),
                img_ids=ids, txt_ids=torch.zeros(text, 3), guidance=torch.tensor([3.5, 3.5]), return_dict=False)


def _matches(rank, world, shapes):
    for rows, cols in shapes:
        model = tiny_flux()
        feed = inputs(rows, cols)
        with torch.no_grad():
            want = model(**feed)[0]
            ParallelManager(model)
            with count_all_to_all() as calls:
                got = model(**feed)[0]
            # four all-to-alls per attention: 2 double + 2 single blocks
            assert len(calls) == 4 * 4, len(calls)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            restore(model)
            torch.testing.assert_close(model(**feed)[0], want, atol=1e-6, rtol=1e-6)
    if world == 2:   # what it refuses, by name
        with pytest.raises(ValueError, match="heads"):
            ParallelManager(tiny_flux(heads=3))
        with pytest.raises(NotImplementedError, match="Wan"):
            ParallelManager(tiny_flux(), {"attention": {"sparse_type": "rf_v2", "sparsity": 0.5}})


@pytest.mark.parametrize("world,shapes", [(2, [(3, 5), (4, 4)]),
                                          pytest.param(4, [(3, 5)], marks=pytest.mark.slow)])   # 4 ranks: ~12 s
def test_ulysses_flux_equals_single_process(world, shapes):
    """15 image tokens (padded on the last ranks) and 16; at 2 ranks also the refusals; 4 ranks with -m slow."""
    spawn(_matches, world, shapes)


def test_flux_at_world_size_one_is_untouched():
    model = tiny_flux()
    assert ParallelManager(model) is model and not getattr(model, "_lite_boost_parallel", None)
