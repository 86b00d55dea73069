"""The generation rows' graphs from their checkpoints (converter_lite --fmk=HF): the Wan 2.1 DiT
(model_zoo/generation/wan_graph.py, a diffusers WanTransformer3DModel directory) and the T5 / UMT5 text encoders
(model_zoo/encoders/t5_graph.py), tiny configs with seeded random weights, against diffusers / transformers in
float32."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lite
from converter.api import Converter, FmkType
from converter.frontends.hf_frontend import CheckpointOptions
from converter.ir import ConverterError
from lite.diffusion.wan import run_time_slices
from test_wan_pipeline import perturb

TINY_WAN = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=4, out_channels=4,
                text_dim=16, freq_dim=32, ffn_dim=40, num_layers=2, cross_attn_norm=True,
                qk_norm="rms_norm_across_heads", rope_max_seq_len=32)


def tiny_wan_dir(tmp_path, seed=0):
    from diffusers import WanTransformer3DModel
    torch.manual_seed(seed)
    model = WanTransformer3DModel(**TINY_WAN).eval()
    with torch.no_grad():   # diffusers zero-initialises nothing here, but make every table non-trivial
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    model.save_pretrained(str(tmp_path / "transformer"))
    return model, str(tmp_path / "transformer")


def convert(src, out, **options):
    return Converter().convert(FmkType.HF, src, out, verify_build=False,
                               checkpoint_options=CheckpointOptions(**options)).output_file


def run(path, feeds, threads=1):
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx)
    return [t.get_data_to_numpy() for t in m.predict(feeds)]


@pytest.mark.parametrize("latent", [(3, 6, 10), (2, 4, 4)])
def test_wan_dit_matches_diffusers(tmp_path, latent):
    """One denoising evaluation of a batch of two (CFG's pair: different timesteps and text), a latent whose grid is
    not square (rows and columns of the RoPE and the unpatchify told apart), text of 7 tokens."""
    model, src = tiny_wan_dir(tmp_path)
    path = convert(src, str(tmp_path / "dit"), latent_shape=latent)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, *latent)).astype(np.float32)
    t = np.array([999.0, 431.5], np.float32)
    text = rng.standard_normal((2, 7, 16)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x), torch.from_numpy(t), torch.from_numpy(text)).sample.numpy()
    for threads in (1, 2):
        got = run(path, {"hidden_states": x, "timestep": t, "encoder_hidden_states": text}, threads)[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_wan_dit_with_a_timestep_per_token_matches_diffusers(tmp_path):
    """Wan 2.2 TI2V's form (expand_timesteps): timestep [batch, tokens], the first latent frame's tokens at 0 (the
    given image) and the rest at t, every block's modulation and the output's per token."""
    model, src = tiny_wan_dir(tmp_path)
    latent = (3, 6, 10)
    path = convert(src, str(tmp_path / "ti2v"), latent_shape=latent, token_timesteps=True)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4, *latent)).astype(np.float32)
    per_frame = 3 * 5
    t = np.stack([np.r_[np.zeros(per_frame), np.full(2 * per_frame, v)] for v in (999.0, 431.5)]).astype(np.float32)
    text = rng.standard_normal((2, 7, 16)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x), torch.from_numpy(t), torch.from_numpy(text)).sample.numpy()
    got = run(path, {"hidden_states": x, "timestep": t, "encoder_hidden_states": text})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    m = lite.Model()
    m.build_from_file(path)
    assert m.get_inputs()[1].shape == [-1, 3 * per_frame]


def test_wan_dit_int8_weights_stay_close(tmp_path):
    model, src = tiny_wan_dir(tmp_path)
    path = convert(src, str(tmp_path / "dit8"), latent_shape=(3, 6, 10), weight_format="int8")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 4, 3, 6, 10)).astype(np.float32)
    t, text = np.array([500.0], np.float32), rng.standard_normal((1, 5, 16)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x), torch.from_numpy(t), torch.from_numpy(text)).sample.numpy()
    got = run(path, {"hidden_states": x, "timestep": t, "encoder_hidden_states": text})[0]
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert 0 < rel < 2e-2, rel


def test_wan_dit_refuses_what_it_cannot_build(tmp_path):
    _, src = tiny_wan_dir(tmp_path)
    with pytest.raises(ConverterError, match="multiples of the patch size"):
        convert(src, str(tmp_path / "odd"), latent_shape=(3, 5, 10))
    with pytest.raises(ConverterError, match="rope_max_seq_len"):
        convert(src, str(tmp_path / "big"), latent_shape=(3, 6, 80))
    assert not list(tmp_path.glob("*.ms"))


def test_wan_dit_through_the_cli(tmp_path):
    from converter.cli import main
    _, src = tiny_wan_dir(tmp_path)
    assert main(["--fmk=HF", f"--modelFile={src}", f"--outputFile={tmp_path / 'cli'}", "--latentShape=2,4,6"]) == 0
    m = lite.Model()
    m.build_from_file(str(tmp_path / "cli.ms"))
    assert (m.get_inputs()[0].name, m.get_inputs()[0].shape) == ("hidden_states", [-1, 4, 2, 4, 6])
    with pytest.raises(SystemExit):
        main(["--fmk=HF", f"--modelFile={src}", f"--outputFile={tmp_path / 'bad'}", "--latentShape=2,4"])


T5_CASES = {
    "umt5_gated_gelu": ("UMT5Config", "UMT5EncoderModel", "gated-gelu"),
    "t5_relu": ("T5Config", "T5EncoderModel", "relu"),
    "t5_gated_gelu": ("T5Config", "T5EncoderModel", "gated-gelu"),
}


@pytest.mark.parametrize("case", sorted(T5_CASES))
def test_t5_encoders_match_transformers(tmp_path, case):
    """Relative-position buckets computed in the graph for a length past max_distance (150 > 128: the clamped
    logarithmic buckets), a padded second row (its real rows compared), UMT5's per-layer tables."""
    import transformers
    config_cls, model_cls, proj = T5_CASES[case]
    torch.manual_seed(0)
    cfg = getattr(transformers, config_cls)(vocab_size=100, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
                                            relative_attention_num_buckets=32, relative_attention_max_distance=128,
                                            feed_forward_proj=proj)
    model = getattr(transformers, model_cls)(cfg).eval()
    model.save_pretrained(str(tmp_path / "ckpt"))
    path = convert(str(tmp_path / "ckpt"), str(tmp_path / case))
    rng = np.random.default_rng(0)
    for length in (150, 9):
        ids = rng.integers(0, 100, (2, length)).astype(np.int64)
        mask = np.ones((2, length), np.int64)
        mask[1, length * 2 // 3:] = 0
        got = run(path, {"input_ids": ids, "attention_mask": mask})[0]
        with torch.no_grad():
            want = model(input_ids=torch.from_numpy(ids),
                         attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
        real = mask.astype(bool)
        np.testing.assert_allclose(got[real], want[real], rtol=1e-4, atol=1e-4 * np.abs(want).max())


def tiny_wan_vae(tmp_path, wan22: bool = False):
    """A perturbed AutoencoderKLWan saved under tmp_path / "vae": Wan 2.1's form (three 2x levels, two temporal), or
    Wan 2.2's (patchified 2x2 pixels in 12 channels, residual blocks, its own decoder width; two 2x levels, one
    temporal)."""
    from diffusers import AutoencoderKLWan
    torch.manual_seed(0)
    if wan22:
        vae = AutoencoderKLWan(base_dim=8, decoder_base_dim=12, z_dim=4, dim_mult=[1, 2, 2], num_res_blocks=1,
                               attn_scales=[], temperal_downsample=[False, True], in_channels=12, out_channels=12,
                               patch_size=2, is_residual=True).eval()
    else:
        vae = AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 2, 2, 2], num_res_blocks=1, attn_scales=[],
                               temperal_downsample=[False, True, True]).eval()
    perturb(vae)
    vae.save_pretrained(str(tmp_path / "vae"))
    return vae


def vae_slices(tmp_path, heads, latent_shape) -> dict:
    """The VAE's time-slice graphs (model_zoo/generation/wan_vae_graph.py heads) converted and loaded."""
    models = {}
    for head in heads:
        m = lite.Model()
        m.build_from_file(convert(str(tmp_path / "vae"), str(tmp_path / head), head=head, latent_shape=latent_shape))
        models[head] = m
    return models


def test_wan_vae_decoder_time_slices_match_diffusers(tmp_path):
    """The two slice graphs (first frame, then one latent frame per call with the caches carried) decode a batch of
    two 4-frame latents as diffusers' AutoencoderKLWan.decode does: two temporal upsamplers (1 + 3 x 4 frames),
    the mid-block attention, 8x spatial upsampling of a non-square latent."""
    vae = tiny_wan_vae(tmp_path)
    hw = (2, 3)
    models = vae_slices(tmp_path, ("vae_decoder_first", "vae_decoder"), (4, *hw))
    z = np.random.default_rng(0).standard_normal((2, 4, 4, *hw)).astype(np.float32)
    with torch.no_grad():
        want = vae.decode(torch.from_numpy(z)).sample.numpy()
    frames = run_time_slices(models["vae_decoder_first"], models["vae_decoder"],
                             [z[:, :, i:i + 1] for i in range(z.shape[2])], "latents", "frames")
    assert [f.shape[2] for f in frames] == [1, 4, 4, 4]
    got = np.concatenate(frames, axis=2)
    assert got.shape == want.shape == (2, 3, 13, 16, 24)
    np.testing.assert_allclose(got, want, atol=1e-4)


@pytest.mark.parametrize("guidance", [True, False])
def test_flux_transformer_matches_diffusers(tmp_path, guidance):
    """FLUX.1's transformer (dev's guidance embedding, or schnell's none): two double- and two single-stream blocks,
    a non-square 6 x 10 latent (15 packed tokens), 7 text rows, a batch of two timesteps."""
    from diffusers import FluxTransformer2DModel
    torch.manual_seed(0)
    model = FluxTransformer2DModel(patch_size=1, in_channels=8, num_layers=2, num_single_layers=2,
                                   attention_head_dim=16, num_attention_heads=2, joint_attention_dim=24,
                                   pooled_projection_dim=12, guidance_embeds=guidance, axes_dims_rope=(4, 6, 6)).eval()
    perturb(model)
    model.save_pretrained(str(tmp_path / "transformer"))
    path = convert(str(tmp_path / "transformer"), str(tmp_path / "flux"), latent_shape=(1, 6, 10), text_len=7)
    rng = np.random.default_rng(0)
    feeds = {"hidden_states": rng.standard_normal((2, 15, 8)).astype(np.float32),
             "encoder_hidden_states": rng.standard_normal((2, 7, 24)).astype(np.float32),
             "pooled_projections": rng.standard_normal((2, 12)).astype(np.float32),
             "timestep": np.array([0.9, 0.35], np.float32)}
    if guidance:
        feeds["guidance"] = np.array([3.5, 3.5], np.float32)
    ids = np.zeros((15, 3), np.float32)
    rows, cols = np.meshgrid(np.arange(3), np.arange(5), indexing="ij")
    ids[:, 1], ids[:, 2] = rows.ravel(), cols.ravel()
    with torch.no_grad():
        want = model(*(torch.from_numpy(feeds[k]) for k in ("hidden_states", "encoder_hidden_states",
                                                             "pooled_projections", "timestep")),
                     img_ids=torch.from_numpy(ids), txt_ids=torch.zeros(7, 3),
                     guidance=torch.from_numpy(feeds["guidance"]) if guidance else None).sample.numpy()
    got = run(path, feeds, threads=2)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    with pytest.raises(ConverterError, match="even"):
        convert(str(tmp_path / "transformer"), str(tmp_path / "odd"), latent_shape=(1, 5, 10))


def test_qwen_image_transformer_matches_diffusers(tmp_path):
    """Qwen-Image's MMDiT: MSRoPE (rows and columns centred), a padded text row masked as keys, two text lengths
    through one graph, a non-square 6 x 10 latent (15 packed tokens)."""
    from diffusers import QwenImageTransformer2DModel
    torch.manual_seed(0)
    model = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=24,
                                        axes_dims_rope=(4, 6, 6)).eval()
    perturb(model)
    model.save_pretrained(str(tmp_path / "transformer"))
    path = convert(str(tmp_path / "transformer"), str(tmp_path / "qwen_image"), latent_shape=(1, 6, 10))
    rng = np.random.default_rng(0)
    for text_len in (7, 12):
        feeds = {"hidden_states": rng.standard_normal((2, 15, 16)).astype(np.float32),
                 "encoder_hidden_states": rng.standard_normal((2, text_len, 24)).astype(np.float32),
                 "encoder_hidden_states_mask": np.ones((2, text_len), np.int64),
                 "timestep": np.array([0.9, 0.35], np.float32)}
        feeds["encoder_hidden_states_mask"][1, text_len - 3:] = 0
        with torch.no_grad():
            want = model(*(torch.from_numpy(feeds[k]) for k in ("hidden_states", "encoder_hidden_states",
                                                                 "encoder_hidden_states_mask", "timestep")),
                         img_shapes=[(1, 3, 5)] * 2).sample.numpy()
        got = run(path, feeds)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_qwen_image_vae_decodes_an_image_with_the_first_slice(tmp_path):
    """AutoencoderKLQwenImage has the Wan VAE's layout: its first-frame slice graphs decode one image latent and
    encode one image."""
    from diffusers import AutoencoderKLQwenImage
    torch.manual_seed(0)
    vae = AutoencoderKLQwenImage(base_dim=8, z_dim=4, dim_mult=[1, 2, 2], num_res_blocks=1, attn_scales=[],
                                 temperal_downsample=[False, True]).eval()
    perturb(vae)
    vae.save_pretrained(str(tmp_path / "vae"))
    path = convert(str(tmp_path / "vae"), str(tmp_path / "vae_first"), head="vae_decoder_first",
                   latent_shape=(1, 3, 5))
    z = np.random.default_rng(1).standard_normal((2, 4, 1, 3, 5)).astype(np.float32)
    with torch.no_grad():
        want = vae.decode(torch.from_numpy(z)).sample.numpy()
    got = run(path, {"latents": z})[0]
    assert got.shape == want.shape == (2, 3, 1, 12, 20)
    np.testing.assert_allclose(got, want, atol=1e-4)
    # and its first encoder slice encodes an image (Qwen-Image-Edit's source image): diffusers' posterior mean
    path = convert(str(tmp_path / "vae"), str(tmp_path / "vae_enc"), head="vae_encoder_first", latent_shape=(1, 3, 5))
    image = np.random.default_rng(2).uniform(-1, 1, (2, 3, 1, 12, 20)).astype(np.float32)
    with torch.no_grad():
        want = vae.encode(torch.from_numpy(image)).latent_dist.mode().numpy()
    got = run(path, {"video": image})[0]
    assert got.shape == want.shape == (2, 4, 1, 3, 5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("projection", [False, True])
def test_clip_vision_tower_matches_transformers(tmp_path, projection):
    """Wan 2.1 I2V's image encoder form: the penultimate hidden state (its image context), the pooled class token
    and, with a projection, image_embeds; a batch of two 32 x 32 images in 8 x 8 patches."""
    from transformers import CLIPVisionConfig, CLIPVisionModel, CLIPVisionModelWithProjection
    torch.manual_seed(0)
    cfg = CLIPVisionConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8, projection_dim=24)
    model = (CLIPVisionModelWithProjection if projection else CLIPVisionModel)(cfg).eval()
    model.save_pretrained(str(tmp_path / "clip"))
    path = convert(str(tmp_path / "clip"), str(tmp_path / "clip_vision"))
    m = lite.Model()
    m.build_from_file(path)
    pixels = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    out = {o.name: a.get_data_to_numpy() for o, a in zip(m.get_outputs(), m.predict({"pixel_values": pixels}))}
    with torch.no_grad():
        ref = model(pixel_values=torch.from_numpy(pixels), output_hidden_states=True)
    pairs = [("last_hidden_state", ref.last_hidden_state), ("penultimate_hidden_state", ref.hidden_states[-2])]
    pairs.append(("image_embeds", ref.image_embeds) if projection else ("pooler_output", ref.pooler_output))
    for name, want in pairs:
        np.testing.assert_allclose(out[name], want.numpy(), rtol=1e-4, atol=1e-4 * float(want.abs().max()))


