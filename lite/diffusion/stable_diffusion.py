"""Stable Diffusion 1.x / 2.x / XL text-to-image on the runtime: diffusers' StableDiffusionPipeline and
StableDiffusionXLPipeline recipes without torch, on a converted directory (model_zoo convert: the CLIP text
encoder(s), the UNet built for one latent size, the AutoencoderKL decoder, tokenizers and configs).

SD 1.x / 2.x: the prompt padded to the tokenizer's 77 with its pad token, CLIP's last hidden state (all 77 rows:
the UNet cross-attends to the padding too). SDXL: both encoders' penultimate states concatenated on features, the
second encoder's projected pooled embedding and the six size / crop numbers as extra conditioning; an absent
negative prompt gives zero embeddings (force_zeros_for_empty_prompt). Classifier-free guidance runs the unconditional
and conditional rows as one batch, with diffusers' optional guidance_rescale; the scheduler (PNDM, DDIM, Euler,
lite.diffusion.ddpm_schedulers) scales the noise and the UNet's input; latents are divided by the VAE's
scaling_factor (or de-normalised with its latents_mean / std) before the decoder."""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from .flux import _pad_id, _tokenizer
from .schedulers import make_scheduler, read_scheduler_config
from .wan import load_graph, read_json, starting_noise


def rescale_guidance(guided: np.ndarray, text: np.ndarray, rescale: float) -> np.ndarray:
    """diffusers' rescale_noise_cfg: the guided prediction brought towards the conditional one's standard deviation
    (per sample, unbiased)."""
    axes = tuple(range(1, guided.ndim))
    ratio = text.std(axis=axes, keepdims=True, ddof=1) / guided.std(axis=axes, keepdims=True, ddof=1)
    return (rescale * guided * ratio + (1 - rescale) * guided).astype(np.float32)


class _ClipPrompt:
    """A CLIP tokenizer padded to model_max_length with its pad token, as the SD pipelines call it."""

    def __init__(self, model_dir: str, folder: str, length: int):
        self.tok = _tokenizer(model_dir, folder)
        self.tok.no_padding()
        self.length = length   # model_max_length, capped by the encoder's positions (model_zoo.json)
        self.tok.enable_truncation(self.length)
        self.pad = _pad_id(model_dir, folder, self.tok)

    def ids(self, text: str) -> np.ndarray:
        ids = self.tok.encode(text).ids
        return np.array([ids + [self.pad] * (self.length - len(ids))], np.int64)


