"""Wan 2.2 Animate's transformer on the runtime (model_zoo/generation/wan_animate_graph.py): the face encoder graph
(motion encoder + face encoder, head "face_encoder") and the DiT graph (pose latents, face adapters) of a tiny
diffusers WanAnimateTransformer3DModel with seeded random weights, against its forward within 1e-4 (float32):
a batch of two with different timesteps, text and faces."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from test_generation_graphs import convert, run
from test_wan_pipeline import perturb

LATENT = (4, 4, 6)          # the reference frame + 3 latent frames (a 9-frame segment), 4 x 6 latent pixels
FACE = 16                   # motion_encoder_size
TINY = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=12, latent_channels=4,
            out_channels=4, text_dim=16, freq_dim=16, ffn_dim=32, num_layers=2, image_dim=16, added_kv_proj_dim=24,
            rope_max_seq_len=64, motion_encoder_channel_sizes={"16": 8, "8": 12, "4": 8}, motion_encoder_size=FACE,
            motion_style_dim=16, motion_dim=5, motion_encoder_dim=16, face_encoder_hidden_dim=8,
            face_encoder_num_heads=2, inject_face_latents_blocks=1, motion_encoder_batch_size=3)


def tiny_animate(path, **extra):
    from diffusers import WanAnimateTransformer3DModel
    torch.manual_seed(0)
    model = WanAnimateTransformer3DModel(**{**TINY, **extra}).eval()
    perturb(model)
    model.save_pretrained(str(path))
    return model


def animate_inputs(rng, batch=2, image_tokens=5):
    f, h, w = LATENT
    return dict(hidden_states=rng.standard_normal((batch, 12, f, h, w)).astype(np.float32),
                timestep=np.array([900.0, 250.0][:batch], np.float32),
                encoder_hidden_states=rng.standard_normal((batch, 512, 16)).astype(np.float32),   # (diffusers: 512)
                encoder_hidden_states_image=rng.standard_normal((batch, image_tokens, 16)).astype(np.float32),
                pose_hidden_states=rng.standard_normal((batch, 4, f - 1, h, w)).astype(np.float32),
                face_pixel_values=rng.uniform(-1, 1, (batch, 3, 4 * (f - 2) + 1, FACE, FACE)).astype(np.float32))


@pytest.mark.parametrize("pos_embed", [False, True])
def test_wan_animate_transformer_matches_diffusers(tmp_path, pos_embed):
    """With pos_embed_seq_len (the released config's): diffusers views each pair of image states as one sequence of
    twice the tokens (two images a sample); the graph does the same."""
    model = tiny_animate(tmp_path / "transformer", **({"pos_embed_seq_len": 10} if pos_embed else {}))
    face = convert(str(tmp_path / "transformer"), str(tmp_path / "face.ms"), latent_shape=LATENT, head="face_encoder")
    dit = convert(str(tmp_path / "transformer"), str(tmp_path / "dit.ms"), latent_shape=LATENT)
    feeds = animate_inputs(np.random.default_rng(1))
    if pos_embed:
        feeds["encoder_hidden_states_image"] = np.concatenate([feeds["encoder_hidden_states_image"]] * 2)[[0, 2, 1, 3]]
    motion = run(face, {"face_pixel_values": feeds["face_pixel_values"]})[0]
    with torch.no_grad():
        pixels = torch.from_numpy(feeds["face_pixel_values"])
        frames = pixels.permute(0, 2, 1, 3, 4).reshape(-1, 3, FACE, FACE)
        want_motion = model.face_encoder(model.motion_encoder(frames).view(2, pixels.shape[2], -1))
        want_motion = torch.cat([torch.zeros_like(want_motion[:, :1]), want_motion], dim=1).numpy()
        want = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}, return_dict=False)[0].numpy()
    assert motion.shape == want_motion.shape == (2, LATENT[0], 3, 24)
    np.testing.assert_allclose(motion, want_motion, rtol=1e-4, atol=1e-4 * np.abs(want_motion).max())
    dit_feeds = {k: v for k, v in feeds.items() if k != "face_pixel_values"}
    got = run(dit, {**dit_feeds, "motion_vec": motion})[0]
    assert got.shape == want.shape == (2, 4, *LATENT)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_wan_animate_refuses_what_it_cannot_build(tmp_path):
    from converter.ir import ConverterError
    tiny_animate(tmp_path / "transformer")
    with pytest.raises(ConverterError, match="latent_shape"):
        convert(str(tmp_path / "transformer"), str(tmp_path / "face.ms"), head="face_encoder")
    with pytest.raises(ConverterError, match="head"):
        convert(str(tmp_path / "transformer"), str(tmp_path / "x.ms"), latent_shape=LATENT, head="vision")


SEGMENT, SIDE = 9, 16     # a 9-frame segment (3 latent frames + the reference one), 16 x 16 pixels (4x VAE)


def tiny_animate_pipeline(path):
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanAnimatePipeline, WanAnimateTransformer3DModel
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel
    from test_wan_pipeline import tiny_text_encoder
    tokenizer, text_encoder = tiny_text_encoder()
    torch.manual_seed(1)
    transformer = WanAnimateTransformer3DModel(**{**TINY, "image_dim": 20, "inject_face_latents_blocks": 2}).eval()
    image_encoder = CLIPVisionModel(CLIPVisionConfig(hidden_size=20, intermediate_size=32, num_hidden_layers=3,
                                                     num_attention_heads=4, image_size=32, patch_size=8)).eval()
    vae = AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 2, 2], num_res_blocks=1, attn_scales=[],
                           temperal_downsample=[True, True], latents_mean=[0.1, -0.2, 0.0, 0.3],
                           latents_std=[1.5, 0.7, 1.0, 2.0], scale_factor_temporal=4, scale_factor_spatial=4).eval()
    perturb(transformer, vae, image_encoder)
    pipe = WanAnimatePipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae,
                              scheduler=UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                                                flow_shift=3.0),
                              image_processor=CLIPImageProcessor(size={"shortest_edge": 32},
                                                                 crop_size={"height": 32, "width": 32}),
                              image_encoder=image_encoder, transformer=transformer)
    pipe.save_pretrained(str(path))
    return pipe


def frames(count: int, size: tuple[int, int], seed: int) -> list:
    from test_wan_i2v_pipeline import picture
    return [picture(seed + i, size) for i in range(count)]


@pytest.fixture
def numpy_noise(monkeypatch):
    """diffusers draws each later segment's noise with randn_tensor: the same standard normals lite draws from the
    seed (numpy's generator), in the same order."""
    import diffusers.pipelines.wan.pipeline_wan_animate as animate
    draws = {}

    def randn_tensor(shape, generator=None, device=None, dtype=None, **_):
        rng = draws.setdefault("rng", np.random.default_rng(draws["seed"]))
        return torch.from_numpy(rng.standard_normal(tuple(shape)).astype(np.float32))
    monkeypatch.setattr(animate, "randn_tensor", randn_tensor)
    return draws


def test_wan_animate_pipeline_matches_diffusers(tmp_path, numpy_noise):
    """Two segments (13 frames with one conditioning frame: 9, then 8 more, the pose and face videos padded by
    reflection), a reference image of another aspect (fitted with black bars), pose frames at another size, faces
    resized to the motion encoder's; with and without guidance (the unconditional pass with faces of -1)."""
    from lite.diffusion.wan_animate import WanAnimate
    from model_zoo.cli import main as model_zoo
    pipe = tiny_animate_pipeline(tmp_path / "pipeline")
    assert model_zoo(["convert", "Wan2.2-Animate-14B", "--checkpoint", str(tmp_path / "pipeline"), "--output",
                      str(tmp_path / "lite"), "--frames", str(SEGMENT), "--height", str(SIDE), "--width",
                      str(SIDE)]) == 0
    animate = WanAnimate(str(tmp_path / "lite"))
    assert animate.latent_shape == (4, 4, 4, 4) and animate.segment_frames == SEGMENT
    image, pose, face = frames(1, (30, 20), 0)[0], frames(13, (20, 20), 10), frames(13, (24, 24), 40)
    noise = np.random.default_rng(0).standard_normal((1, 4, 4, 4, 4)).astype(np.float32)
    for guidance in (1.0, 2.0):
        args = dict(image=image, pose_video=pose, face_video=face, prompt="a cat walks on the grass",
                    negative_prompt="blurry", guidance_scale=guidance)
        results = {}
        for output_type in ("latent", "np"):
            numpy_noise.clear()
            numpy_noise["seed"] = 5
            with torch.no_grad():
                out = pipe(**args, height=SIDE, width=SIDE, segment_frame_length=SEGMENT, num_inference_steps=2,
                           latents=torch.from_numpy(noise), output_type=output_type).frames
            results[output_type] = out.numpy() if output_type == "latent" else out
        latents = animate(**args, steps=2, seed=5, latents=noise, output_type="latent")
        want = results["latent"]
        np.testing.assert_allclose(latents, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        video = animate(**args, steps=2, seed=5, latents=noise, output_type="float")
        assert video.shape == results["np"].shape == (1, 13, SIDE, SIDE, 3)
        np.testing.assert_allclose(video, results["np"], atol=1e-4)
    for name, video in (("pose", pose[:9]), ("face", face[:9])):   # the command line reads folders of frames
        (tmp_path / name).mkdir()
        for i, frame in enumerate(video):
            frame.save(tmp_path / name / f"{i:03d}.png")
    image.save(tmp_path / "character.png")
    out = tmp_path / "dance.gif"
    assert model_zoo(["run", "Wan2.2-Animate-14B", "--model", str(tmp_path / "lite"), "--image",
                      str(tmp_path / "character.png"), "--pose-video", str(tmp_path / "pose"), "--face-video",
                      str(tmp_path / "face"), "--prompt", "a cat", "--output", str(out), "--steps", "1"]) == 0
    assert out.stat().st_size > 0
    with pytest.raises(SystemExit, match="--pose-video"):
        model_zoo(["run", "Wan2.2-Animate-14B", "--model", str(tmp_path / "lite"), "--image",
                   str(tmp_path / "character.png"), "--prompt", "a cat", "--output", str(out)])
    with pytest.raises(NotImplementedError, match="replacement"):
        animate(image, pose, face, "a cat", mode="replace")
    with pytest.raises(ValueError, match="face frames"):
        animate(image, pose, face[:5], "a cat")
