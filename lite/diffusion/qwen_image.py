"""Text-to-image with Qwen-Image on the runtime: a converted directory (model_zoo convert) holds the Qwen2.5-VL
language model as a step graph with the "hidden" head (the text encoder), the MMDiT (one image size), the VAE's
first-frame decoder slice, the tokenizer and the configs; this module runs diffusers' QwenImagePipeline recipe
without torch: the prompt in Qwen-Image's chat template, the last hidden states of its tokens after the template's
34 (through LLMEngine.encode, one continuous batch), zero-padded with a mask, 2x2 latent packing, the flow-match
schedule shifted by the image's token count, true classifier-free guidance with a negative prompt (the guided
prediction rescaled to the conditional one's norm), and the VAE decode."""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from .flux import initial_latents, shifted_schedule, unpack_latents
from .schedulers import read_scheduler_config
from .wan import load_graph, read_json

TEMPLATE = ("<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "
            "spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n"
            "<|im_start|>assistant\n")
TEMPLATE_TOKENS = 34   # the template's leading tokens diffusers drops from the text states


def qwen_text_encoder(model_dir: str, threads: int, max_tokens: int):
    """The Qwen2.5-VL language model of a converted directory (text_encoder.ms, "hidden" head, and its
    text_encoder_config.json) in an LLMEngine sized for two prompts of `max_tokens`."""
    from ..llm.engine import LLMEngine
    text_cfg = read_json(os.path.join(model_dir, "text_encoder_config.json"))
    text_cfg = dict(text_cfg.get("text_config") or text_cfg)
    path = os.path.join(model_dir, "text_encoder.ms")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing: convert the model with `python -m model_zoo convert`")
    return LLMEngine(path, text_cfg, num_blocks=max(64, 2 * max_tokens // 16), block_size=16, threads=threads,
                     max_num_batched_tokens=512, prefix_caching=False)


class QwenImageTextToImage:
    def __init__(self, model_dir: str, threads: int = 1, max_sequence_length: int = 1024, extra_text_tokens: int = 0):
        """`extra_text_tokens`: prompt tokens beyond max_sequence_length the text encoder must hold (an edit's image
        tokens)."""
        from tokenizers import Tokenizer

        with open(os.path.join(model_dir, "model_zoo.json")) as f:
            manifest = json.load(f)
        self.max_sequence_length = max_sequence_length
        self.encoder = qwen_text_encoder(model_dir, threads, max_sequence_length + extra_text_tokens + 64)
        self.transformer = load_graph(os.path.join(model_dir, "transformer.ms"), threads)
        self.vae = load_graph(os.path.join(model_dir, "vae_decoder_first.ms"), threads)
        tok = os.path.join(model_dir, "tokenizer", "tokenizer.json")
        if not os.path.isfile(tok):
            raise FileNotFoundError(f"{tok} is missing (the Qwen2 tokenizer's fast form)")
        self.tokenizer = Tokenizer.from_file(tok)
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_sequence_length + TEMPLATE_TOKENS)
        self.scheduler_config = read_scheduler_config(model_dir)
        vae = read_json(os.path.join(model_dir, "vae_config.json"))
        z = int(vae.get("z_dim", 16))
        self.latents_mean = np.array(vae.get("latents_mean", [0.0] * z), np.float32).reshape(1, z, 1, 1, 1)
        self.latents_std = np.array(vae.get("latents_std", [1.0] * z), np.float32).reshape(1, z, 1, 1, 1)
        inputs = {i.name: i for i in self.transformer.get_inputs()}
        self.packed_channels = int(inputs["hidden_states"].shape[2])
        self.latent_hw = tuple(int(v) for v in manifest["latent_shape"][-2:])
        self.tokens = (self.latent_hw[0] // 2) * (self.latent_hw[1] // 2)   # the noise's (an edit's source follows)
        self.vae_scale = 2 ** len(vae.get("temperal_downsample", [False, True, True]))

    @property
    def image_shape(self) -> tuple[int, int]:
        return self.latent_hw[0] * self.vae_scale, self.latent_hw[1] * self.vae_scale

    def encode_prompt(self, prompts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(states [B, L, hidden] zero-padded to the longest prompt, mask [B, L] int64)."""
        ids = [self.tokenizer.encode(TEMPLATE.format(p)).ids for p in prompts]
        if any(len(i) <= TEMPLATE_TOKENS for i in ids):
            raise ValueError("a prompt's template tokenised to no more than the 34 tokens Qwen-Image drops")
        rows = self.encoder.encode(ids, positions=[list(range(TEMPLATE_TOKENS, len(i))) for i in ids])
        return self._padded([r[:self.max_sequence_length] for r in rows])

    @staticmethod
    def _padded(rows: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        longest = max(len(r) for r in rows)
        states = np.zeros((len(rows), longest, rows[0].shape[1]), np.float32)
        mask = np.zeros((len(rows), longest), np.int64)
        for i, r in enumerate(rows):
            states[i, :len(r)], mask[i, :len(r)] = r, 1
        return states, mask

    def _predict(self, latents, t, states, mask):
        return self.transformer.predict({"hidden_states": latents, "encoder_hidden_states": states,
                                         "encoder_hidden_states_mask": mask,
                                         "timestep": np.full(len(latents), t / 1000, np.float32)})[0] \
            .get_data_to_numpy()

    def __call__(self, prompt: str | Sequence[str], negative_prompt: str | Sequence[str] | None = None,
                 steps: int = 50, true_cfg_scale: float = 4.0, seed: int = 0, latents: np.ndarray | None = None,
                 output_type: str = "uint8") -> np.ndarray:
        """Images [B, H, W, 3] (uint8, or "float" in [0, 1]) or the final packed latents ("latent"). Guidance runs
        only with a negative prompt and true_cfg_scale > 1, as diffusers' QwenImagePipeline does."""
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        latents = initial_latents(latents, len(prompts), self.tokens, self.packed_channels, self.latent_hw, seed)
        return self._generate(prompts, negative_prompt, self.encode_prompt, latents, steps, true_cfg_scale,
                              output_type)

    def _generate(self, prompts: list[str], negative_prompt, encode, latents: np.ndarray, steps: int,
                  true_cfg_scale: float, output_type: str, source: np.ndarray | None = None) -> np.ndarray:
        """The denoising loop: `encode` gives a list of prompts' (states, mask); `source` (an edit's packed source
        latents) follows the noise's tokens at every step."""
        states, mask = encode(prompts)
        guided = negative_prompt is not None and true_cfg_scale > 1
        if guided:
            negatives = [negative_prompt] * len(prompts) if isinstance(negative_prompt, str) else list(negative_prompt)
            if len(negatives) != len(prompts):
                raise ValueError(f"{len(prompts)} prompts but {len(negatives)} negative prompts")
            neg_states, neg_mask = encode(negatives)
        scheduler, timesteps = shifted_schedule(self.scheduler_config, self.tokens, steps)
        for t in timesteps:
            joint = latents if source is None else np.concatenate([latents, source], axis=1)
            pred = self._predict(joint, t, states, mask)
            if guided:
                neg = self._predict(joint, t, neg_states, neg_mask)
                comb = neg + np.float32(true_cfg_scale) * (pred - neg)
                pred = comb * (np.linalg.norm(pred, axis=-1, keepdims=True) /
                               np.linalg.norm(comb, axis=-1, keepdims=True))
            latents = scheduler.step(pred.astype(np.float32), latents)
        if output_type == "latent":
            return latents
        return self.decode(latents, output_type)

    def decode(self, latents: np.ndarray, output_type: str = "uint8") -> np.ndarray:
        """Images [B, H, W, 3] from packed latents: de-normalised, through the VAE's first-frame decoder."""
        z = unpack_latents(latents, *self.latent_hw)[:, :, None] * self.latents_std + self.latents_mean
        image = self.vae.predict({"latents": np.ascontiguousarray(z, np.float32)})[0].get_data_to_numpy()[:, :, 0]
        image = np.clip(image / 2 + 0.5, 0.0, 1.0).transpose(0, 2, 3, 1)
        return image if output_type == "float" else np.round(image * 255).astype(np.uint8)
