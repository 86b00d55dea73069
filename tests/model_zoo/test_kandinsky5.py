"""Kandinsky 5 on the runtime: the CrossDiT (model_zoo/generation/kandinsky5_graph.py, a diffusers Kandinsky5Transformer3DModel
directory) against diffusers at a tiny config with seeded random weights, and the text-to-image pipeline
(lite.diffusion.kandinsky5) against diffusers' Kandinsky5T2IPipeline (float32, within 1e-4)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from converter.ir import ConverterError
from nabla_reference import exact_block_masks, nabla_params
from test_generation_graphs import convert, run
from test_wan_pipeline import perturb

TINY_DIT = dict(in_visual_dim=4, out_visual_dim=4, in_text_dim=24, in_text_dim2=16, time_dim=20, patch_size=(1, 2, 2),
                model_dim=32, ff_dim=48, num_text_blocks=2, num_visual_blocks=2, axes_dims=(4, 6, 6))


def tiny_dit(path, **extra):
    from diffusers import Kandinsky5Transformer3DModel
    torch.manual_seed(0)
    model = Kandinsky5Transformer3DModel(**{**TINY_DIT, **extra}).eval()
    perturb(model)   # the modulations start at zero
    model.save_pretrained(str(path))
    return model


def reference(model, feeds, scale=(1.0, 1.0, 1.0)):
    _, f, h, w, _ = feeds["hidden_states"].shape
    text_len = feeds["encoder_hidden_states"].shape[1]
    with torch.no_grad():
        return model(hidden_states=torch.from_numpy(feeds["hidden_states"]),
                     encoder_hidden_states=torch.from_numpy(feeds["encoder_hidden_states"]),
                     timestep=torch.from_numpy(feeds["timestep"]),
                     pooled_projections=torch.from_numpy(feeds["pooled_projections"]),
                     visual_rope_pos=[torch.arange(f), torch.arange(h // 2), torch.arange(w // 2)],
                     text_rope_pos=torch.arange(text_len), scale_factor=scale).sample.numpy()


def feeds_for(rng, batch, shape, channels, text_len):
    return {"hidden_states": rng.standard_normal((batch, *shape, channels)).astype(np.float32),
            "encoder_hidden_states": rng.standard_normal((batch, text_len, 24)).astype(np.float32),
            "pooled_projections": rng.standard_normal((batch, 16)).astype(np.float32),
            "timestep": rng.uniform(0, 1000, batch).astype(np.float32)}


@pytest.mark.parametrize("case", ["image", "video_cond"])
def test_kandinsky5_dit_matches_diffusers(tmp_path, case):
    """The text blocks, visual blocks (3-D RoPE, bfloat16-rounded q / k, cross-attention) and the output layer: an
    image latent (1 x 6 x 10: 15 tokens) at two text lengths through one graph, batch 2; a video latent with the
    visual_cond channels and the 480p RoPE scale (1, 2, 2), at 2 threads."""
    video = case == "video_cond"
    model = tiny_dit(tmp_path / "transformer", visual_cond=video)
    shape, scale = ((3, 4, 6), (1.0, 2.0, 2.0)) if video else ((1, 6, 10), (1.0, 1.0, 1.0))
    path = convert(str(tmp_path / "transformer"), str(tmp_path / "dit"), latent_shape=shape, rope_scale=scale)
    rng = np.random.default_rng(0)
    for text_len in ((5,) if video else (7, 12)):
        feeds = feeds_for(rng, 1 if video else 2, shape, 9 if video else 4, text_len)
        want = reference(model, feeds, scale)
        got = run(path, feeds, threads=2 if video else 1)[0]
        assert got.shape == want.shape == (feeds["hidden_states"].shape[0], *shape, 4)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("fmt,bound", [("bfloat16", 1e-2), ("int8", 3e-2)])
def test_kandinsky5_dit_compressed_weights_stay_close(tmp_path, fmt, bound):
    """The converter's --precision for the CrossDiT: bf16 / int8 weights, relative error of the output small but
    nonzero (float32 gives 1e-6)."""
    model = tiny_dit(tmp_path / "transformer")
    path = convert(str(tmp_path / "transformer"), str(tmp_path / f"dit_{fmt}"), latent_shape=(1, 6, 10),
                   weight_format=fmt)
    feeds = feeds_for(np.random.default_rng(4), 1, (1, 6, 10), 4, 7)
    want = reference(model, feeds)
    rel = np.linalg.norm(run(path, feeds)[0] - want) / np.linalg.norm(want)
    assert 0 < rel < bound, rel


def test_kandinsky5_dit_refuses_what_it_cannot_build(tmp_path):
    tiny_dit(tmp_path / "other", attention_type="sliding")
    with pytest.raises(ConverterError, match="sliding"):
        convert(str(tmp_path / "other"), str(tmp_path / "n.ms"), latent_shape=(1, 4, 4))
    tiny_dit(tmp_path / "transformer")
    with pytest.raises(ConverterError, match="even"):
        convert(str(tmp_path / "transformer"), str(tmp_path / "odd.ms"), latent_shape=(1, 5, 4))
    with pytest.raises(ConverterError, match="1024"):
        convert(str(tmp_path / "transformer"), str(tmp_path / "long.ms"), latent_shape=(1, 4, 4), text_len=2048)


HEIGHT, WIDTH = 64, 96   # an 8x VAE: latent 8 x 12, 4 x 6 = 24 tokens
TEMPLATE_WORDS = ("<| im_start |> system You are a prompt engineer . Describe the image by detailing color , shape "
                  "size texture quantity text spatial relationships of objects and background :<| im_end user")


def tiny_text_encoders():
    """(Qwen2.5-VL, its word-level tokenizer, CLIP text model, its tokenizer) at tiny sizes."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (CLIPTextConfig, CLIPTextModel, PreTrainedTokenizerFast, Qwen2_5_VLConfig,
                              Qwen2_5_VLForConditionalGeneration)
    from test_flux_pipeline import _fast_tokenizer
    words = ["<unk>", "<pad>"] + (TEMPLATE_WORDS + " a red fox in snow at night blurry").split()
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>")
    clip_words = ["<pad>", "</s>", "<unk>", "<s>"] + "a red fox in the snow at night blurry".split()
    clip_tokenizer = _fast_tokenizer(clip_words, "</s>", "</s>", "<s> $A </s>")
    clip_tokenizer.model_max_length = 77
    torch.manual_seed(0)
    text_encoder = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(
        text_config=dict(vocab_size=len(words), hidden_size=24, intermediate_size=40, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, bos_token_id=0, eos_token_id=0,
                         rope_scaling={"type": "mrope", "mrope_section": [1, 1, 1]}),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=24, num_heads=2, out_hidden_size=24,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                           fullatt_block_indexes=[0]))).eval()
    clip = CLIPTextModel(CLIPTextConfig(vocab_size=len(clip_words), hidden_size=16, intermediate_size=24,
                                        num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=77,
                                        eos_token_id=1, bos_token_id=3, pad_token_id=1)).eval()
    return text_encoder, tokenizer, clip, clip_tokenizer


