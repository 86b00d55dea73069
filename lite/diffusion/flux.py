"""Text-to-image with FLUX.1 on the runtime: a converted directory (model_zoo convert) holds the CLIP-L text
encoder (its pooled output), the T5 encoder, the transformer (built for one image size and text length), the VAE
decoder, both tokenizers and the configs; this module runs diffusers' FluxPipeline recipe on them without torch:
CLIP's pooled embedding, T5 states over the prompt padded to `max_sequence_length` (FLUX passes no mask: the padding
is part of the context), 2x2 latent packing, the flow-match schedule shifted by the image's token count (mu), the
guidance embedding of guidance-distilled checkpoints (one transformer pass a step), and the VAE decode."""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from .schedulers import make_scheduler, read_scheduler_config
from .wan import load_graph, read_json

GRAPHS = {"text_encoder": "text_encoder.ms", "text_encoder_2": "text_encoder_2.ms",
          "transformer": "transformer.ms", "vae_decoder": "vae_decoder.ms"}


def calculate_shift(image_seq_len: int, base_seq_len: int = 256, max_seq_len: int = 4096, base_shift: float = 0.5,
                    max_shift: float = 1.15) -> float:
    """diffusers' FLUX schedule shift: linear in the image's token count."""
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    return image_seq_len * m + base_shift - m * base_seq_len


def pack_latents(latents: np.ndarray) -> np.ndarray:
    """[B, C, H, W] -> [B, H/2 * W/2, 4C]: 2x2 patches, rows then columns."""
    b, c, h, w = latents.shape
    return latents.reshape(b, c, h // 2, 2, w // 2, 2).transpose(0, 2, 4, 1, 3, 5).reshape(b, (h // 2) * (w // 2),
                                                                                          c * 4)


