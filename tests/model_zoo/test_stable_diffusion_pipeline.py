"""Stable Diffusion 1.5 / 2.1 / XL on the runtime (model_zoo/generation/unet_graph.py, lite.diffusion.stable_diffusion,
lite.diffusion.ddpm_schedulers): tiny diffusers pipelines (CLIP text towers with a word-level fast tokenizer padded
to its model_max_length, UNet2DConditionModel in each version's form, AutoencoderKL, each version's scheduler)
converted by `python -m model_zoo convert`, then the same prompts and initial noise through diffusers and the
runtime: the latents after 2 and 3 steps and the decoded images within 1e-4 (float32). The UNet and the schedulers
also on their own."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo
from test_generation_graphs import convert, run
from test_wan_pipeline import check_scheduler

HEIGHT, WIDTH = 32, 48   # a 2x VAE: latents 16 x 24
WORDS = ["<pad>", "</s>", "<unk>", "<s>", "!"] + "a red fox in the snow at night blurry dark photo".split()

# UNet2DConditionModel in each version's form: SD 1.5 (conv projections, 8 heads everywhere), SD 2.1 (linear
# projections, heads per block, upcast attention), SDXL (no attention in the first block, several transformer
# layers per block, text_time conditioning)
UNETS = {
    "sd15": dict(block_out_channels=(16, 32), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                 up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), attention_head_dim=2, layers_per_block=1,
                 norm_num_groups=8, sample_size=16),
    "sd21": dict(block_out_channels=(16, 32, 32),
                 down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
                 up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"), attention_head_dim=[2, 4, 4],
                 layers_per_block=2, norm_num_groups=8, use_linear_projection=True, upcast_attention=True,
                 sample_size=16),
    "sdxl": dict(block_out_channels=(16, 32), down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                 up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), attention_head_dim=[2, 4],
                 transformer_layers_per_block=[1, 2], layers_per_block=2, norm_num_groups=8,
                 use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=8,
                 projection_class_embeddings_input_dim=6 * 8 + 12, sample_size=16),
}


def tiny_unet(kind: str, cross_dim: int, seed: int = 0):
    from diffusers import UNet2DConditionModel
    torch.manual_seed(seed)
    unet = UNet2DConditionModel(**UNETS[kind], cross_attention_dim=cross_dim).eval()
    with torch.no_grad():   # zero-initialised tables (conv_out, proj_out) made non-trivial
        for p in unet.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return unet


@pytest.mark.parametrize("kind", sorted(UNETS))
def test_unet_matches_diffusers(tmp_path, kind):
    unet = tiny_unet(kind, 20)
    unet.save_pretrained(str(tmp_path / "unet"))
    path = convert(str(tmp_path / "unet"), str(tmp_path / "unet.ms"), latent_shape=(8, 12))
    rng = np.random.default_rng(0)
    feeds = {"sample": rng.standard_normal((2, 4, 8, 12)).astype(np.float32),
             "timestep": np.array([999.0, 321.0], np.float32),
             "encoder_hidden_states": rng.standard_normal((2, 7, 20)).astype(np.float32)}
    extra = {}
    if kind == "sdxl":
        feeds["text_embeds"] = rng.standard_normal((2, 12)).astype(np.float32)
        feeds["time_ids"] = np.array([[64, 96, 0, 0, 64, 96], [32, 48, 4, 8, 64, 96]], np.float32)
        extra["added_cond_kwargs"] = {k: torch.from_numpy(feeds[k]) for k in ("text_embeds", "time_ids")}
    with torch.no_grad():
        want = unet(*(torch.from_numpy(feeds[k]) for k in ("sample", "timestep", "encoder_hidden_states")),
                    **extra).sample.numpy()
    for threads in (1, 2):
        got = run(path, feeds, threads)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


# int4 on a tiny random UNet (16-32 input channels a kernel row) errs by ~37%: the bound only catches a scrambled
# layout (uncorrelated outputs err by ~140%)
@pytest.mark.parametrize("fmt,bound", [("bfloat16", 1e-2), ("int8", 3e-2), ("int4", 0.6)])
def test_unet_compressed_weights_stay_close(tmp_path, fmt, bound):
    """--precision reaches the convolutions too (stored compressed, decoded at load): a smaller file, an output near
    float32's."""
    import os
    unet = tiny_unet("sd21", 20)
    unet.save_pretrained(str(tmp_path / "unet"))
    full = convert(str(tmp_path / "unet"), str(tmp_path / "f32.ms"), latent_shape=(8, 12))
    small = convert(str(tmp_path / "unet"), str(tmp_path / f"{fmt}.ms"), latent_shape=(8, 12), weight_format=fmt)
    assert os.path.getsize(small) < 0.6 * os.path.getsize(full)
    rng = np.random.default_rng(5)
    feeds = {"sample": rng.standard_normal((1, 4, 8, 12)).astype(np.float32), "timestep": np.array([600.0], np.float32),
             "encoder_hidden_states": rng.standard_normal((1, 7, 20)).astype(np.float32)}
    want, got = run(full, feeds)[0], run(small, feeds)[0]
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert 0 < rel < bound, rel