def test_wan_i2v_dit_matches_diffusers(tmp_path):
    """The I2V DiT (Wan 2.1 I2V): 8 input channels (noise + mask + condition in the real 36), CLIP image states
    through the image embedder and attended separately in every cross-attention (add_k / add_v, norm_added_k)."""
    from diffusers import WanTransformer3DModel
    torch.manual_seed(0)
    model = WanTransformer3DModel(**{**TINY_WAN, "in_channels": 8, "image_dim": 20, "added_kv_proj_dim": 24}).eval()
    perturb(model)
    model.save_pretrained(str(tmp_path / "transformer"))
    path = convert(str(tmp_path / "transformer"), str(tmp_path / "i2v"), latent_shape=(3, 6, 10))
    rng = np.random.default_rng(0)
    feeds = {"hidden_states": rng.standard_normal((2, 8, 3, 6, 10)).astype(np.float32),
             "timestep": np.array([999.0, 431.5], np.float32),
             "encoder_hidden_states": rng.standard_normal((2, 512, 16)).astype(np.float32),   # diffusers: 512 rows
             "encoder_hidden_states_image": rng.standard_normal((2, 9, 20)).astype(np.float32)}
    with torch.no_grad():
        want = model(*(torch.from_numpy(feeds[k]) for k in ("hidden_states", "timestep", "encoder_hidden_states")),
                     encoder_hidden_states_image=torch.from_numpy(feeds["encoder_hidden_states_image"])).sample.numpy()
    got = run(path, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_wan_vae_encoder_time_slices_match_diffusers(tmp_path):
    """The encoder's slices (frame 0, then 4 frames a call, the caches carried: causal convolutions' two frames,
    the temporal downsamplers' one) give diffusers' AutoencoderKLWan.encode posterior mean for a batch of two
    9-frame videos (3 latent frames), I2V's conditioning path."""
    vae = tiny_wan_vae(tmp_path)
    models = vae_slices(tmp_path, ("vae_encoder_first", "vae_encoder"), (3, 2, 3))
    video = np.random.default_rng(0).standard_normal((2, 3, 9, 16, 24)).astype(np.float32)
    with torch.no_grad():
        want = vae.encode(torch.from_numpy(video)).latent_dist.mode().numpy()
    latents = run_time_slices(models["vae_encoder_first"], models["vae_encoder"],
                              [video[:, :, :1], video[:, :, 1:5], video[:, :, 5:9]], "video", "latents")
    got = np.concatenate(latents, axis=2)
    assert got.shape == want.shape == (2, 4, 3, 2, 3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_wan22_vae_time_slices_match_diffusers(tmp_path):
    """Wan 2.2's patchified residual VAE (TI2V-5B's form): the encoder's slices (patchify, AvgDown3D shortcuts, a
    one-frame slice padded in time) and the decoder's (DupUp3D shortcuts, the first slice dropping its first
    duplicated frame, unpatchify) equal diffusers' encode / decode of a batch of two 9-frame videos."""
    vae = tiny_wan_vae(tmp_path, wan22=True)
    models = vae_slices(tmp_path, ("vae_encoder_first", "vae_encoder", "vae_decoder_first", "vae_decoder"),
                        (5, 2, 3))
    video = np.random.default_rng(1).standard_normal((2, 3, 9, 16, 24)).astype(np.float32)
    with torch.no_grad():
        want = vae.encode(torch.from_numpy(video)).latent_dist.mode().numpy()
    got = np.concatenate(run_time_slices(models["vae_encoder_first"], models["vae_encoder"],
                                         [video[:, :, :1], video[:, :, 1:5], video[:, :, 5:9]], "video", "latents"),
                         axis=2)
    assert got.shape == want.shape == (2, 4, 5, 2, 3)   # one temporal level: 2 latent frames a 4-frame call
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    z = np.random.default_rng(2).standard_normal((2, 4, 3, 2, 3)).astype(np.float32)
    with torch.no_grad():
        want = vae.decode(torch.from_numpy(z)).sample.numpy()
    got = np.concatenate(run_time_slices(models["vae_decoder_first"], models["vae_decoder"],
                                         [z[:, :, i:i + 1] for i in range(3)], "latents", "frames"), axis=2)
    assert got.shape == want.shape == (2, 3, 5, 16, 24)
    np.testing.assert_allclose(got, want, atol=1e-4)