"""Kandinsky 5 image to image on the runtime (lite.diffusion.kandinsky5.Kandinsky5ImageToImage): the AutoencoderKL
encoder graph (head "vae_encoder") against diffusers, then a tiny Kandinsky5I2IPipeline directory converted by
`python -m model_zoo convert Kandinsky-5.0-I2I-Lite` against diffusers: the image's posterior sample, then the same
starting latents [noise, image latents, ones] with the image in Qwen2.5-VL's prompt (vision tower rows at the
image-pad tokens, 3-D positions); latents and images within 1e-4 (float32).

Kandinsky's `tokenizer` is a Qwen2VLProcessor, which needs torchvision (its video processor): the reference gets a
stand-in (qwen2_vl_processor.py) that does what the processor does for one image (transformers' Qwen2-VL image processor, each image-pad
token repeated for the merged patches, the tokenizer, the token types the processor returns)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from test_generation_graphs import convert, run
from test_kandinsky5 import TINY_DIT
from test_wan_pipeline import perturb
from qwen2_vl_processor import StandInProcessor, word_tokenizer

HEIGHT, WIDTH = 64, 96          # an 8x VAE: latent 8 x 12; the Qwen prompt sees 48 x 32 -> a 4 x 6 patch grid
WORDS = ("<| im_start im_end |> system You are a prompt engineer . Based on the provided source image ( first ) and "
         "target second , create an interesting text prompt that can be used together with the to : user a red fox "
         "in snow at night blurry make it")


def tiny_vae(quant_conv: bool):
    from diffusers import AutoencoderKL
    torch.manual_seed(2)
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
                        up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[8, 8, 16, 16],
                        layers_per_block=1, latent_channels=4, norm_num_groups=4, use_quant_conv=quant_conv,
                        use_post_quant_conv=quant_conv, scaling_factor=0.3611, shift_factor=0.1159).eval()
    perturb(vae)
    return vae


@pytest.mark.parametrize("quant_conv", [True, False])
def test_autoencoder_kl_encoder_matches_diffusers(tmp_path, quant_conv):
    """The posterior's moments of a batch of two images: stride-2 downsamplers padded right and bottom, the mid
    block's attention, quant_conv where the checkpoint has one (SD's VAE; FLUX's has none)."""
    vae = tiny_vae(quant_conv)
    vae.save_pretrained(str(tmp_path / "vae"))
    path = convert(str(tmp_path / "vae"), str(tmp_path / "enc.ms"), latent_shape=(1, 3, 5), head="vae_encoder")
    x = np.random.default_rng(1).uniform(-1, 1, (2, 3, 24, 40)).astype(np.float32)
    with torch.no_grad():
        want = vae._encode(torch.from_numpy(x)).numpy()
    got = run(path, {"images": x})[0]
    assert got.shape == want.shape == (2, 8, 3, 5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def tiny_kandinsky5_i2i(path):
    from diffusers import FlowMatchEulerDiscreteScheduler, Kandinsky5I2IPipeline, Kandinsky5Transformer3DModel
    from transformers import (CLIPTextConfig, CLIPTextModel, Qwen2_5_VLConfig,
                              Qwen2_5_VLForConditionalGeneration)
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from test_flux_pipeline import _fast_tokenizer
    words = ["<unk>", "<pad>"] + WORDS.split()
    tokenizer, (start, image_pad, end) = word_tokenizer(words)
    clip_words = ["<pad>", "</s>", "<unk>", "<s>"] + "a red fox in the snow at night blurry make it".split()
    clip_tokenizer = _fast_tokenizer(clip_words, "</s>", "</s>", "<s> $A </s>")
    clip_tokenizer.model_max_length = 77
    torch.manual_seed(0)
    text_encoder = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(
        text_config=dict(vocab_size=len(words) + 3, hidden_size=24, intermediate_size=40, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, bos_token_id=0, eos_token_id=0,
                         rope_scaling={"type": "mrope", "mrope_section": [1, 1, 1]}),
        vision_config=dict(depth=2, hidden_size=16, intermediate_size=24, num_heads=2, out_hidden_size=24,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
                           fullatt_block_indexes=[1]),
        image_token_id=image_pad, video_token_id=0, vision_start_token_id=start, vision_end_token_id=end)).eval()
    clip = CLIPTextModel(CLIPTextConfig(vocab_size=len(clip_words), hidden_size=16, intermediate_size=24,
                                        num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=77,
                                        eos_token_id=1, bos_token_id=3, pad_token_id=1)).eval()
    torch.manual_seed(1)
    transformer = Kandinsky5Transformer3DModel(**{**TINY_DIT, "visual_cond": True}).eval()
    perturb(transformer, text_encoder)
    vae = tiny_vae(False)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    image_processor = Qwen2VLImageProcessorPil()
    for name, part in (("transformer", transformer), ("vae", vae), ("text_encoder", text_encoder),
                       ("tokenizer", tokenizer), ("tokenizer", image_processor), ("text_encoder_2", clip),
                       ("tokenizer_2", clip_tokenizer), ("scheduler", scheduler)):
        part.save_pretrained(str(path / name))
    with open(path / "model_index.json", "w") as f:
        json.dump({"_class_name": "Kandinsky5I2IPipeline", "_diffusers_version": "0.42.1"}, f)
    pipe = Kandinsky5I2IPipeline(transformer=transformer, vae=vae, text_encoder=text_encoder,
                                 tokenizer=StandInProcessor(image_processor, tokenizer, image_pad), text_encoder_2=clip,
                                 tokenizer_2=clip_tokenizer, scheduler=scheduler)
    pipe.resolutions = [(WIDTH, HEIGHT)]   # the reference renders the tiny size instead of snapping to 1024 x 1024
    return pipe


