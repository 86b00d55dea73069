"""lite_boost.ops.rope against diffusers' Wan rotary embedding, the complex128 original and Llama's rotate_half."""
from __future__ import annotations

import pytest
import torch

import importlib
from lite_boost.ops.rope import apply_rope, rope, rope_tables_1d, rope_tables_3d, wan_split

torch.manual_seed(0)
rope_mod = importlib.import_module("lite_boost.ops.rope")


def wan_reference(x: torch.Tensor, grid, theta=10000.0):
    """diffusers' WanRotaryPosEmbed + the apply of its attention processor, on [B, S, N, D]."""
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed
    t, h, w = grid
    emb = WanRotaryPosEmbed(x.shape[-1], (1, 1, 1), max_seq_len=max(grid) + 1, theta=theta)
    cos, sin = emb(torch.zeros(1, 1, t, h, w))
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    c, s = cos[..., 0::2], sin[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * c - x2 * s
    out[..., 1::2] = x1 * s + x2 * c
    return out.type_as(x)


def complex_original(x: torch.Tensor, grid, theta=10000.0):
    """Wan's original rope_apply: pairs as complex128 numbers times polar(1, angle)."""
    t, h, w = grid
    d = x.shape[-1]
    dt, dh, dw = wan_split(d)
    freqs = []
    for n, dim in ((t, dt), (h, dh), (w, dw)):
        inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        freqs.append(torch.polar(torch.ones(n, dim // 2, dtype=torch.float64), torch.outer(torch.arange(n).double(), inv)))
    f = torch.cat([freqs[0][:, None, None].expand(t, h, w, -1), freqs[1][None, :, None].expand(t, h, w, -1),
                   freqs[2][None, None, :].expand(t, h, w, -1)], -1).reshape(1, t * h * w, 1, d // 2)
    xc = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * f).flatten(-2)


@pytest.mark.parametrize("grid,d", [((3, 6, 8), 12), ((2, 5, 7), 128), ((1, 30, 52), 64)])
def test_3d_matches_diffusers_and_the_complex_original(grid, d):
    x = torch.randn(2, grid[0] * grid[1] * grid[2], 3, d)
    got = rope(x, grid=grid)
    torch.testing.assert_close(got, wan_reference(x, grid), atol=1e-6, rtol=0)
    torch.testing.assert_close(got.double(), complex_original(x, grid), atol=1e-5, rtol=0)


def test_1d_rotate_half_matches_llama():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    x = torch.randn(2, 4, 50, 64)   # BNSD, as Llama applies it
    cos, sin = rope_tables_1d(50, 64, theta=500000.0)
    full_cos, full_sin = torch.cat([cos, cos], -1)[None], torch.cat([sin, sin], -1)[None]
    want, _ = apply_rotary_pos_emb(x, x, full_cos, full_sin)
    got = apply_rope(x, cos, sin, interleaved=False, layout="BNSD")
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_tables_are_cached_per_key_and_sliced_per_rank():
    rope_mod.clear_cache()
    a = rope_tables_3d((2, 4, 4), 64)
    assert rope_tables_3d((2, 4, 4), 64) is a
    assert rope_tables_3d((2, 4, 4), 64, theta=20000.0) is not a
    part = rope_tables_3d((2, 4, 4), 64, rank_slice=(8, 24))
    torch.testing.assert_close(part[0], a[0][8:24])
    x = torch.randn(1, 32, 2, 64)
    torch.testing.assert_close(rope(x[:, 8:24], grid=(2, 4, 4), rank_slice=(8, 24)), rope(x, grid=(2, 4, 4))[:, 8:24])


def test_half_inputs_rotate_in_float32():
    x = torch.randn(1, 48, 2, 32).to(torch.bfloat16)
    got = rope(x, grid=(1, 6, 8))
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), rope(x.float(), grid=(1, 6, 8)).bfloat16().float())


def test_table_shape_mismatch_is_named():
    cos, sin = rope_tables_1d(10, 16)
    with pytest.raises(ValueError, match="do not fit"):
        apply_rope(torch.randn(1, 11, 2, 16), cos, sin)