def tiny_kandinsky5_t2i_pipeline(path):
    from diffusers import (AutoencoderKL, FlowMatchEulerDiscreteScheduler, Kandinsky5T2IPipeline,
                           Kandinsky5Transformer3DModel)
    text_encoder, tokenizer, clip, clip_tokenizer = tiny_text_encoders()
    transformer = Kandinsky5Transformer3DModel(**TINY_DIT).eval()
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
                        up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[8, 8, 16, 16], layers_per_block=1,
                        latent_channels=4, norm_num_groups=4, use_quant_conv=False, use_post_quant_conv=False,
                        scaling_factor=0.3611, shift_factor=0.1159).eval()
    perturb(transformer, vae)
    pipe = Kandinsky5T2IPipeline(transformer=transformer, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
                                 text_encoder_2=clip, tokenizer_2=clip_tokenizer,
                                 scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0))
    pipe.save_pretrained(str(path))
    pipe.resolutions = [(WIDTH, HEIGHT)]   # the reference renders the tiny size instead of snapping to 1024 x 1024
    return pipe


def test_kandinsky5_t2i_pipeline_matches_diffusers(tmp_path):
    from lite.diffusion.kandinsky5 import Kandinsky5TextToImage
    from model_zoo.cli import main as model_zoo
    pipe = tiny_kandinsky5_t2i_pipeline(tmp_path / "pipeline")
    assert model_zoo(["convert", "Kandinsky-5.0-T2I-Lite", "--checkpoint", str(tmp_path / "pipeline"), "--output",
                      str(tmp_path / "lite"), "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    k5 = Kandinsky5TextToImage(str(tmp_path / "lite"))
    assert k5.image_shape == (HEIGHT, WIDTH)
    noise = np.random.default_rng(0).standard_normal((2, 1, 8, 12, 4)).astype(np.float32)
    prompts = ["a red fox in the snow at night", "a  red fox"]
    for negative, guidance, steps in ((None, 3.5, 2), ("blurry", 5.0, 3), (None, 1.0, 2)):
        want_latents, want_images = [], []
        for i, prompt in enumerate(prompts):   # diffusers batches pad the shorter prompt's states: one at a time
            with torch.no_grad():
                ref = dict(prompt=prompt, negative_prompt=negative, guidance_scale=guidance, height=HEIGHT,
                           width=WIDTH, num_inference_steps=steps, latents=torch.from_numpy(noise[i:i + 1]))
                want_latents.append(pipe(**ref, output_type="latent").image.numpy())
                want_images.append(pipe(**ref, output_type="np").image)
        want_latents, want_images = np.concatenate(want_latents), np.concatenate(want_images)
        args = dict(negative_prompt=negative, guidance_scale=guidance, steps=steps, latents=noise)
        got = k5(prompts, **args, output_type="latent")
        np.testing.assert_allclose(got, want_latents, rtol=1e-4, atol=1e-4 * np.abs(want_latents).max())
        images = k5(prompts, **args, output_type="float")
        assert images.shape == want_images.shape == (2, HEIGHT, WIDTH, 3)
        np.testing.assert_allclose(images, want_images, atol=1e-4)
    out = tmp_path / "fox.png"
    assert model_zoo(["run", "Kandinsky-5.0-T2I-Lite", "--model", str(tmp_path / "lite"), "--prompt", prompts[0],
                      "--output", str(out), "--steps", "2"]) == 0
    assert out.stat().st_size > 0
    with pytest.raises(ValueError, match="one latent size"):
        k5(prompts[0], steps=1, latents=np.zeros((1, 1, 4, 4, 4), np.float32))


def tiny_hunyuan_vae(path, attention=True):
    from diffusers import AutoencoderKLHunyuanVideo
    torch.manual_seed(0)
    vae = AutoencoderKLHunyuanVideo(latent_channels=4, block_out_channels=(8, 8, 16, 16), layers_per_block=1,
                                    norm_num_groups=4, mid_block_add_attention=attention).eval()
    perturb(vae)
    vae.save_pretrained(str(path))
    return vae


@pytest.mark.parametrize("frames", [1, 3, 5])
def test_hunyuan_vae_decoder_matches_diffusers(tmp_path, frames):
    """One latent clip through the whole decoder (causal replicate padding, GroupNorm over the clip, the mid block's
    frame-causal attention, first-frame-only spatial upsampling): 1, 3 and 5 latent frames at 3 x 5."""
    vae = tiny_hunyuan_vae(tmp_path / "vae")
    path = convert(str(tmp_path / "vae"), str(tmp_path / "dec.ms"), latent_shape=(frames, 3, 5))
    z = np.random.default_rng(frames).standard_normal((1, 4, frames, 3, 5)).astype(np.float32)
    with torch.no_grad():
        want = vae.decoder(vae.post_quant_conv(torch.from_numpy(z))).numpy()
    got = run(path, {"latents": z}, threads=2)[0]
    assert got.shape == want.shape == (1, 3, 4 * (frames - 1) + 1, 24, 40)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


FRAMES, V_HEIGHT, V_WIDTH = 25, 32, 48   # latent 7 x 4 x 6: temporal tiles of 5, 4 and 1 latent frames


def tiny_kandinsky5_t2v_pipeline(path, **attention):
    from diffusers import FlowMatchEulerDiscreteScheduler, Kandinsky5T2VPipeline, Kandinsky5Transformer3DModel
    text_encoder, tokenizer, clip, clip_tokenizer = tiny_text_encoders()
    torch.manual_seed(1)
    transformer = Kandinsky5Transformer3DModel(**{**TINY_DIT, "visual_cond": True, **attention}).eval()
    perturb(transformer)
    vae = tiny_hunyuan_vae(path / "_vae")
    pipe = Kandinsky5T2VPipeline(transformer=transformer, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
                                 text_encoder_2=clip, tokenizer_2=clip_tokenizer,
                                 scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0))
    pipe.save_pretrained(str(path))
    return pipe


@pytest.mark.parametrize("attention", ["regular", "nabla"])
def test_kandinsky5_t2v_pipeline_matches_diffusers(tmp_path, attention):
    """Text to video with visual_cond's zero condition channels (never stepped), the video template's 128 dropped
    tokens, diffusers' default negative prompt, and the HunyuanVideo VAE in three temporal tiles blended: latents and
    frames within 1e-4 of Kandinsky5T2VPipeline; with regular attention at 32 x 48, and with NABLA (the registry's
    10 s row, converted through the CLI) at 9 x 128 x 128 (3 latent frames of 8 x 8 tokens: a 64-token block
    each; one VAE tile)."""
    from lite.diffusion.kandinsky5 import Kandinsky5TextToVideo
    from model_zoo.cli import main as model_zoo
    nabla = attention == "nabla"
    frames, height, width = (9, 128, 128) if nabla else (FRAMES, V_HEIGHT, V_WIDTH)
    latent_frames = (frames - 1) // 4 + 1
    pipe = tiny_kandinsky5_t2v_pipeline(tmp_path / "pipeline", **(dict(NABLA, attention_wT=3) if nabla else {}))
    assert model_zoo(["convert", "Kandinsky-5.0-T2V-Lite-sft-10s", "--checkpoint", str(tmp_path / "pipeline"),
                      "--output", str(tmp_path / "lite"), "--frames", str(frames), "--height", str(height),
                      "--width", str(width)]) == 0
    k5 = Kandinsky5TextToVideo(str(tmp_path / "lite"))
    assert k5.video_shape == (frames, height, width)
    assert sorted(k5.tile_graphs) == ([3] if nabla else [1, 4, 5])
    h, w = height // 8, width // 8
    noise = np.zeros((1, latent_frames, h, w, 9), np.float32)
    noise[..., :4] = np.random.default_rng(0).standard_normal((1, latent_frames, h, w, 4))
    prompt = "a red fox in the snow at night"
    for negative, guidance in ((None, 5.0), ("blurry", 1.0)):
        with torch.no_grad(), exact_block_masks():
            ref = dict(prompt=prompt, negative_prompt=negative, guidance_scale=guidance, height=height,
                       width=width, num_frames=frames, num_inference_steps=2)
            want_latents = pipe(**ref, latents=torch.from_numpy(noise.copy()), output_type="latent").frames.numpy()
        args = dict(negative_prompt=negative, guidance_scale=guidance, steps=2, latents=noise)
        got = k5(prompt, **args, output_type="latent")
        np.testing.assert_allclose(got, want_latents, rtol=1e-4, atol=1e-4 * np.abs(want_latents).max())
        if nabla:   # (the decode is the regular case's; the runtime's 3-D convolutions at 8-16 channels are slow)
            continue
        with torch.no_grad():
            want_video = pipe(**ref, latents=torch.from_numpy(noise.copy()), output_type="np").frames
        video = k5(prompt, **args, output_type="float")
        assert video.shape == want_video.shape == (1, frames, height, width, 3)
        np.testing.assert_allclose(video, want_video, atol=1e-4)


@pytest.mark.parametrize("frames", [1, 2])
def test_hunyuan_vae_encoder_matches_diffusers(tmp_path, frames):
    """The encoder and quant_conv (the posterior's moments) of an image (1 latent frame) and of a 5-frame clip: the
    causal stride-2 downsamplers in space and time, the frame-causal mid attention."""
    vae = tiny_hunyuan_vae(tmp_path / "vae")
    path = convert(str(tmp_path / "vae"), str(tmp_path / "enc.ms"), latent_shape=(frames, 3, 5), head="vae_encoder")
    x = np.random.default_rng(frames).uniform(-1, 1, (1, 3, 4 * (frames - 1) + 1, 24, 40)).astype(np.float32)
    with torch.no_grad():
        want = vae.quant_conv(vae.encoder(torch.from_numpy(x))).numpy()
    got = run(path, {"video": x})[0]
    assert got.shape == want.shape == (1, 8, frames, 3, 5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_kandinsky5_i2v_pipeline_matches_diffusers(tmp_path):
    """Image to video: the picture's pixels (Lanczos) and the VAE encoder's posterior as diffusers computes them, then
    the same starting latents (image in frame 0, the mask channel set there) through Kandinsky5I2VPipeline and the
    runtime: frame 0 never stepped, the first four latent frames re-normalised, three blended VAE tiles; latents and
    frames within 1e-4. Then `model_zoo run --image`."""
    from diffusers import Kandinsky5I2VPipeline
    from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution
    from PIL import Image
    from lite.diffusion.kandinsky5 import Kandinsky5ImageToVideo
    from lite.diffusion.wan_i2v import video_pixels
    from model_zoo.cli import main as model_zoo
    t2v = tiny_kandinsky5_t2v_pipeline(tmp_path / "t2v")
    pipe = Kandinsky5I2VPipeline(**t2v.components)
    pipe.save_pretrained(str(tmp_path / "pipeline"))
    assert model_zoo(["convert", "Kandinsky-5.0-I2V-Lite-5s", "--checkpoint", str(tmp_path / "pipeline"), "--output",
                      str(tmp_path / "lite"), "--frames", str(FRAMES), "--height", str(V_HEIGHT), "--width",
                      str(V_WIDTH)]) == 0
    k5 = Kandinsky5ImageToVideo(str(tmp_path / "lite"))
    picture = tmp_path / "fox.png"
    Image.fromarray(np.random.default_rng(3).integers(0, 256, (50, 70, 3), np.uint8)).save(picture)
    pixels = video_pixels(str(picture), V_HEIGHT, V_WIDTH)
    want_pixels = pipe.video_processor.preprocess(Image.open(picture), height=V_HEIGHT, width=V_WIDTH).numpy()
    np.testing.assert_allclose(pixels, want_pixels, atol=1e-6)
    with torch.no_grad():
        posterior = DiagonalGaussianDistribution(pipe.vae._encode(torch.from_numpy(pixels[:, :, None])))
    noise = np.random.default_rng(7).standard_normal((1, 4, 1, 4, 6)).astype(np.float32)
    want_image = ((posterior.mean.numpy() + posterior.std.numpy() * noise) * pipe.vae.config.scaling_factor)
    got_image = k5.encode_image(str(picture), seed=7)
    np.testing.assert_allclose(got_image, want_image.transpose(0, 2, 3, 4, 1), rtol=1e-4, atol=1e-5)

    latents = np.zeros((1, 7, 4, 6, 9), np.float32)
    latents[..., :4] = np.random.default_rng(0).standard_normal((1, 7, 4, 6, 4))
    latents[:, :1, ..., :4], latents[:, 0, ..., 8] = got_image, 1.0
    prompt = "a red fox in the snow at night"
    ref = dict(image=Image.open(picture), prompt=prompt, guidance_scale=5.0, height=V_HEIGHT, width=V_WIDTH,
               num_frames=FRAMES, num_inference_steps=2)
    with torch.no_grad():
        want_latents = pipe(**ref, latents=torch.from_numpy(latents.copy()), output_type="latent").frames.numpy()
        want_video = pipe(**ref, latents=torch.from_numpy(latents.copy()), output_type="np").frames
    got = k5(str(picture), prompt, steps=2, latents=latents, output_type="latent")
    np.testing.assert_allclose(got, want_latents, rtol=1e-4, atol=1e-4 * np.abs(want_latents).max())
    video = k5(str(picture), prompt, steps=2, latents=latents, output_type="float")
    assert video.shape == want_video.shape == (1, FRAMES, V_HEIGHT, V_WIDTH, 3)
    np.testing.assert_allclose(video, want_video, atol=1e-4)
    out = tmp_path / "fox.gif"
    assert model_zoo(["run", "Kandinsky-5.0-I2V-Lite-5s", "--model", str(tmp_path / "lite"), "--prompt", prompt,
                      "--image", str(picture), "--output", str(out), "--steps", "1"]) == 0
    assert out.stat().st_size > 0


NABLA = dict(attention_type="nabla", attention_P=0.3, attention_wT=1, attention_wH=1, attention_wW=3,
             attention_add_sta=True, attention_method="topcdf")


def test_kandinsky5_nabla_dit_matches_diffusers(tmp_path):
    """NABLA attention (the 10 s checkpoints): the fractal token order, the top-CDF block map from block-mean q / k,
    the STA window and the block-sparse attention, against diffusers' model and its nablaT_v2 selection (attended
    exactly: exact_block_masks): 3 frames of 16 x 16 tokens (12 blocks of 64), P 0.3 (the dense model differs)."""
    model = tiny_dit(tmp_path / "transformer", visual_cond=True, **NABLA)
    shape, scale = (3, 32, 32), (1.0, 2.0, 2.0)
    path = convert(str(tmp_path / "transformer"), str(tmp_path / "dit"), latent_shape=shape, rope_scale=scale)
    feeds = feeds_for(np.random.default_rng(1), 1, shape, 9, 6)
    x = {k: torch.from_numpy(v) for k, v in feeds.items()}
    args = dict(hidden_states=x["hidden_states"], encoder_hidden_states=x["encoder_hidden_states"],
                timestep=x["timestep"], pooled_projections=x["pooled_projections"],
                visual_rope_pos=[torch.arange(3), torch.arange(16), torch.arange(16)], text_rope_pos=torch.arange(6),
                scale_factor=scale)
    with torch.no_grad(), exact_block_masks():
        want = model(**args, sparse_params=nabla_params(model, shape)).sample.numpy()
        dense = model(**args).sample.numpy()
    assert np.abs(want - dense).max() > 2e-3 * np.abs(want).max()   # the selection matters
    got = run(path, feeds, threads=2)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    with pytest.raises(ConverterError, match="multiples of 8"):
        convert(str(tmp_path / "transformer"), str(tmp_path / "odd.ms"), latent_shape=(1, 24, 32))
