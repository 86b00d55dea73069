"""Wan image-to-video on the runtime (lite.diffusion.wan_i2v): tiny diffusers WanImageToVideoPipeline directories
converted by `python -m model_zoo convert`, then the same image, prompts and initial noise through diffusers and the
runtime; the latents after the steps and the decoded frames within 1e-4 (float32). Wan 2.1's form (a CLIP vision
tower whose penultimate states the DiT attends to) and Wan 2.2 A14B's (no CLIP, two experts, a last frame)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo
from test_wan_pipeline import perturb, tiny_dit_and_vae, tiny_text_encoder

FRAMES, HEIGHT, WIDTH = 5, 16, 32
CONDITION = 2 + 4   # the mask (the VAE's temporal factor) and the image latents


def tiny_i2v_pipeline(path, wan22: bool = False):
    from diffusers import UniPCMultistepScheduler, WanImageToVideoPipeline, WanTransformer3DModel
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel
    tokenizer, text_encoder = tiny_text_encoder()
    image_encoder = image_processor = transformer_2 = None
    if wan22:   # Wan 2.2 I2V A14B: no image encoder, two experts
        transformer, vae = tiny_dit_and_vae(4 + CONDITION)
        transformer_2 = WanTransformer3DModel(**transformer.config).eval()
        perturb(transformer, transformer_2, vae)
    else:
        transformer, vae = tiny_dit_and_vae(4 + CONDITION, image_dim=20, added_kv_proj_dim=24)
        image_encoder = CLIPVisionModel(CLIPVisionConfig(hidden_size=20, intermediate_size=32, num_hidden_layers=3,
                                                         num_attention_heads=4, image_size=32, patch_size=8)).eval()
        image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
        perturb(transformer, vae)
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
    pipe = WanImageToVideoPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, scheduler=scheduler,
                                   image_processor=image_processor, image_encoder=image_encoder,
                                   transformer=transformer, transformer_2=transformer_2,
                                   boundary_ratio=0.6 if wan22 else None)
    pipe.save_pretrained(str(path))
    return pipe


def picture(seed: int, size=(45, 29)):
    """A smooth RGB picture (not the video's size or aspect: both resizes do work)."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size[1], 0:size[0]]
    channels = [np.sin(x / rng.uniform(3, 9) + rng.uniform(0, 6)) * np.cos(y / rng.uniform(3, 9)) for _ in range(3)]
    return Image.fromarray(np.round((np.stack(channels, -1) + 1) * 127.5).astype(np.uint8))


def convert(name, pipeline, out):
    assert model_zoo(["convert", name, "--checkpoint", str(pipeline), "--output", str(out), "--frames", str(FRAMES),
                      "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0


@pytest.fixture(scope="module")
def wan21(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan_i2v")
    pipe = tiny_i2v_pipeline(root / "pipeline")
    convert("Wan2.1-I2V-14B-480P", root / "pipeline", root / "lite")
    return pipe, root


def diffusers_run(pipe, noise, steps, output_type, **args):
    """(the text at diffusers' 512 rows: its image cross-attention takes the rows before the last 512 as the image's)"""
    with torch.no_grad():
        out = pipe(**args, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=steps,
                   latents=torch.from_numpy(noise), output_type=output_type).frames
    return out.numpy() if output_type == "latent" else out


def test_wan21_i2v_pipeline_matches_diffusers(wan21):
    from lite.diffusion.wan_i2v import WanImageToVideo
    pipe, root = wan21
    lite_pipe = WanImageToVideo(str(root / "lite"))
    assert lite_pipe.latent_shape == (4, 3, 4, 8) and lite_pipe.takes_image_states
    noise = np.random.default_rng(0).standard_normal((1, *lite_pipe.latent_shape)).astype(np.float32)
    args = dict(image=picture(0), prompt="a cat walks on the grass", negative_prompt="blurry, low quality",
                guidance_scale=5.0)
    for steps in (2, 3):
        want_latents = diffusers_run(pipe, noise, steps, "latent", **args)
        latents = lite_pipe(**args, steps=steps, latents=noise, output_type="latent")
        np.testing.assert_allclose(latents, want_latents, rtol=1e-4, atol=1e-4 * np.abs(want_latents).max())
    want_video = diffusers_run(pipe, noise, 2, "np", **args)
    video = lite_pipe(**args, steps=2, latents=noise, output_type="float")
    assert video.shape == want_video.shape == (1, FRAMES, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(video, want_video, atol=1e-4)


def test_the_image_changes_the_video(wan21):
    """Both paths carry the image: the CLIP states alone (same VAE condition) and the condition alone."""
    from lite.diffusion.wan_i2v import WanImageToVideo
    _, root = wan21
    lite_pipe = WanImageToVideo(str(root / "lite"))
    noise = np.random.default_rng(1).standard_normal((1, *lite_pipe.latent_shape)).astype(np.float32)
    a, b = picture(0), picture(1)
    cond_a, states_a, states_b = lite_pipe.encode_condition(a), lite_pipe.encode_image(a), lite_pipe.encode_image(b)
    prompts = dict(prompt="a cat", negative_prompt="", steps=2, guidance_scale=5.0, seed=0, latents=noise,
                   output_type="latent", guidance_scale_2=None)
    base = lite_pipe._generate(**prompts, condition=cond_a, image_states=states_a)
    np.testing.assert_allclose(base, lite_pipe(a, "a cat", steps=2, latents=noise, output_type="latent"), rtol=1e-6)
    assert np.abs(lite_pipe._generate(**prompts, condition=cond_a, image_states=states_b) - base).max() > 1e-3
    assert np.abs(lite_pipe._generate(**prompts, condition=lite_pipe.encode_condition(b),
                                      image_states=states_a) - base).max() > 1e-3


def test_preprocessing_equals_the_processors():
    """CLIP's resize / crop / normalisation and the VAE's Lanczos resize, against transformers' and diffusers'
    processors, over small, portrait and landscape inputs; the first-frame mask against diffusers' construction."""
    from diffusers.video_processor import VideoProcessor
    from transformers import CLIPImageProcessor
    from lite.diffusion.wan_i2v import clip_pixels, first_frame_mask, video_pixels
    config = dict(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224})
    processor = CLIPImageProcessor(**config)
    for size in ((45, 29), (300, 500), (640, 360)):
        image = picture(2, size)
        want = processor(images=image, return_tensors="np")["pixel_values"]
        np.testing.assert_allclose(clip_pixels(image, processor.to_dict()), want, atol=1e-5)
        want = VideoProcessor(vae_scale_factor=8).preprocess(image, height=48, width=80).numpy()
        np.testing.assert_allclose(video_pixels(image, 48, 80), want, atol=1e-6)
    array = np.asarray(picture(3)).copy()   # a uint8 array is the same picture
    np.testing.assert_array_equal(clip_pixels(array, processor.to_dict()), clip_pixels(picture(3), processor.to_dict()))
    for frames, scale, last in ((81, 4, False), (9, 4, True), (5, 2, False)):
        latent_frames = (frames - 1) // scale + 1
        mask = torch.ones(1, 1, frames, 2, 3)
        mask[:, :, 1:frames - 1 if last else frames] = 0
        mask = torch.cat([torch.repeat_interleave(mask[:, :, :1], scale, dim=2), mask[:, :, 1:]], dim=2)
        want = mask.view(1, -1, scale, 2, 3).transpose(1, 2).numpy()
        np.testing.assert_array_equal(first_frame_mask(latent_frames, 2, 3, scale, last), want)


def test_wan22_i2v_two_experts_and_a_last_frame(tmp_path):
    """Wan 2.2 I2V A14B's form: no CLIP (the image enters through the VAE latents only), two experts switched at the
    boundary, and first-last-frame conditioning."""
    from lite.diffusion.wan_i2v import WanImageToVideo
    pipe = tiny_i2v_pipeline(tmp_path / "pipeline", wan22=True)
    convert("Wan2.2-I2V-A14B", tmp_path / "pipeline", tmp_path / "lite")
    lite_pipe = WanImageToVideo(str(tmp_path / "lite"))
    assert not lite_pipe.takes_image_states and "transformer_2" in lite_pipe.models
    noise = np.random.default_rng(4).standard_normal((1, *lite_pipe.latent_shape)).astype(np.float32)
    for extra in ({}, {"last_image": picture(6)}):
        args = dict(image=picture(5), prompt="a cat on the grass", negative_prompt="blurry", guidance_scale=4.0,
                    guidance_scale_2=2.5, **extra)
        want = diffusers_run(pipe, noise, 4, "latent", **args)
        got = lite_pipe(**args, steps=4, latents=noise, output_type="latent")
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_run_command_and_bad_inputs(wan21, tmp_path, capsys):
    from lite.diffusion.wan import WanTextToVideo
    from lite.diffusion.wan_i2v import WanImageToVideo
    _, root = wan21
    picture(7).save(tmp_path / "start.png")
    out = tmp_path / "video.gif"
    assert model_zoo(["run", "Wan2.1-I2V-14B-480P", "--model", str(root / "lite"), "--image",
                      str(tmp_path / "start.png"), "--prompt", "a cat", "--output", str(out), "--steps", "2"]) == 0
    from PIL import Image
    with Image.open(out) as im:
        assert im.size == (WIDTH, HEIGHT) and im.n_frames == FRAMES
    with pytest.raises(SystemExit, match="--image"):
        model_zoo(["run", "Wan2.1-I2V-14B-480P", "--model", str(root / "lite"), "--prompt", "a cat", "--output",
                   str(tmp_path / "v.gif")])
    with pytest.raises(ValueError, match="image-to-video"):
        WanTextToVideo(str(root / "lite"))
    lite_pipe = WanImageToVideo(str(root / "lite"))
    with pytest.raises(NotImplementedError, match="first-last-frame"):
        lite_pipe(picture(0), "a cat", steps=1, last_image=picture(1))
    with pytest.raises(ValueError, match="uint8"):
        lite_pipe(np.zeros((8, 8, 3), np.float32), "a cat", steps=1)
    with pytest.raises(FileNotFoundError):
        lite_pipe(str(tmp_path / "missing.png"), "a cat", steps=1)


def tiny_ti2v_pipeline(path):
    """Wan 2.2 TI2V-5B's form: a WanPipeline with expand_timesteps, the patchified residual VAE (12 channels in and
    out: 3 x 2 x 2) and a DiT whose channels are the latents' own."""
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline
    tokenizer, text_encoder = tiny_text_encoder()
    transformer, _ = tiny_dit_and_vae(4)
    torch.manual_seed(4)
    vae = AutoencoderKLWan(base_dim=8, decoder_base_dim=12, z_dim=4, dim_mult=[1, 2, 2], num_res_blocks=1,
                           attn_scales=[], temperal_downsample=[False, True], in_channels=12, out_channels=12,
                           patch_size=2, is_residual=True, scale_factor_temporal=2, scale_factor_spatial=8,
                           latents_mean=[0.1, -0.2, 0.0, 0.3], latents_std=[1.5, 0.7, 1.0, 2.0]).eval()
    perturb(transformer, vae)
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
    pipe = WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, transformer=transformer, vae=vae,
                       scheduler=scheduler, expand_timesteps=True)
    pipe.save_pretrained(str(path))
    return pipe


def test_wan22_ti2v_text_and_image_to_video(tmp_path):
    """Wan 2.2 TI2V-5B: one converted directory renders from text (every token at t) and from a first frame (its
    latents in frame 0 at every step, those tokens at timestep 0), against diffusers' WanPipeline and
    WanImageToVideoPipeline with expand_timesteps: latents after 3 steps and the decoded frames."""
    from diffusers import WanImageToVideoPipeline
    from lite.diffusion.wan import WanTextToVideo
    from lite.diffusion.wan_i2v import WanImageToVideo
    pipe = tiny_ti2v_pipeline(tmp_path / "pipeline")
    convert("Wan2.2-TI2V-5B", tmp_path / "pipeline", tmp_path / "lite")
    t2v = WanTextToVideo(str(tmp_path / "lite"), max_sequence_length=32)
    assert t2v.expand_timesteps and t2v.latent_shape == (4, 3, 2, 4) and t2v.video_shape == (FRAMES, HEIGHT, WIDTH)
    noise = np.random.default_rng(7).standard_normal((1, *t2v.latent_shape)).astype(np.float32)
    args = dict(prompt="a cat walks on the grass", negative_prompt="blurry", guidance_scale=5.0)
    with torch.no_grad():
        ref = dict(height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=3,
                   latents=torch.from_numpy(noise), max_sequence_length=32, **args)
        want = pipe(**ref, output_type="latent").frames.numpy()
        want_video = pipe(**ref, output_type="np").frames
    got = t2v(**args, steps=3, latents=noise, output_type="latent")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    np.testing.assert_allclose(t2v(**args, steps=3, latents=noise, output_type="float"), want_video, atol=1e-4)

    i2v_ref = WanImageToVideoPipeline(tokenizer=pipe.tokenizer, text_encoder=pipe.text_encoder, vae=pipe.vae,
                                      scheduler=pipe.scheduler, transformer=pipe.transformer, expand_timesteps=True)
    i2v = WanImageToVideo(str(tmp_path / "lite"), max_sequence_length=32)
    image = picture(8)
    want = diffusers_run(i2v_ref, noise, 3, "latent", image=image, max_sequence_length=32, **args)
    got = i2v(image, **args, steps=3, latents=noise, output_type="latent")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert np.abs(got - t2v(**args, steps=3, latents=noise, output_type="latent")).max() > 1e-3
    with pytest.raises(NotImplementedError, match="last frame"):
        i2v(image, "a cat", steps=1, last_image=picture(9))
