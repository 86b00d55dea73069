"""FLUX.1 text-to-image on the runtime (lite.diffusion.flux): a tiny diffusers FluxPipeline directory (CLIP text
encoder, T5 encoder, FluxTransformer2DModel with the guidance embedding, a 16-channel AutoencoderKL with FLUX's
scaling / shift factors, the dynamically shifted flow-match scheduler, fast tokenizers) converted by `python -m
model_zoo convert FLUX.1-dev`, then the same prompt and initial noise through diffusers and the runtime: the packed
latents after the steps and the decoded image within 1e-4 (float32). Also the CLIP text tower and the AutoencoderKL
decoder graphs on their own, and the scheduler's dynamic shift."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lite
from converter.api import Converter, FmkType
from converter.frontends.hf_frontend import CheckpointOptions
from model_zoo.cli import main as model_zoo

HEIGHT, WIDTH = 32, 48   # a 4x VAE: latent 8 x 12, 24 packed tokens


def _fast_tokenizer(words, eos, pad, post_single):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single=post_single, special_tokens=[
        (t, words.index(t)) for t in ("<s>", "</s>") if t in post_single])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=pad, eos_token=eos, unk_token="<unk>")


def tiny_flux_pipeline(path):
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel
    words = ["<pad>", "</s>", "<unk>", "<s>"] + "a red fox in the snow at night".split()
    clip_tok = _fast_tokenizer(words, "</s>", "</s>", "<s> $A </s>")
    clip_tok.model_max_length = 16
    t5_tok = _fast_tokenizer(words, "</s>", "<pad>", "$A </s>")
    torch.manual_seed(0)
    clip = CLIPTextModel(CLIPTextConfig(vocab_size=len(words), hidden_size=16, intermediate_size=24,
                                        num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=16,
                                        eos_token_id=1, bos_token_id=3, pad_token_id=1)).eval()
    t5 = T5EncoderModel(T5Config(vocab_size=len(words), d_model=24, d_kv=6, d_ff=32, num_layers=2, num_heads=4,
                                 feed_forward_proj="gated-gelu")).eval()
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=2,
                                         attention_head_dim=16, num_attention_heads=2, joint_attention_dim=24,
                                         pooled_projection_dim=16, guidance_embeds=True,
                                         axes_dims_rope=(4, 6, 6)).eval()
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 3,
                        up_block_types=["UpDecoderBlock2D"] * 3, block_out_channels=[8, 16, 16], layers_per_block=1,
                        latent_channels=4, norm_num_groups=4, use_quant_conv=False, use_post_quant_conv=False,
                        scaling_factor=0.3611, shift_factor=0.1159).eval()
    with torch.no_grad():
        for module in (transformer, vae):
            for p in module.parameters():
                p.add_(torch.randn_like(p) * 0.05)
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                                                base_image_seq_len=16, max_image_seq_len=64, shift=3.0)
    pipe = FluxPipeline(scheduler=scheduler, vae=vae, text_encoder=clip, tokenizer=clip_tok, text_encoder_2=t5,
                        tokenizer_2=t5_tok, transformer=transformer)
    pipe.save_pretrained(str(path))
    return pipe


def test_flux_pipeline_matches_diffusers(tmp_path):
    from lite.diffusion.flux import FluxTextToImage, pack_latents
    pipe = tiny_flux_pipeline(tmp_path / "pipeline")
    assert pipe.vae_scale_factor == 4
    assert model_zoo(["convert", "FLUX.1-dev", "--checkpoint", str(tmp_path / "pipeline"), "--output",
                      str(tmp_path / "lite"), "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    flux = FluxTextToImage(str(tmp_path / "lite"))
    assert flux.image_shape == (HEIGHT, WIDTH) and flux.tokens == 24
    noise = pack_latents(np.random.default_rng(0).standard_normal((1, 4, 8, 12)).astype(np.float32))
    prompt = "a red fox in the snow at night"
    for steps in (2, 4):
        with torch.no_grad():
            ref = dict(prompt=prompt, height=HEIGHT, width=WIDTH, num_inference_steps=steps, guidance_scale=3.5,
                       latents=torch.from_numpy(noise), max_sequence_length=512)
            want_latents = pipe(**ref, output_type="latent").images.numpy()
            want_image = pipe(**ref, output_type="np").images
        got = flux(prompt, steps=steps, guidance_scale=3.5, latents=noise, output_type="latent")
        np.testing.assert_allclose(got, want_latents, rtol=1e-4, atol=1e-4 * np.abs(want_latents).max())
        image = flux(prompt, steps=steps, guidance_scale=3.5, latents=noise, output_type="float")
        assert image.shape == want_image.shape == (1, HEIGHT, WIDTH, 3)
        np.testing.assert_allclose(image, want_image, atol=1e-4)
    out = tmp_path / "fox.png"
    assert model_zoo(["run", "FLUX.1-dev", "--model", str(tmp_path / "lite"), "--prompt", prompt, "--output",
                      str(out), "--steps", "2"]) == 0
    from PIL import Image
    with Image.open(out) as im:
        assert im.size == (WIDTH, HEIGHT)
    with pytest.raises(ValueError, match="image size"):
        flux(prompt, steps=1, latents=np.zeros((1, 6, 16), np.float32))


@pytest.mark.parametrize("eos,projection", [(2, False), (99, True)])
def test_clip_text_tower_matches_transformers(tmp_path, eos, projection):
    """Pooling at the largest id (legacy eos_token_id 2) or the first end-of-text token; GELU or quick-GELU; the
    penultimate layer (SD 2.x / SDXL) and the projection (CLIPTextModelWithProjection)."""
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection
    torch.manual_seed(0)
    cfg = CLIPTextConfig(vocab_size=100, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=20, eos_token_id=eos, projection_dim=24,
                         hidden_act="gelu" if projection else "quick_gelu")
    model = (CLIPTextModelWithProjection if projection else CLIPTextModel)(cfg).eval()
    model.save_pretrained(str(tmp_path / "clip"))
    path = Converter().convert(FmkType.HF, str(tmp_path / "clip"), str(tmp_path / "clip_ms"),
                               verify_build=False).output_file
    m = lite.Model()
    m.build_from_file(path)
    ids = np.random.default_rng(0).integers(0, 98, (2, 12)).astype(np.int64)
    ids[0, 5:] = 99   # an end-of-text token, then padding of it
    ids[1, 9:] = 99
    out = {o.name: a.get_data_to_numpy() for o, a in zip(m.get_outputs(), m.predict({"input_ids": ids}))}
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), output_hidden_states=True)
    pairs = [("last_hidden_state", ref.last_hidden_state), ("penultimate_hidden_state", ref.hidden_states[-2])]
    pairs.append(("text_embeds", ref.text_embeds) if projection else ("pooler_output", ref.pooler_output))
    for name, want in pairs:
        np.testing.assert_allclose(out[name], want.numpy(), rtol=1e-4, atol=1e-4 * float(want.abs().max()))


@pytest.mark.parametrize("post_quant", [False, True])
def test_autoencoder_kl_decoder_matches_diffusers(tmp_path, post_quant):
    """SD's (post_quant_conv) and FLUX's (none) AutoencoderKL decoders: three up blocks, a non-square latent."""
    from diffusers import AutoencoderKL
    torch.manual_seed(0)
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 3,
                        up_block_types=["UpDecoderBlock2D"] * 3, block_out_channels=[8, 16, 16], layers_per_block=1,
                        latent_channels=4, norm_num_groups=4, use_quant_conv=post_quant,
                        use_post_quant_conv=post_quant).eval()
    with torch.no_grad():
        for p in vae.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    vae.save_pretrained(str(tmp_path / "vae"))
    path = Converter().convert(FmkType.HF, str(tmp_path / "vae"), str(tmp_path / "vae_ms"), verify_build=False,
                               checkpoint_options=CheckpointOptions(latent_shape=(1, 3, 5))).output_file
    m = lite.Model()
    m.build_from_file(path)
    z = np.random.default_rng(0).standard_normal((2, 4, 3, 5)).astype(np.float32)
    with torch.no_grad():
        want = vae.decode(torch.from_numpy(z)).sample.numpy()
    got = m.predict({"latents": z})[0].get_data_to_numpy()
    assert got.shape == (2, 3, 12, 20)
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_dynamic_shift_schedule_matches_diffusers():
    from diffusers import FlowMatchEulerDiscreteScheduler
    from lite.diffusion.schedulers import make_scheduler
    ref = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15)
    ours = make_scheduler({**ref.config, "_class_name": "FlowMatchEulerDiscreteScheduler"})
    with pytest.raises(ValueError, match="mu"):
        ours.set_timesteps(4)
    for steps in (1, 3, 28):
        sigmas = np.linspace(1.0, 1 / steps, steps)
        ref.set_timesteps(sigmas=sigmas, mu=0.83)
        np.testing.assert_allclose(ours.set_timesteps(steps, sigmas=sigmas, mu=0.83), ref.timesteps.numpy(),
                                   rtol=1e-6)
        np.testing.assert_allclose(ours.sigmas, ref.sigmas.numpy(), atol=1e-6)
