"""ParallelManager on diffusers' Kandinsky5Transformer3DModel: Ulysses over the visual tokens on gloo in spawned
processes equals the single-process model (an image latent of 15 tokens, not divisible by the world size, a video
latent with visual_cond and the 480p RoPE scale, and NABLA attention with flex), restore undoes it, what it cannot shard is refused by name; a whole
Kandinsky5T2IPipeline (transformer under Ulysses, its AutoencoderKL decoded by bands of rows) gives the
single-process image."""
from __future__ import annotations

import pytest
import torch

from lite_boost import ParallelManager
from lite_boost.parallel import restore

from nabla_reference import exact_block_masks, nabla_params
from test_ulysses import count_all_to_all, spawn


def tiny_kandinsky5(model_dim: int = 64, visual_cond: bool = False, **extra):
    from diffusers import Kandinsky5Transformer3DModel
    torch.manual_seed(0)
    model = Kandinsky5Transformer3DModel(in_visual_dim=4, out_visual_dim=4, in_text_dim=24, in_text_dim2=16,
                                         time_dim=20, model_dim=model_dim, ff_dim=48, num_text_blocks=1,
                                         num_visual_blocks=2, axes_dims=(4, 6, 6), visual_cond=visual_cond,
                                         **extra).eval()
    with torch.no_grad():   # the modulations start at zero
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def inputs(frames: int, rows: int, cols: int, channels: int = 4, scale=(1.0, 1.0, 1.0)):
    g = torch.Generator().manual_seed(1)
    return dict(hidden_states=torch.randn(1, frames, rows, cols, channels, generator=g),
                encoder_hidden_states=torch.randn(1, 7, 24, generator=g), timestep=torch.tensor([640.0]),
                pooled_projections=torch.randn(1, 16, generator=g),
                visual_rope_pos=[torch.arange(frames), torch.arange(rows // 2), torch.arange(cols // 2)],
                text_rope_pos=torch.arange(7), scale_factor=scale, return_dict=False)


NABLA = dict(attention_type="nabla", attention_P=0.6, attention_wT=1, attention_wH=1, attention_wW=3,
             attention_add_sta=True, attention_method="topcdf")


def _matches(rank, world):
    cases = ((False, (1, 6, 10), (1.0, 1.0, 1.0), {}), (True, (2, 4, 6), (1.0, 2.0, 2.0), {}),
             (True, (2, 32, 32), (1.0, 2.0, 2.0), NABLA))   # NABLA: 2 frames of 16 x 16 tokens, 8 blocks of 64
    for visual_cond, shape, scale, extra in cases:
        model = tiny_kandinsky5(visual_cond=visual_cond, **extra)
        feed = inputs(*shape, channels=9 if visual_cond else 4, scale=scale)
        if extra:
            feed["sparse_params"] = nabla_params(model, shape)
        with torch.no_grad(), exact_block_masks():
            want = model(**feed)[0]
            ParallelManager(model)
            with count_all_to_all() as calls:
                got = model(**feed)[0]
            assert len(calls) == 4 * 2, len(calls)   # four all-to-alls per visual self-attention
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            restore(model)
            torch.testing.assert_close(model(**feed)[0], want, atol=1e-6, rtol=1e-6)
    if world == 2:
        with pytest.raises(ValueError, match="heads"):
            ParallelManager(tiny_kandinsky5(model_dim=48))   # 3 heads
        with pytest.raises(NotImplementedError, match="cached"):
            ParallelManager(tiny_kandinsky5(), {"rope": "cached"})


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_ulysses_kandinsky5_equals_single_process(world):
    spawn(_matches, world)


def _pipeline_matches(rank, world):
    """Kandinsky5T2IPipeline at 64 x 96 (an 8x VAE: 24 tokens), 2 steps with guidance."""
    import warnings

    import numpy as np
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, Kandinsky5T2IPipeline
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (CLIPTextConfig, CLIPTextModel, PreTrainedTokenizerFast, Qwen2_5_VLConfig,
                              Qwen2_5_VLForConditionalGeneration)
    words = ["<unk>", "<pad>", "</s>", "a", "red", "fox"]
    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(1)
    qwen = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(
        text_config=dict(vocab_size=len(words), hidden_size=24, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1,
                         rope_scaling={"type": "mrope", "mrope_section": [2, 2, 2]}),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=24, num_heads=2, out_hidden_size=24))).eval()
    clip = CLIPTextModel(CLIPTextConfig(vocab_size=len(words), hidden_size=16, intermediate_size=16,
                                        num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=77,
                                        eos_token_id=2)).eval()
    vae = AutoencoderKL(latent_channels=4, block_out_channels=[8, 8, 8, 8], down_block_types=["DownEncoderBlock2D"] * 4,
                        up_block_types=["UpDecoderBlock2D"] * 4, layers_per_block=1, norm_num_groups=4,
                        use_quant_conv=False, use_post_quant_conv=False, scaling_factor=0.3611).eval()
    pipe = Kandinsky5T2IPipeline(transformer=tiny_kandinsky5(), vae=vae, text_encoder=qwen, tokenizer=tok,
                                 text_encoder_2=clip, tokenizer_2=tok, scheduler=FlowMatchEulerDiscreteScheduler())
    pipe.set_progress_bar_config(disable=True)
    pipe.resolutions = [(96, 64)]
    args = dict(prompt="a red fox", height=64, width=96, num_inference_steps=2, guidance_scale=3.5, output_type="np")
    with torch.no_grad():
        want = pipe(**args, generator=torch.Generator().manual_seed(0)).image
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)   # no component left whole
            ParallelManager(pipe)
        assert pipe.vae._lite_boost_parallel and pipe.transformer._lite_boost_parallel
        got = pipe(**args, generator=torch.Generator().manual_seed(0)).image
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_kandinsky5_t2i_pipeline_on_two_ranks_equals_one_process():
    spawn(_pipeline_matches, 2)


def test_kandinsky5_at_world_size_one_is_untouched():
    model = tiny_kandinsky5()
    assert ParallelManager(model) is model and not getattr(model, "_lite_boost_parallel", None)


def tiny_hunyuan_vae():
    from diffusers import AutoencoderKLHunyuanVideo
    torch.manual_seed(0)
    vae = AutoencoderKLHunyuanVideo(latent_channels=4, block_out_channels=(8, 8, 16, 16), layers_per_block=1,
                                    norm_num_groups=4).eval()
    with torch.no_grad():
        for p in vae.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return vae


def _vae_matches(rank, world):
    """Latents of 7 frames (tiles of 5, 4 and 1 latent frames: uneven over the ranks) and of 3 (one tile)."""
    for frames in (7, 3):
        vae = tiny_hunyuan_vae()
        z = torch.randn(1, 4, frames, 3, 5, generator=torch.Generator().manual_seed(frames))
        with torch.no_grad():
            want = vae.decode(z).sample
            ParallelManager(vae)
            assert vae._lite_boost_parallel
            decoded = []
            real = vae.decoder.forward
            vae.decoder.forward = lambda x: decoded.append(x.shape[2]) or real(x)
            got = vae.decode(z).sample
            del vae.decoder.forward
            # this rank's share of the tiles (5, 4, 1 latent frames round-robin), or the one tile everywhere
            assert decoded == ([5, 4, 1][rank::world] if frames == 7 else [3]), decoded
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
            restore(vae)
            torch.testing.assert_close(vae.decode(z).sample, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("world", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_hunyuan_video_vae_tiles_across_ranks_equal_single_process(world):
    spawn(_vae_matches, world)
