"""Qwen-Image-Edit on the runtime (lite.diffusion.qwen_image_edit): a tiny diffusers QwenImageEditPipeline directory
(Qwen2.5-VL with its vision tower, QwenImageTransformer2DModel, AutoencoderKLQwenImage with a latent mean / std, the
flow-match scheduler, a fast tokenizer with the vision special tokens, the Qwen2-VL image processor's config)
converted by `python -m model_zoo convert Qwen-Image-Edit`, then the same source image, prompts and noise through
diffusers and the runtime: the packed latents after the steps and the edited images within 1e-4 (float32), with true
CFG and without.

diffusers' edit pipeline reaches the target area (1024 x 1024) through its module's calculate_dimensions: the test
points it at the small area the directory is converted for. transformers' Qwen2VLProcessor needs torchvision (its
video processor), so the reference pipeline gets a stand-in that does what the processor does for one image
(transformers' Qwen2-VL image processor, each image-pad token repeated for the image's merged patches, the
tokenizer with padding); and, as Qwen2.5-VL computes its 3-D positions only with mm_token_type_ids, the reference's
text encoder is given them."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo
from qwen2_vl_processor import StandInProcessor, word_tokenizer

HEIGHT, WIDTH = 32, 64          # the edit size: a 4x VAE latent of 8 x 16, 32 packed tokens (and 32 of the source)


def tiny_qwen_image_edit(path):
    from diffusers import (AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImageEditPipeline,
                           QwenImageTransformer2DModel)
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    words = ["<unk>", "<pad>"] + ("<| im_start im_end |> system user assistant Describe the key features of input "
                                  "image color , shape size texture objects background then explain how text "
                                  "instruction should alter or modify . Generate a new that meets requirements while "
                                  "maintaining consistency with original where appropriate ( ) ' s make sky red "
                                  "blurry").split()
    tokenizer, (start, image_pad, end) = word_tokenizer(words)
    torch.manual_seed(0)
    text_encoder = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(
        text_config=dict(vocab_size=len(words) + 3, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, bos_token_id=0, eos_token_id=0,
                         rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]}),
        vision_config=dict(depth=2, hidden_size=16, intermediate_size=24, num_heads=2, out_hidden_size=32,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
                           fullatt_block_indexes=[1]),
        image_token_id=image_pad, video_token_id=0, vision_start_token_id=start, vision_end_token_id=end)).eval()
    transformer = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                              attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                              axes_dims_rope=(4, 6, 6)).eval()
    vae = AutoencoderKLQwenImage(base_dim=8, z_dim=4, dim_mult=[1, 2, 2], num_res_blocks=1, attn_scales=[],
                                 temperal_downsample=[False, True], latents_mean=[0.1, -0.2, 0.0, 0.3],
                                 latents_std=[1.5, 0.7, 1.0, 2.0]).eval()
    with torch.no_grad():
        for module in (transformer, vae, text_encoder):
            for p in module.parameters():
                p.add_(torch.randn_like(p) * 0.05)
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.5, max_shift=0.9,
                                                base_image_seq_len=16, max_image_seq_len=64, shift_terminal=0.02,
                                                time_shift_type="exponential")
    image_processor = Qwen2VLImageProcessorPil()
    for name, part in (("transformer", transformer), ("vae", vae), ("text_encoder", text_encoder),
                       ("tokenizer", tokenizer), ("scheduler", scheduler), ("processor", image_processor)):
        part.save_pretrained(str(path / name))
    with open(path / "model_index.json", "w") as f:
        json.dump({"_class_name": "QwenImageEditPipeline", "_diffusers_version": "0.42.1"}, f)
    pipe = QwenImageEditPipeline(scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
                                 processor=StandInProcessor(image_processor, tokenizer, image_pad), transformer=transformer)
    forward = text_encoder.forward

    def with_token_types(input_ids=None, **kwargs):   # 3-D positions for the image, as the model was trained
        return forward(input_ids=input_ids, mm_token_type_ids=(input_ids == image_pad).int(), **kwargs)
    text_encoder.forward = with_token_types
    return pipe


@pytest.fixture
def small_area(monkeypatch):
    import diffusers.pipelines.qwenimage.pipeline_qwenimage_edit as edit
    original = edit.calculate_dimensions
    monkeypatch.setattr(edit, "calculate_dimensions", lambda area, ratio: original(HEIGHT * WIDTH, ratio))


def test_qwen_image_edit_matches_diffusers(tmp_path, small_area):
    from PIL import Image

    from lite.diffusion.flux import pack_latents
    from lite.diffusion.qwen_image_edit import QwenImageEdit
    pipe = tiny_qwen_image_edit(tmp_path / "pipeline")
    assert model_zoo(["convert", "Qwen-Image-Edit", "--checkpoint", str(tmp_path / "pipeline"), "--output",
                      str(tmp_path / "lite"), "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    edit = QwenImageEdit(str(tmp_path / "lite"))
    assert edit.image_shape == (HEIGHT, WIDTH) and edit.tokens == 32 and edit.image_tokens == 6   # 56 x 84 px
    source = Image.fromarray(np.random.default_rng(3).integers(0, 256, (45, 90, 3), np.uint8))   # resized to 64x32
    noise = pack_latents(np.random.default_rng(0).standard_normal((1, 4, 8, 16)).astype(np.float32))
    prompt = "make the sky red"
    for negative, steps in ((None, 2), ("blurry", 2)):
        with torch.no_grad():
            ref = dict(image=source, prompt=prompt, negative_prompt=negative, true_cfg_scale=4.0,
                       num_inference_steps=steps, latents=torch.from_numpy(noise))
            want_latents = pipe(**ref, output_type="latent").images.numpy()
            want_images = pipe(**ref, output_type="np").images
        args = dict(negative_prompt=negative, steps=steps, true_cfg_scale=4.0, latents=noise)
        got = edit(source, prompt, **args, output_type="latent")
        np.testing.assert_allclose(got, want_latents, rtol=1e-4, atol=1e-4 * np.abs(want_latents).max())
        images = edit(source, prompt, **args, output_type="float")
        assert images.shape == want_images.shape == (1, HEIGHT, WIDTH, 3)
        np.testing.assert_allclose(images, want_images, atol=1e-4)
    source.save(tmp_path / "source.png")
    out = tmp_path / "edited.png"
    assert model_zoo(["run", "Qwen-Image-Edit", "--model", str(tmp_path / "lite"), "--image",
                      str(tmp_path / "source.png"), "--prompt", prompt, "--output", str(out), "--steps", "2"]) == 0
    assert out.stat().st_size > 0
    with pytest.raises(ValueError, match="converted for 64x32"):   # a square image edits at another size
        edit(Image.fromarray(np.zeros((50, 50, 3), np.uint8)), prompt, steps=2)
    with pytest.raises(SystemExit, match="--image"):
        model_zoo(["run", "Qwen-Image-Edit", "--model", str(tmp_path / "lite"), "--prompt", prompt, "--output",
                   str(out)])
