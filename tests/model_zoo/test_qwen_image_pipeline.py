"""Qwen-Image text-to-image on the runtime (lite.diffusion.qwen_image): a tiny diffusers QwenImagePipeline
directory (a Qwen2.5-VL text encoder, QwenImageTransformer2DModel, AutoencoderKLQwenImage with a latent mean / std,
the flow-match scheduler with dynamic shifting and shift_terminal, a fast tokenizer) converted by `python -m
model_zoo convert Qwen-Image`, then the same prompts and noise through diffusers and the runtime: the packed latents
after the steps and the decoded images within 1e-4 (float32), with true CFG (negative prompt) and without, two
prompts of different lengths (the text mask)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo

HEIGHT, WIDTH = 32, 48   # a 4x VAE: latent 8 x 12, 24 packed tokens


def tiny_qwen_image_pipeline(path):
    from diffusers import (AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImagePipeline,
                           QwenImageTransformer2DModel)
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    words = ["<unk>", "<pad>"] + ("<| im_start im_end |> system user assistant Describe the image by detailing "
                                  "color , shape size texture quantity text spatial relationships of objects and "
                                  "background : a red fox in snow at night blurry").split()
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>")
    torch.manual_seed(0)
    text_encoder = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(
        text_config=dict(vocab_size=len(words), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, bos_token_id=0, eos_token_id=0,
                         rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]}),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=24, num_heads=2, out_hidden_size=32,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                           fullatt_block_indexes=[0]))).eval()
    transformer = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                              attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                              axes_dims_rope=(4, 6, 6)).eval()
    vae = AutoencoderKLQwenImage(base_dim=8, z_dim=4, dim_mult=[1, 2, 2], num_res_blocks=1, attn_scales=[],
                                 temperal_downsample=[False, True], latents_mean=[0.1, -0.2, 0.0, 0.3],
                                 latents_std=[1.5, 0.7, 1.0, 2.0]).eval()
    with torch.no_grad():
        for module in (transformer, vae):
            for p in module.parameters():
                p.add_(torch.randn_like(p) * 0.05)
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.5, max_shift=0.9,
                                                base_image_seq_len=16, max_image_seq_len=64, shift_terminal=0.02,
                                                time_shift_type="exponential")
    pipe = QwenImagePipeline(scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
                             transformer=transformer)
    pipe.save_pretrained(str(path))
    return pipe


def test_qwen_image_pipeline_matches_diffusers(tmp_path):
    from lite.diffusion.flux import pack_latents
    from lite.diffusion.qwen_image import QwenImageTextToImage
    pipe = tiny_qwen_image_pipeline(tmp_path / "pipeline")
    assert model_zoo(["convert", "Qwen-Image", "--checkpoint", str(tmp_path / "pipeline"), "--output",
                      str(tmp_path / "lite"), "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    qwen = QwenImageTextToImage(str(tmp_path / "lite"))
    assert qwen.image_shape == (HEIGHT, WIDTH) and qwen.tokens == 24
    noise = pack_latents(np.random.default_rng(0).standard_normal((2, 4, 8, 12)).astype(np.float32))
    prompts = ["a red fox in the snow at night", "a red fox"]
    for negative, steps in ((None, 2), ("blurry", 3)):
        with torch.no_grad():
            ref = dict(prompt=prompts, negative_prompt=negative, true_cfg_scale=4.0, height=HEIGHT, width=WIDTH,
                       num_inference_steps=steps, latents=torch.from_numpy(noise))
            want_latents = pipe(**ref, output_type="latent").images.numpy()
            want_images = pipe(**ref, output_type="np").images
        args = dict(negative_prompt=negative, steps=steps, true_cfg_scale=4.0, latents=noise)
        got = qwen(prompts, **args, output_type="latent")
        np.testing.assert_allclose(got, want_latents, rtol=1e-4, atol=1e-4 * np.abs(want_latents).max())
        images = qwen(prompts, **args, output_type="float")
        assert images.shape == want_images.shape == (2, HEIGHT, WIDTH, 3)
        np.testing.assert_allclose(images, want_images, atol=1e-4)
    out = tmp_path / "fox.png"
    assert model_zoo(["run", "Qwen-Image", "--model", str(tmp_path / "lite"), "--prompt", prompts[0], "--output",
                      str(out), "--steps", "2"]) == 0
    assert out.stat().st_size > 0
    with pytest.raises(ValueError, match="image size"):
        qwen(prompts[0], steps=1, latents=np.zeros((1, 5, 16), np.float32))


def test_shift_terminal_schedule_matches_diffusers():
    from diffusers import FlowMatchEulerDiscreteScheduler
    from lite.diffusion.schedulers import make_scheduler
    ref = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.5, max_shift=0.9,
                                          shift_terminal=0.02, time_shift_type="exponential")
    ours = make_scheduler({**ref.config, "_class_name": "FlowMatchEulerDiscreteScheduler"})
    for steps in (2, 4, 50):
        sigmas = np.linspace(1.0, 1 / steps, steps)
        ref.set_timesteps(sigmas=sigmas, mu=0.7)
        np.testing.assert_allclose(ours.set_timesteps(steps, sigmas=sigmas, mu=0.7), ref.timesteps.numpy(),
                                   rtol=1e-5)
        np.testing.assert_allclose(ours.sigmas, ref.sigmas.numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="two denoising steps"):   # diffusers' schedule would be NaN
        ours.set_timesteps(1, sigmas=np.ones(1), mu=0.7)
