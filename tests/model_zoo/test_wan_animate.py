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
