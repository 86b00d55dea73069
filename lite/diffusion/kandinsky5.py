"""Text-to-image with Kandinsky 5.0 Image Lite on the runtime: a converted directory (model_zoo convert) holds the
Qwen2.5-VL language model as a step graph with the "hidden" head, the CLIP-L text tower (its pooled output), the
CrossDiT (one image size), the FLUX VAE decoder, both tokenizers and the configs; this module runs diffusers'
Kandinsky5T2IPipeline recipe without torch: the cleaned prompt in Kandinsky's chat template, the last hidden states
of its tokens after the template's first 40 (through LLMEngine.encode), CLIP's pooled embedding, latents kept
channels last [B, 1, h, w, C], the static-shift flow-match schedule, classifier-free guidance with a negative prompt
(default empty), and the VAE decode of latents / scaling_factor (the pipeline applies no shift_factor).

Each prompt goes through the transformer alone (batch 1), so a prompt's states are never padded: the reference
model has no text mask, and diffusers' batches of unequal prompts attend to their padding."""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from .flux import _tokenizer
from .qwen_image import qwen_text_encoder
from .schedulers import make_scheduler, read_scheduler_config
from .wan import load_graph, prompt_clean, read_json

TEMPLATE = ("<|im_start|>system\nYou are a prompt engineer. Describe the image by detailing the color, shape, size, "
            "texture, quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
            "<|im_start|>user\n{}<|im_end|>")
TEMPLATE_TOKENS = 40   # the template's leading tokens diffusers drops from the text states
# the sizes Kandinsky 5 Image Lite was trained at (diffusers snaps other requests to the nearest aspect ratio)
RESOLUTIONS = ((1024, 1024), (640, 1408), (1408, 640), (768, 1280), (1280, 768), (896, 1152), (1152, 896))


class Kandinsky5TextToImage:
    def __init__(self, model_dir: str, threads: int = 1, max_sequence_length: int = 512):
        with open(os.path.join(model_dir, "model_zoo.json")) as f:
            manifest = json.load(f)
        self.max_sequence_length = max_sequence_length
        self.encoder = qwen_text_encoder(model_dir, threads, max_sequence_length + TEMPLATE_TOKENS)
        self.clip = load_graph(os.path.join(model_dir, "text_encoder_2.ms"), threads)
        self.transformer = load_graph(os.path.join(model_dir, "transformer.ms"), threads)
        self.vae = load_graph(os.path.join(model_dir, "vae_decoder.ms"), threads)
        self.tokenizer = _tokenizer(model_dir, "tokenizer")
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_sequence_length + TEMPLATE_TOKENS)
        self.clip_tokenizer = _tokenizer(model_dir, "tokenizer_2")
        self.clip_tokenizer.no_padding()
        self.clip_tokenizer.enable_truncation(int(manifest.get("clip_max_length", 77)))
        self.scheduler_config = read_scheduler_config(model_dir)
        vae = read_json(os.path.join(model_dir, "vae_config.json"))
        self.scaling = float(vae.get("scaling_factor", 1.0))
        self.vae_scale = 2 ** (len(vae.get("block_out_channels", [0] * 4)) - 1)
        x = {i.name: i for i in self.transformer.get_inputs()}["hidden_states"]
        self.latent_shape = tuple(int(v) for v in x.shape[1:])   # (1, h, w, channels)

    @property
    def image_shape(self) -> tuple[int, int]:
        return self.latent_shape[1] * self.vae_scale, self.latent_shape[2] * self.vae_scale

    def encode_prompt(self, prompt: str) -> tuple[np.ndarray, np.ndarray]:
        """(Qwen2.5-VL states [1, L, hidden], CLIP pooled [1, 768]) of one prompt."""
        text = prompt_clean(prompt)
        ids = self.tokenizer.encode(TEMPLATE.format(text)).ids
        if len(ids) <= TEMPLATE_TOKENS:
            raise ValueError(f"the prompt's template tokenised to no more than the {TEMPLATE_TOKENS} tokens "
                             "Kandinsky 5 drops")
        states = self.encoder.encode([ids], positions=[list(range(TEMPLATE_TOKENS, len(ids)))])[0]
        # CLIP: causal attention pooled at the end-of-text token, so the padding to 77 changes nothing
        clip_ids = np.array([self.clip_tokenizer.encode(text).ids], np.int64)
        pooled = self.clip.predict({"input_ids": clip_ids})[1].get_data_to_numpy()
        return np.ascontiguousarray(states[None], np.float32), pooled

    def _velocity(self, latents: np.ndarray, t: float, states: np.ndarray, pooled: np.ndarray) -> np.ndarray:
        return self.transformer.predict({"hidden_states": latents, "encoder_hidden_states": states,
                                         "pooled_projections": pooled,
                                         "timestep": np.full(1, t, np.float32)})[0].get_data_to_numpy()

    def __call__(self, prompt: str | Sequence[str], negative_prompt: str | Sequence[str] | None = None,
                 steps: int = 50, guidance_scale: float = 3.5, seed: int = 0, latents: np.ndarray | None = None,
                 output_type: str = "uint8") -> np.ndarray:
        """Images [B, H, W, 3] (uint8, or "float" in [0, 1]) or the final latents [B, 1, h, w, C] ("latent").
        Guidance runs when guidance_scale > 1, against `negative_prompt` (default ""), as diffusers does."""
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        shape = (len(prompts), *self.latent_shape)
        if latents is None:
            latents = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        elif tuple(latents.shape) != shape:
            raise ValueError(f"latents {list(latents.shape)} do not match this directory's {list(shape)} (the "
                             "transformer is built for one image size)")
        guided = guidance_scale > 1.0
        negatives = [""] * len(prompts) if negative_prompt is None else (
            [negative_prompt] * len(prompts) if isinstance(negative_prompt, str) else list(negative_prompt))
        if len(negatives) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(negatives)} negative prompts")
        out = []
        for i, p in enumerate(prompts):
            cond = self.encode_prompt(p)
            uncond = self.encode_prompt(negatives[i]) if guided else None
            scheduler = make_scheduler(self.scheduler_config)
            x = np.ascontiguousarray(latents[i:i + 1], np.float32)
            for t in scheduler.set_timesteps(steps):
                v = self._velocity(x, t, *cond)
                if guided:
                    u = self._velocity(x, t, *uncond)
                    v = u + np.float32(guidance_scale) * (v - u)
                x = scheduler.step(v, x)
            out.append(x)
        latents = np.concatenate(out)
        if output_type == "latent":
            return latents
        z = latents[:, 0].transpose(0, 3, 1, 2) / np.float32(self.scaling)
        images = self.vae.predict({"latents": np.ascontiguousarray(z, np.float32)})[0].get_data_to_numpy()
        images = np.clip(images / 2 + 0.5, 0.0, 1.0).transpose(0, 2, 3, 1)
        return images if output_type == "float" else np.round(images * 255).astype(np.uint8)
