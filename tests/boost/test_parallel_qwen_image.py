"""ParallelManager on diffusers' QwenImageTransformer2DModel: Ulysses over its masked joint attention on gloo in
spawned processes equals the single-process model (image tokens divisible by the world size or not, a padded text
row), restore undoes it; what it does not shard is refused by name."""
from __future__ import annotations

import pytest
import torch

from lite_boost import ParallelManager
from lite_boost.parallel import restore

from test_ulysses import count_all_to_all, spawn


def tiny_qwen_image(heads: int = 4):
    from diffusers import QwenImageTransformer2DModel
    torch.manual_seed(0)
    model = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                        attention_head_dim=16, num_attention_heads=heads, joint_attention_dim=24,
                                        axes_dims_rope=(4, 6, 6)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def inputs(grids, text: int = 7):
    """`grids`: the (rows, cols) of each image in the sequence (an edit: the noise's, then the source's)."""
    g = torch.Generator().manual_seed(1)
    mask = torch.ones(2, text, dtype=torch.long)
    mask[1, text - 2:] = 0
    tokens = sum(r * c for r, c in grids)
    return dict(hidden_states=torch.randn(2, tokens, 16, generator=g),
                encoder_hidden_states=torch.randn(2, text, 24, generator=g), encoder_hidden_states_mask=mask,
                timestep=torch.tensor([0.9, 0.4]), img_shapes=[[(1, r, c) for r, c in grids]] * 2, return_dict=False)


def _matches(rank, world, shapes):
    for grids in shapes:
        model = tiny_qwen_image()
        feed = inputs(grids)
        with torch.no_grad():
            want = model(**feed)[0]
            ParallelManager(model)
            with count_all_to_all() as calls:
                got = model(**feed)[0]
            assert len(calls) == 4 * 2, len(calls)   # four all-to-alls per block's attention
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            restore(model)
            torch.testing.assert_close(model(**feed)[0], want, atol=1e-6, rtol=1e-6)
    if world == 2:
        with pytest.raises(ValueError, match="heads"):
            ParallelManager(tiny_qwen_image(heads=3))
        with pytest.raises(NotImplementedError, match="Wan"):
            ParallelManager(tiny_qwen_image(), {"rope": "cached"})


@pytest.mark.parametrize("world,shapes", [(2, [[(3, 5)], [(4, 4)], [(3, 5), (2, 4)]]),
                                          pytest.param(4, [[(3, 5)], [(3, 5), (3, 3)]], marks=pytest.mark.slow)])
def test_ulysses_qwen_image_equals_single_process(world, shapes):
    """15 image tokens (padded on the last ranks) and 16; an edit's 15 noise tokens followed by its source image's 8
    (RoPE frame 1); the 4-rank case with -m slow (as FLUX's; the default suite runs 4 ranks in the Ulysses round trip
    itself, tests/boost/test_ulysses.py)."""
    spawn(_matches, world, shapes)