def unpack_latents(packed: np.ndarray, h: int, w: int) -> np.ndarray:
    b, _, c4 = packed.shape
    return packed.reshape(b, h // 2, w // 2, c4 // 4, 2, 2).transpose(0, 3, 1, 4, 2, 5).reshape(b, c4 // 4, h, w)


def initial_latents(latents, batch: int, tokens: int, channels: int, latent_hw: tuple[int, int],
                    seed: int) -> np.ndarray:
    """The packed starting noise [batch, tokens, channels]: given (checked against the graph's size), or standard
    normal from `seed` drawn in the unpacked layout (as the pipelines draw it) and packed."""
    if latents is None:
        noise = np.random.default_rng(seed).standard_normal((batch, channels // 4, *latent_hw))
        return pack_latents(noise.astype(np.float32))
    if tuple(latents.shape) != (batch, tokens, channels):
        raise ValueError(f"latents {list(latents.shape)} do not match this directory's {[batch, tokens, channels]} "
                         "(the transformer is built for one image size)")
    return np.asarray(latents, np.float32)


def shifted_schedule(config: dict, tokens: int, steps: int):
    """The scheduler and its timesteps for `steps` steps: sigmas linspace(1, 1/steps) shifted by the image's token
    count (mu), as FluxPipeline and QwenImagePipeline set them."""
    scheduler = make_scheduler(config)
    mu = calculate_shift(tokens, config.get("base_image_seq_len", 256), config.get("max_image_seq_len", 4096),
                         config.get("base_shift", 0.5), config.get("max_shift", 1.15))
    return scheduler, scheduler.set_timesteps(steps, sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)


def _tokenizer(model_dir: str, folder: str):
    from tokenizers import Tokenizer
    path = os.path.join(model_dir, folder, "tokenizer.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing (the tokenizer's fast form)")
    return Tokenizer.from_file(path)


def _pad_id(model_dir: str, folder: str, tok) -> int:
    """The pad token's id: tokenizer_config.json's pad_token, else "<pad>"."""
    cfg = os.path.join(model_dir, folder, "tokenizer_config.json")
    name = "<pad>"
    if os.path.isfile(cfg):
        pad = read_json(cfg).get("pad_token")
        name = pad.get("content") if isinstance(pad, dict) else (pad or name)
    pid = tok.token_to_id(name)
    if pid is None:
        raise ValueError(f"{folder}: no pad token {name!r} in the tokenizer")
    return pid


class FluxTextToImage:
    def __init__(self, model_dir: str, threads: int = 1):
        self.models = {k: load_graph(os.path.join(model_dir, f), threads) for k, f in GRAPHS.items()}
        self.clip_tokenizer = _tokenizer(model_dir, "tokenizer")
        self.clip_tokenizer.no_padding()
        self.t5_tokenizer = _tokenizer(model_dir, "tokenizer_2")
        self.t5_tokenizer.no_padding()
        self.t5_pad = _pad_id(model_dir, "tokenizer_2", self.t5_tokenizer)
        self.scheduler_config = read_scheduler_config(model_dir)
        vae = read_json(os.path.join(model_dir, "vae_config.json"))
        self.scaling, self.shift = float(vae.get("scaling_factor", 1.0)), float(vae.get("shift_factor") or 0.0)
        self.vae_scale = 2 ** (len(vae.get("block_out_channels", [0] * 4)) - 1)
        inputs = {i.name: i for i in self.models["transformer"].get_inputs()}
        self.tokens, self.packed_channels = int(inputs["hidden_states"].shape[1]), int(inputs["hidden_states"].shape[2])
        self.max_sequence_length = int(inputs["encoder_hidden_states"].shape[1])
        self.guidance_embeds = "guidance" in inputs
        with open(os.path.join(model_dir, "model_zoo.json")) as f:
            manifest = json.load(f)
        self.latent_hw = tuple(int(v) for v in manifest["latent_shape"][-2:])
        self.clip_max = int(manifest.get("clip_max_length", 77))

    @property
    def image_shape(self) -> tuple[int, int]:
        return self.latent_hw[0] * self.vae_scale, self.latent_hw[1] * self.vae_scale

    def encode_prompt(self, prompts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(T5 states [B, max_sequence_length, 4096], CLIP pooled [B, 768])."""
        t5, pooled = [], []
        self.clip_tokenizer.enable_truncation(self.clip_max)
        self.t5_tokenizer.enable_truncation(self.max_sequence_length)
        for text in prompts:
            # CLIP: causal attention pooled at the first end-of-text token, so its padding changes nothing
            ids = np.array([self.clip_tokenizer.encode(text).ids], np.int64)
            pooled.append(self.models["text_encoder"].predict({"input_ids": ids})[1].get_data_to_numpy()[0])
            ids = self.t5_tokenizer.encode(text).ids
            ids = np.array([ids + [self.t5_pad] * (self.max_sequence_length - len(ids))], np.int64)
            t5.append(self.models["text_encoder_2"].predict({"input_ids": ids, "attention_mask": np.ones_like(ids)})
                      [0].get_data_to_numpy()[0])
        return np.stack(t5), np.stack(pooled)

    def __call__(self, prompt: str | Sequence[str], steps: int = 28, guidance_scale: float = 3.5, seed: int = 0,
                 latents: np.ndarray | None = None, output_type: str = "uint8") -> np.ndarray:
        """Images [B, H, W, 3] (uint8, or "float" in [0, 1]), or the final packed latents ("latent").
        `latents`: the initial packed noise [B, tokens, 4C] (default: standard normal from `seed`)."""
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        latents = initial_latents(latents, len(prompts), self.tokens, self.packed_channels, self.latent_hw, seed)
        text, pooled = self.encode_prompt(prompts)
        scheduler, timesteps = shifted_schedule(self.scheduler_config, self.tokens, steps)
        feeds = {"encoder_hidden_states": text, "pooled_projections": pooled}
        if self.guidance_embeds:
            feeds["guidance"] = np.full(len(prompts), guidance_scale, np.float32)
        for t in timesteps:
            feeds.update(hidden_states=latents, timestep=np.full(len(prompts), t / 1000, np.float32))
            pred = self.models["transformer"].predict(feeds)[0].get_data_to_numpy()
            latents = scheduler.step(pred, latents)
        if output_type == "latent":
            return latents
        z = unpack_latents(latents, *self.latent_hw) / np.float32(self.scaling) + np.float32(self.shift)
        images = self.models["vae_decoder"].predict({"latents": np.ascontiguousarray(z, np.float32)})[0]
        images = np.clip(images.get_data_to_numpy() / 2 + 0.5, 0.0, 1.0).transpose(0, 2, 3, 1)
        return images if output_type == "float" else np.round(images * 255).astype(np.uint8)