def test_unet_refuses_what_it_cannot_build(tmp_path):
    from converter.ir import ConverterError
    unet = tiny_unet("sd15", 20)
    unet.save_pretrained(str(tmp_path / "unet"))
    with pytest.raises(ConverterError, match="halve"):
        convert(str(tmp_path / "unet"), str(tmp_path / "odd.ms"), latent_shape=(7, 12))
    from model_zoo.generation.unet_graph import build_unet_graph
    with pytest.raises(NotImplementedError, match="class_embed_type"):
        build_unet_graph({**unet.config, "class_embed_type": "timestep"}, {}, latent_shape=(8, 12))
    with pytest.raises(NotImplementedError, match="SimpleCrossAttnDownBlock2D"):
        build_unet_graph({**unet.config, "down_block_types": ["SimpleCrossAttnDownBlock2D", "DownBlock2D"]}, {},
                         latent_shape=(8, 12))


def _tokenizer(pad: str, max_length: int = 16):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 3), ("</s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=pad, eos_token="</s>", bos_token="<s>",
                                   unk_token="<unk>")
    fast.model_max_length = max_length
    return fast


def _clip(hidden: int, projection: int | None = None, seed: int = 0):
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection
    torch.manual_seed(seed)
    cfg = CLIPTextConfig(vocab_size=len(WORDS), hidden_size=hidden, intermediate_size=24, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=16, eos_token_id=1, bos_token_id=3,
                         pad_token_id=0, projection_dim=projection or 16)
    return (CLIPTextModelWithProjection if projection else CLIPTextModel)(cfg).eval()


def _vae():
    from diffusers import AutoencoderKL
    torch.manual_seed(1)
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 2,
                        up_block_types=["UpDecoderBlock2D"] * 2, block_out_channels=[8, 16], layers_per_block=1,
                        latent_channels=4, norm_num_groups=4, scaling_factor=0.18215).eval()
    with torch.no_grad():
        for p in vae.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return vae


def tiny_sd_pipeline(path, kind: str):
    import diffusers
    sched = {"sd15": ("PNDMScheduler", dict(skip_prk_steps=True, steps_offset=1, set_alpha_to_one=False)),
             "sd21": ("DDIMScheduler", dict(prediction_type="v_prediction", clip_sample=False, set_alpha_to_one=False,
                                            steps_offset=1)),
             "sdxl": ("EulerDiscreteScheduler", dict(timestep_spacing="leading", steps_offset=1))}[kind]
    scheduler = getattr(diffusers, sched[0])(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012,
                                             **sched[1])
    if kind == "sdxl":
        enc1, enc2 = _clip(16, seed=2), _clip(20, projection=12, seed=3)
        pipe = diffusers.StableDiffusionXLPipeline(
            vae=_vae(), text_encoder=enc1, text_encoder_2=enc2, tokenizer=_tokenizer("</s>"),
            tokenizer_2=_tokenizer("!"), unet=tiny_unet(kind, 16 + 20), scheduler=scheduler, add_watermarker=False)
    else:
        pipe = diffusers.StableDiffusionPipeline(
            vae=_vae(), text_encoder=_clip(20, seed=2), tokenizer=_tokenizer("<pad>" if kind == "sd15" else "!"),
            unet=tiny_unet(kind, 20), scheduler=scheduler, safety_checker=None, feature_extractor=None,
            requires_safety_checker=False)
    pipe.save_pretrained(str(path))
    return pipe


ROWS = {"sd15": "stable-diffusion-v1-5", "sd21": "stable-diffusion-2-1", "sdxl": "stable-diffusion-xl-base-1.0"}