def test_kandinsky5_i2i_pipeline_matches_diffusers(tmp_path):
    from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution
    from PIL import Image

    from lite.diffusion.kandinsky5 import Kandinsky5ImageToImage
    from lite.diffusion.wan_i2v import video_pixels
    from model_zoo.cli import main as model_zoo
    pipe = tiny_kandinsky5_i2i(tmp_path / "pipeline")
    assert model_zoo(["convert", "Kandinsky-5.0-I2I-Lite", "--checkpoint", str(tmp_path / "pipeline"), "--output",
                      str(tmp_path / "lite"), "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    k5 = Kandinsky5ImageToImage(str(tmp_path / "lite"))
    assert k5.image_shape == (HEIGHT, WIDTH) and k5.vision_tokens == 6
    picture = tmp_path / "fox.png"
    Image.fromarray(np.random.default_rng(3).integers(0, 256, (HEIGHT, WIDTH, 3), np.uint8)).save(picture)

    pixels = video_pixels(str(picture), HEIGHT, WIDTH)
    with torch.no_grad():
        posterior = DiagonalGaussianDistribution(pipe.vae._encode(torch.from_numpy(pixels)))
    noise = np.random.default_rng(7).standard_normal((1, 4, 8, 12)).astype(np.float32)
    want_image = (posterior.mean.numpy() + posterior.std.numpy() * noise) * pipe.vae.config.scaling_factor
    got_image = k5.encode_image(str(picture), seed=7)
    np.testing.assert_allclose(got_image, want_image.transpose(0, 2, 3, 1)[:, None], rtol=1e-4, atol=1e-5)

    latents = np.ones((1, 1, 8, 12, 9), np.float32)
    latents[..., :4] = np.random.default_rng(0).standard_normal((1, 1, 8, 12, 4))
    latents[..., 4:8] = got_image
    prompt = "make it a red fox in the snow at night"
    for negative, guidance in ((None, 3.5), ("blurry", 5.0), (None, 1.0)):
        ref = dict(image=Image.open(picture), prompt=prompt, negative_prompt=negative, guidance_scale=guidance,
                   num_inference_steps=2)
        with torch.no_grad():
            want_latents = pipe(**ref, latents=torch.from_numpy(latents.copy()), output_type="latent").image.numpy()
            want_images = pipe(**ref, latents=torch.from_numpy(latents.copy()), output_type="np").image
        args = dict(negative_prompt=negative, guidance_scale=guidance, steps=2, latents=latents.copy())
        got = k5(str(picture), prompt, **args, output_type="latent")
        np.testing.assert_allclose(got, want_latents, rtol=1e-4, atol=1e-4 * np.abs(want_latents).max())
        images = k5(str(picture), prompt, **args, output_type="float")
        assert images.shape == want_images.shape == (1, HEIGHT, WIDTH, 3)
        np.testing.assert_allclose(images, want_images, atol=1e-4)
    out = tmp_path / "edited.png"
    assert model_zoo(["run", "Kandinsky-5.0-I2I-Lite", "--model", str(tmp_path / "lite"), "--prompt", prompt,
                      "--image", str(picture), "--output", str(out), "--steps", "1"]) == 0
    assert out.stat().st_size > 0
    with pytest.raises(ValueError, match="converted for 96x64"):
        k5(Image.fromarray(np.zeros((50, 50, 3), np.uint8)), prompt, steps=1)