class StableDiffusion:
    def __init__(self, model_dir: str, threads: int = 1):
        with open(os.path.join(model_dir, "model_zoo.json")) as f:
            manifest = json.load(f)
        self.xl = manifest.get("pipeline") == "StableDiffusionXLPipeline"
        names = ["text_encoder", "unet", "vae_decoder"] + (["text_encoder_2"] if self.xl else [])
        self.models = {k: load_graph(os.path.join(model_dir, k + ".ms"), threads) for k in names}
        lengths = manifest.get("clip_max_length", {})
        self.prompts = [_ClipPrompt(model_dir, folder, int(lengths.get(folder, 77)))
                        for folder in (("tokenizer", "tokenizer_2") if self.xl else ("tokenizer",))]
        index = read_json(os.path.join(model_dir, "model_index.json"))
        self.force_zeros = bool(index.get("force_zeros_for_empty_prompt", True)) and self.xl
        self.scheduler_config = read_scheduler_config(model_dir)
        vae = read_json(os.path.join(model_dir, "vae_config.json"))
        self.scaling = float(vae.get("scaling_factor", 0.18215))
        self.latents_mean, self.latents_std = vae.get("latents_mean"), vae.get("latents_std")
        self.vae_scale = 2 ** (len(vae.get("block_out_channels", [0] * 4)) - 1)
        sample = {i.name: i for i in self.models["unet"].get_inputs()}["sample"]
        self.latent_shape = tuple(int(v) for v in sample.shape[1:])   # (C, h, w)

    @property
    def image_shape(self) -> tuple[int, int]:
        return self.latent_shape[1] * self.vae_scale, self.latent_shape[2] * self.vae_scale

    def _encode_one(self, text: str) -> tuple[np.ndarray, np.ndarray | None]:
        if not self.xl:
            ids = self.prompts[0].ids(text)
            return self.models["text_encoder"].predict({"input_ids": ids})[0].get_data_to_numpy()[0], None
        states, pooled = [], None
        for prompt, name in zip(self.prompts, ("text_encoder", "text_encoder_2")):
            model = self.models[name]
            out = {o.name: t.get_data_to_numpy() for o, t in
                   zip(model.get_outputs(), model.predict({"input_ids": prompt.ids(text)}))}
            states.append(out["penultimate_hidden_state"][0])
            if name == "text_encoder_2":
                if "text_embeds" not in out:
                    raise ValueError("SDXL's second text encoder has no text_projection (text_embeds)")
                pooled = out["text_embeds"][0]
        return np.concatenate(states, axis=-1), pooled

    def encode_prompt(self, prompts: Sequence[str], negative: Sequence[str] | None):
        """(states [2B or B, 77, dim], pooled or None): the negative rows first, as diffusers concatenates them."""
        pos = [self._encode_one(p) for p in prompts]
        rows = []
        if negative is not None:
            if self.force_zeros and all(n is None for n in negative):
                rows = [(np.zeros_like(s), None if p is None else np.zeros_like(p)) for s, p in pos]
            else:
                rows = [self._encode_one(n or "") for n in negative]
        rows += pos
        states = np.stack([s for s, _ in rows]).astype(np.float32)
        pooled = np.stack([p for _, p in rows]).astype(np.float32) if self.xl else None
        return states, pooled

    def __call__(self, prompt: str | Sequence[str], negative_prompt: str | Sequence[str] | None = None,
                 steps: int = 50, guidance_scale: float | None = None, seed: int = 0, latents: np.ndarray | None = None,
                 output_type: str = "uint8", guidance_rescale: float = 0.0) -> np.ndarray:
        """Images [B, H, W, 3] (uint8, or "float" in [0, 1]) or the final latents ("latent"). `latents`: the initial
        noise [B, C, h, w] before the scheduler's init_noise_sigma (default: standard normal from `seed`).
        SDXL: negative_prompt None gives zero negative embeddings; SD 1.x / 2.x: None means the empty prompt.
        `guidance_scale` None: diffusers' default (SD 7.5, SDXL 5)."""
        if guidance_scale is None:
            guidance_scale = 5.0 if self.xl else 7.5
        if output_type not in ("uint8", "float", "latent"):
            raise ValueError(f"output_type is uint8, float or latent, not {output_type!r}")
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        guided = guidance_scale > 1.0
        negatives = None
        if guided:
            negatives = ([negative_prompt] * len(prompts) if negative_prompt is None or isinstance(negative_prompt, str)
                         else list(negative_prompt))
            if len(negatives) != len(prompts):
                raise ValueError(f"{len(prompts)} prompts but {len(negatives)} negative prompts")
            if not self.force_zeros:
                negatives = [n or "" for n in negatives]
        latents = starting_noise(latents, (len(prompts), *self.latent_shape), seed, "UNet")
        states, pooled = self.encode_prompt(prompts, negatives)
        scheduler = make_scheduler(self.scheduler_config)
        timesteps = scheduler.set_timesteps(steps)
        latents = (latents * np.float32(scheduler.init_noise_sigma)).astype(np.float32)
        feeds = {"encoder_hidden_states": states}
        if self.xl:
            h, w = self.image_shape
            feeds["text_embeds"] = pooled
            feeds["time_ids"] = np.tile(np.array([[h, w, 0, 0, h, w]], np.float32), (states.shape[0], 1))
        batch = len(prompts)
        for t in timesteps:
            x = scheduler.scale_model_input(np.concatenate([latents, latents]) if guided else latents)
            feeds.update(sample=np.ascontiguousarray(x, np.float32),
                         timestep=np.full(x.shape[0], t, np.float32))
            pred = self.models["unet"].predict(feeds)[0].get_data_to_numpy()
            if guided:
                uncond, text = pred[:batch], pred[batch:]
                pred = uncond + np.float32(guidance_scale) * (text - uncond)
                if guidance_rescale > 0:
                    pred = rescale_guidance(pred, text, guidance_rescale)
            latents = scheduler.step(pred, latents)
        if output_type == "latent":
            return latents
        if self.latents_mean is not None and self.latents_std is not None:
            c = len(self.latents_mean)
            z = (latents * np.array(self.latents_std, np.float32).reshape(1, c, 1, 1) / np.float32(self.scaling)
                 + np.array(self.latents_mean, np.float32).reshape(1, c, 1, 1))
        else:
            z = latents / np.float32(self.scaling)
        images = self.models["vae_decoder"].predict({"latents": np.ascontiguousarray(z, np.float32)})[0]
        images = np.clip(images.get_data_to_numpy() / 2 + 0.5, 0.0, 1.0).transpose(0, 2, 3, 1)
        return images if output_type == "float" else np.round(images * 255).astype(np.uint8)