@pytest.fixture(scope="module", params=sorted(ROWS))
def converted(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    pipe = tiny_sd_pipeline(root / "pipeline", request.param)
    assert model_zoo(["convert", ROWS[request.param], "--checkpoint", str(root / "pipeline"), "--output",
                      str(root / "lite"), "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    return request.param, pipe, root


def _diffusers(pipe, noise, steps, output_type, **args):
    with torch.no_grad():
        out = pipe(**args, height=HEIGHT, width=WIDTH, num_inference_steps=steps, latents=torch.from_numpy(noise),
                   output_type=output_type).images
    return out.numpy() if output_type == "latent" else out


def test_sd_pipeline_matches_diffusers(converted):
    """Latents after 2 and 3 steps and the decoded image, with a negative prompt, none (SDXL: zero embeddings) and
    without guidance; two prompts of different lengths, one past the tokenizer's 16."""
    from lite.diffusion.stable_diffusion import StableDiffusion
    kind, pipe, root = converted
    lite_pipe = StableDiffusion(str(root / "lite"))
    assert lite_pipe.latent_shape == (4, 16, 24) and lite_pipe.image_shape == (HEIGHT, WIDTH)
    prompts = ["a red fox in the snow", "a fox at night " * 4]
    noise = np.random.default_rng(0).standard_normal((2, *lite_pipe.latent_shape)).astype(np.float32)
    sigma = float(pipe.scheduler.init_noise_sigma) if kind != "sdxl" else None
    cases = [dict(negative_prompt=["blurry", "dark photo"], guidance_scale=7.5, steps=2),
             dict(negative_prompt=None, guidance_scale=5.0, steps=3),
             dict(negative_prompt=None, guidance_scale=1.0, steps=2)]
    if kind == "sd21":
        cases.append(dict(negative_prompt=None, guidance_scale=7.5, steps=2, guidance_rescale=0.7))
    for case in cases:
        case = dict(case)
        steps = case.pop("steps")
        want = _diffusers(pipe, noise, steps, "latent", prompt=prompts, **case)
        got = lite_pipe(prompts, steps=steps, latents=noise, output_type="latent", **case)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=str(case))
    assert sigma is None or sigma == 1.0
    want = _diffusers(pipe, noise, 2, "np", prompt=prompts, negative_prompt=["blurry"] * 2)
    got = lite_pipe(prompts, "blurry", steps=2, latents=noise, output_type="float")
    assert got.shape == want.shape == (2, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_run_command_writes_the_image(converted, tmp_path):
    kind, _, root = converted
    out = tmp_path / "fox.png"
    assert model_zoo(["run", ROWS[kind], "--model", str(root / "lite"), "--prompt", "a red fox", "--output",
                      str(out), "--steps", "2"]) == 0
    from PIL import Image
    with Image.open(out) as im:
        assert im.size == (WIDTH, HEIGHT) and np.asarray(im).std() > 0


def test_convert_refuses_sizes_the_unet_cannot_halve(tmp_path, capsys):
    tiny_sd_pipeline(tmp_path / "pipeline", "sd21")   # 2x VAE, two downsamplers: multiples of 8
    assert model_zoo(["convert", "stable-diffusion-2-1", "--checkpoint", str(tmp_path / "pipeline"), "--output",
                      str(tmp_path / "bad"), "--height", "36", "--width", "48"]) == 2
    assert "multiples of 8" in capsys.readouterr().err and not (tmp_path / "bad").exists()


@pytest.mark.parametrize("kind,config", [
    ("PNDMScheduler", dict(skip_prk_steps=True, steps_offset=1, set_alpha_to_one=False)),
    ("PNDMScheduler", dict(skip_prk_steps=True, prediction_type="v_prediction", timestep_spacing="trailing")),
    ("DDIMScheduler", dict(clip_sample=False, set_alpha_to_one=False, steps_offset=1, prediction_type="v_prediction")),
    ("DDIMScheduler", dict(beta_schedule="squaredcos_cap_v2", timestep_spacing="linspace")),
    ("EulerDiscreteScheduler", dict(steps_offset=1, timestep_spacing="leading")),
    ("EulerDiscreteScheduler", dict(prediction_type="v_prediction")),
    ("EulerDiscreteScheduler", dict(beta_schedule="linear", timestep_spacing="trailing")),
])
def test_discrete_schedulers_match_diffusers(kind, config):
    config = {"beta_schedule": "scaled_linear", "beta_start": 0.00085, "beta_end": 0.012, **config}
    check_scheduler(kind, config, (1, 4, 4, 4), steps=(1, 2, 3, 5, 12))


def test_discrete_schedulers_refuse_other_forms():
    from lite.diffusion.schedulers import make_scheduler
    with pytest.raises(NotImplementedError, match="skip_prk_steps"):
        make_scheduler({"_class_name": "PNDMScheduler"})
    with pytest.raises(NotImplementedError, match="use_karras_sigmas"):
        make_scheduler({"_class_name": "EulerDiscreteScheduler", "use_karras_sigmas": True})
    with pytest.raises(NotImplementedError, match="sample"):
        make_scheduler({"_class_name": "DDIMScheduler", "prediction_type": "sample"})
    with pytest.raises(NotImplementedError, match="rescale_betas_zero_snr"):
        make_scheduler({"_class_name": "DDIMScheduler", "rescale_betas_zero_snr": True})
