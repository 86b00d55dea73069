"""ParallelManager on diffusers' WanTransformer3DModel: Ulysses over gloo in spawned processes equals the
single-process model (sequence divisible by the world size or not), four all-to-alls per self-attention and
none for cross-attention, restore undoes it; unsupported models, heads and config sections are named."""
from __future__ import annotations

import os

import pytest
import torch

from lite_boost import ParallelManager
from lite_boost.parallel import restore

from test_ulysses import count_all_to_all, spawn


def tiny_wan(heads: int = 2, seed: int = 0, i2v: bool = False):
    """Wan2.1 T2V, or I2V (image context through attn2's added key/value projections)."""
    from diffusers import WanTransformer3DModel
    torch.manual_seed(seed)
    extra = dict(image_dim=16, added_kv_proj_dim=24) if i2v else {}
    return WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=heads, attention_head_dim=12, in_channels=4,
                                 out_channels=4, text_dim=16, freq_dim=256, ffn_dim=32, num_layers=2,
                                 cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=32,
                                 **extra).eval()


def inputs(frames: int, size: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return dict(hidden_states=torch.randn(1, 4, frames, size, size, generator=g), timestep=torch.tensor([500]),
                encoder_hidden_states=torch.randn(1, 7, 16, generator=g), return_dict=False)


def _cached_rope_matches(rank, world):
    """rope: cached (lite_boost's tables, C++ rotation, sliced per rank) under Ulysses: the original output."""
    model = tiny_wan()
    feed = inputs(3, 6)   # 27 tokens: the last rank's tables are padded
    with torch.no_grad():
        want = model(**feed)[0]
        ParallelManager(model, {"rope": "cached"})
        torch.testing.assert_close(model(**feed)[0], want, atol=1e-5, rtol=1e-5)


def test_cached_rope_under_ulysses():
    spawn(_cached_rope_matches, 2)


def _i2v_matches(rank, world):
    model = tiny_wan(i2v=True)
    g = torch.Generator().manual_seed(2)
    # diffusers' Wan I2V processor takes the last 512 context tokens as text, the rest as the image.
    feed = dict(hidden_states=torch.randn(1, 4, 3, 6, 6, generator=g), timestep=torch.tensor([300]),
                encoder_hidden_states=torch.randn(1, 512, 16, generator=g),
                encoder_hidden_states_image=torch.randn(1, 9, 16, generator=g), return_dict=False)
    with torch.no_grad():
        want = model(**feed)[0]
        ParallelManager(model)
        torch.testing.assert_close(model(**feed)[0], want, atol=1e-5, rtol=1e-5)
    _token_timesteps_match()


def _token_timesteps_match():
    """Wan 2.2 TI2V's timestep per token (the first frame's 9 tokens at 0): the per-token modulations are sharded
    with the tokens (27 of them: padded at 2 and 4 ranks)."""
    model = tiny_wan(heads=4)
    g = torch.Generator().manual_seed(3)
    t = torch.cat([torch.zeros(9), torch.full((18,), 700.0)])[None].repeat(2, 1)
    feed = dict(hidden_states=torch.randn(2, 4, 3, 6, 6, generator=g), timestep=t,
                encoder_hidden_states=torch.randn(2, 7, 16, generator=g), return_dict=False)
    with torch.no_grad():
        want = model(**feed)[0]
        ParallelManager(model)
        torch.testing.assert_close(model(**feed)[0], want, atol=1e-5, rtol=1e-5)


def test_ulysses_wan_i2v_and_token_timesteps_equal_single_process():
    spawn(_i2v_matches, 2)


def _matches_single_process(rank, world):
    model = tiny_wan()
    cases = [inputs(2, 8), inputs(3, 6)]   # 32 tokens (divisible by 2) and 27 (padded)
    with torch.no_grad():
        want = [model(**c)[0] for c in cases]
    assert ParallelManager(model, {"dit": {"alg": "ulysses", "world_size": world}}) is model
    assert ParallelManager(model) is model   # idempotent
    with count_all_to_all() as calls, torch.no_grad():
        for c, w in zip(cases, want):
            calls.clear()
            torch.testing.assert_close(model(**c)[0], w, atol=1e-5, rtol=1e-5)
            assert len(calls) == 4 * len(model.blocks)   # self-attention only; cross-attention none
        restore(model)
        calls.clear()
        torch.testing.assert_close(model(**cases[1])[0], want[1], atol=1e-6, rtol=1e-6)
        assert not calls
    with pytest.raises(ValueError, match="heads \\(3\\) to divide"):
        ParallelManager(tiny_wan(heads=3))


def test_ulysses_wan_dit_equals_single_process():
    spawn(_matches_single_process, 2)


def _four_ranks(rank, world):
    model = tiny_wan(heads=4)
    feed = inputs(3, 6)   # 27 tokens over 4 ranks: 7 each, 1 padding token
    with torch.no_grad():
        want = model(**feed)[0]
        ParallelManager(model)
        torch.testing.assert_close(model(**feed)[0], want, atol=1e-5, rtol=1e-5)
    _token_timesteps_match()


@pytest.mark.slow   # four spawned ranks, ~12 s; the Ulysses round trip's 4-rank test runs by default
def test_ulysses_wan_dit_at_four_ranks():
    spawn(_four_ranks, 4)


def test_yaml_config(tmp_path):
    path = tmp_path / "boost.yaml"
    path.write_text("attention:\n  sparse_type: rf_v2\n  sparsity: 0.5\n  dense_steps: 2\n  block_size: 64\n")
    model = ParallelManager(tiny_wan(), str(path))
    assert model._lite_boost_parallel["shard"].attention == {"sparse_type": "rf_v2", "sparsity": 0.5,
                                                             "dense_steps": 2, "block_size": 64}


def test_unsupported_models_and_config_sections_are_named():
    with pytest.raises(ValueError, match="Linear is not supported.*WanTransformer3DModel"):
        ParallelManager(torch.nn.Linear(2, 2))
    with pytest.raises(NotImplementedError, match="'offload' is not built"):
        ParallelManager(tiny_wan(), {"offload": True})
    with pytest.raises(ValueError, match="rope must be"):
        ParallelManager(tiny_wan(), {"rope": "complex"})
    with pytest.raises(NotImplementedError, match="vae alg 'tiles' is not built"):
        ParallelManager(tiny_wan(), {"vae": {"alg": "tiles"}})
    model = tiny_wan()
    assert ParallelManager(model) is model   # world size 1: nothing to do
    assert not getattr(model, "_lite_boost_parallel", None)


@pytest.mark.slow   # two torchrun workers and a second process: ~25 s
def test_torchrun_example_writes_the_same_frames_as_one_process(tmp_path):
    """examples/wan_t2v.py under `torchrun --nproc_per_node=2` (gloo on CPU) against a plain single-process run."""
    import subprocess
    import sys

    import numpy as np
    from PIL import Image

    from test_ulysses import free_port
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "wan_t2v.py")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                    f"--master_port={free_port()}", example, "--out", str(tmp_path / "two"), "--steps", "2"],
                   check=True, timeout=600, env=env, capture_output=True)
    subprocess.run([sys.executable, example, "--out", str(tmp_path / "one"), "--steps", "2"], check=True, timeout=600,
                   env=env, capture_output=True)
    names = sorted(os.listdir(tmp_path / "one"))
    assert len(names) == 17 and sorted(os.listdir(tmp_path / "two")) == names   # 1 + 4 x (5 - 1) frames
    for name in names:
        a = np.asarray(Image.open(tmp_path / "one" / name), dtype=np.int16)
        b = np.asarray(Image.open(tmp_path / "two" / name), dtype=np.int16)
        assert np.abs(a - b).max() <= 1   # equal up to the rounding of a 1e-6 difference


def test_sparse_attention_config_with_dense_steps():
    """attention: {sparse_type: rf_v2} at world size 1: the first `dense_steps` forwards are dense (equal to the
    original model), later ones sparse; a sparsity that keeps every tile equals the original."""
    feed = inputs(4, 16)   # 4 x 8 x 8 = 256 tokens: 4 blocks of 64
    original = tiny_wan()
    with torch.no_grad():
        want = original(**feed)[0]
        model = ParallelManager(tiny_wan(), {"attention": {"sparse_type": "rf_v2", "sparsity": 0.5, "dense_steps": 1,
                                                           "block_size": 64}})
        torch.testing.assert_close(model(**feed)[0], want, atol=1e-5, rtol=1e-5)       # step 1: dense
        sparse = model(**feed)[0]                                                        # step 2: rf_v2
        assert torch.isfinite(sparse).all() and (sparse - want).abs().max() > 1e-4
        keep_all = ParallelManager(tiny_wan(), {"attention": {"sparse_type": "rf_v2", "sparsity": 1e-9,
                                                              "block_size": 64}})
        torch.testing.assert_close(keep_all(**feed)[0], want, atol=1e-5, rtol=1e-5)
