"""Wan 2.1 text-to-video on the runtime (lite.diffusion, model_zoo/generation/render_convert.py): a tiny diffusers WanPipeline
directory (UMT5 text encoder, WanTransformer3DModel, AutoencoderKLWan with a non-trivial latent mean / std, the flow
UniPC scheduler, a T5-style fast tokenizer) converted by `python -m model_zoo convert`, then the same prompt, negative
prompt and initial noise through diffusers and through the runtime: the latents after the steps and the decoded
frames within 1e-4 (float32). The NumPy schedulers against diffusers', the VAE's time slices on their own."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo

FRAMES, HEIGHT, WIDTH = 5, 16, 32


def tiny_text_encoder():
    """A T5-style word-level fast tokenizer and a tiny UMT5 encoder (d_model 16)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, UMT5Config, UMT5EncoderModel
    words = ["<pad>", "</s>", "<unk>"] + "a cat walks on the grass in sun light blurry low quality".split()
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(0)
    text_encoder = UMT5EncoderModel(UMT5Config(vocab_size=len(words), d_model=16, d_kv=4, d_ff=24, num_layers=2,
                                               num_heads=4, feed_forward_proj="gated-gelu")).eval()
    return tokenizer, text_encoder


def tiny_dit_and_vae(in_channels: int = 4, **dit_extra):
    """A 2-layer Wan DiT (text_dim 16) and a VAE of 4x spatial / 2x temporal compression (its config's scale
    factors say so, as the I2V pipeline reads them) with a non-trivial latent mean / std, all weights perturbed."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                                        in_channels=in_channels, out_channels=4, text_dim=16, freq_dim=32, ffn_dim=40,
                                        num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                        rope_max_seq_len=32, **dit_extra).eval()
    vae = AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 2, 2], num_res_blocks=1, attn_scales=[],
                           temperal_downsample=[False, True], latents_mean=[0.1, -0.2, 0.0, 0.3],
                           latents_std=[1.5, 0.7, 1.0, 2.0], scale_factor_temporal=2, scale_factor_spatial=4).eval()
    return transformer, vae


def perturb(*modules):
    with torch.no_grad():   # every table away from its initial value
        for module in modules:
            for p in module.parameters():
                p.add_(torch.randn_like(p) * 0.05)


def tiny_wan_pipeline(path, two_experts: bool = False):
    from diffusers import UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    tokenizer, text_encoder = tiny_text_encoder()
    transformer, vae = tiny_dit_and_vae()
    transformer_2 = None
    if two_experts:   # Wan 2.2 A14B: a second (low-noise) expert of the same shape
        transformer_2 = WanTransformer3DModel(**transformer.config).eval()
    perturb(transformer, vae, *((transformer_2,) if two_experts else ()))
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
    pipe = WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, transformer=transformer, vae=vae,
                       scheduler=scheduler, transformer_2=transformer_2, boundary_ratio=0.6 if two_experts else None)
    pipe.save_pretrained(str(path))
    return pipe


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan")
    pipe = tiny_wan_pipeline(root / "pipeline")
    assert model_zoo(["convert", "Wan2.1-T2V-1.3B", "--checkpoint", str(root / "pipeline"), "--output",
                      str(root / "lite"), "--frames", str(FRAMES), "--height", str(HEIGHT), "--width",
                      str(WIDTH)]) == 0
    return pipe, root


def test_wan_t2v_pipeline_matches_diffusers(converted):
    from lite.diffusion.wan import WanTextToVideo
    pipe, root = converted
    lite_pipe = WanTextToVideo(str(root / "lite"), max_sequence_length=32)
    assert lite_pipe.latent_shape == (4, 3, 4, 8)
    noise = np.random.default_rng(0).standard_normal((1, *lite_pipe.latent_shape)).astype(np.float32)
    args = dict(prompt="a cat  walks on the grass", negative_prompt="blurry, low quality", guidance_scale=5.0)
    for steps in (2, 3):
        with torch.no_grad():
            ref = dict(height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=steps,
                       latents=torch.from_numpy(noise), max_sequence_length=32, **args)
            want_latents = pipe(**ref, output_type="latent").frames.numpy()
            want_video = pipe(**ref, output_type="np").frames
        latents = lite_pipe(**args, steps=steps, latents=noise, output_type="latent")
        np.testing.assert_allclose(latents, want_latents, rtol=1e-4, atol=1e-4 * np.abs(want_latents).max())
        video = lite_pipe(**args, steps=steps, latents=noise, output_type="float")
        assert video.shape == want_video.shape == (1, FRAMES, HEIGHT, WIDTH, 3)
        np.testing.assert_allclose(video, want_video, atol=1e-4)


def test_wan22_experts_switch_at_the_boundary(tmp_path):
    """Wan 2.2 A14B's form: `transformer` for timesteps >= boundary_ratio x 1000, `transformer_2` (its own guidance
    scale) below; 4 steps cross the boundary (timesteps 999, 900, 750, 500 at shift 3)."""
    from lite.diffusion.wan import WanTextToVideo
    pipe = tiny_wan_pipeline(tmp_path / "pipeline", two_experts=True)
    assert model_zoo(["convert", "Wan2.2-T2V-A14B", "--checkpoint", str(tmp_path / "pipeline"), "--output",
                      str(tmp_path / "lite"), "--frames", str(FRAMES), "--height", str(HEIGHT), "--width",
                      str(WIDTH)]) == 0
    lite_pipe = WanTextToVideo(str(tmp_path / "lite"), max_sequence_length=32)
    noise = np.random.default_rng(5).standard_normal((1, *lite_pipe.latent_shape)).astype(np.float32)
    args = dict(prompt="a cat on the grass", negative_prompt="blurry", guidance_scale=5.0, guidance_scale_2=3.0)
    with torch.no_grad():
        want = pipe(**args, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=4,
                    latents=torch.from_numpy(noise), max_sequence_length=32, output_type="latent").frames.numpy()
    got = lite_pipe(**args, steps=4, latents=noise, output_type="latent")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    lite_pipe.boundary_ratio = None   # the second expert did change the result
    assert np.abs(lite_pipe(**args, steps=4, latents=noise, output_type="latent") - got).max() > 1e-3


def test_without_guidance_one_batch_row(converted):
    """guidance_scale 1: no unconditional pass (diffusers' do_classifier_free_guidance is off)."""
    from lite.diffusion.wan import WanTextToVideo
    pipe, root = converted
    lite_pipe = WanTextToVideo(str(root / "lite"), max_sequence_length=32)
    noise = np.random.default_rng(3).standard_normal((2, *lite_pipe.latent_shape)).astype(np.float32)
    prompts = ["a cat on the grass", "sun light"]
    with torch.no_grad():
        want = pipe(prompt=prompts, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=2,
                    guidance_scale=1.0, latents=torch.from_numpy(noise), max_sequence_length=32,
                    output_type="latent").frames.numpy()
    got = lite_pipe(prompts, steps=2, guidance_scale=1.0, latents=noise, output_type="latent")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_run_command_writes_the_video(converted, tmp_path):
    _, root = converted
    out = tmp_path / "video.gif"
    assert model_zoo(["run", "Wan2.1-T2V-1.3B", "--model", str(root / "lite"), "--prompt", "a cat", "--output",
                      str(out), "--steps", "2", "--seed", "7"]) == 0
    from PIL import Image
    with Image.open(out) as im:
        assert im.size == (WIDTH, HEIGHT) and im.n_frames == FRAMES
    assert model_zoo(["run", "Wan2.1-T2V-1.3B", "--model", str(root / "lite"), "--prompt", "a cat", "--output",
                      str(tmp_path / "v.npy"), "--steps", "2", "--seed", "7"]) == 0
    frames = np.load(tmp_path / "v.npy")
    assert frames.shape == (FRAMES, HEIGHT, WIDTH, 3) and frames.dtype == np.uint8 and frames.std() > 0
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


def test_bad_requests_are_refused(converted, tmp_path, capsys):
    from lite.diffusion.wan import WanTextToVideo, write_video
    _, root = converted
    lite_pipe = WanTextToVideo(str(root / "lite"), max_sequence_length=32)
    with pytest.raises(ValueError, match="latent size"):
        lite_pipe("a cat", steps=1, latents=np.zeros((1, 4, 3, 4, 4), np.float32))
    with pytest.raises(ValueError, match="negative prompts"):
        lite_pipe(["a", "b"], negative_prompt=["c"], steps=1)
    with pytest.raises(ValueError, match="no video encoder"):
        write_video(np.zeros((2, 4, 4, 3), np.uint8), str(tmp_path / "v.mp4"))
    with pytest.raises(FileNotFoundError, match="model_zoo convert"):
        WanTextToVideo(str(tmp_path))
    assert model_zoo(["convert", "Wan2.1-T2V-1.3B", "--checkpoint", str(root / "pipeline"), "--output",
                      str(tmp_path / "bad"), "--frames", "5", "--height", "20", "--width", "32"]) == 2
    assert "multiples of 8" in capsys.readouterr().err and not (tmp_path / "bad").exists()


@pytest.mark.parametrize("kind,config", [
    ("UniPCMultistepScheduler", dict(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)),
    # (bh1 with a final sigma of zero: diffusers' last step multiplies an infinite B(h) by zero, NaN)
    ("UniPCMultistepScheduler", dict(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=5.0,
                                     solver_order=3, solver_type="bh1", final_sigmas_type="sigma_min")),
    ("UniPCMultistepScheduler", dict(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=2.0,
                                     solver_order=3, disable_corrector=[0])),
    ("FlowMatchEulerDiscreteScheduler", dict(shift=3.0)),
])
def test_schedulers_match_diffusers(kind, config):
    check_scheduler(kind, config, (1, 4, 3, 4, 4))


def check_scheduler(kind: str, config: dict, shape: tuple, steps=(1, 2, 5, 12)) -> None:
    """Our NumPy scheduler against diffusers' on random model outputs: timesteps, the initial noise scale and the
    network's input scaling where the scheduler has them, and every step's sample within 1e-5 (one scheduler object
    reused: set_timesteps resets it)."""
    import diffusers
    from lite.diffusion.schedulers import make_scheduler
    rng = np.random.default_rng(0)
    ref = getattr(diffusers, kind)(**config)
    ours = make_scheduler({**ref.config, "_class_name": kind})
    for n in steps:
        ref.set_timesteps(n)
        np.testing.assert_allclose(ours.set_timesteps(n), ref.timesteps.numpy())
        if hasattr(ours, "init_noise_sigma"):
            assert ours.init_noise_sigma == pytest.approx(float(ref.init_noise_sigma), rel=1e-5)
        x = rng.standard_normal(shape).astype(np.float32)
        x_ref = torch.from_numpy(x.copy())
        for t in ref.timesteps:
            tol = dict(rtol=1e-5, atol=1e-5 * float(x_ref.abs().max()))
            if hasattr(ours, "scale_model_input"):
                np.testing.assert_allclose(ours.scale_model_input(x), ref.scale_model_input(x_ref, t).numpy(), **tol)
            out = rng.standard_normal(x.shape).astype(np.float32)
            x_ref = ref.step(torch.from_numpy(out), t, x_ref).prev_sample
            x = ours.step(out, x)
            np.testing.assert_allclose(x, x_ref.numpy(), rtol=1e-5, atol=1e-5 * float(x_ref.abs().max()))


def test_schedulers_refuse_other_forms():
    from lite.diffusion.schedulers import make_scheduler
    with pytest.raises(NotImplementedError, match="flow"):
        make_scheduler({"_class_name": "UniPCMultistepScheduler", "prediction_type": "epsilon"})
    with pytest.raises(NotImplementedError, match="LMSDiscreteScheduler"):
        make_scheduler({"_class_name": "LMSDiscreteScheduler"})
