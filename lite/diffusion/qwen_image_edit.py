"""Image editing with Qwen-Image-Edit on the runtime: diffusers' QwenImageEditPipeline recipe without torch. Beside
what a Qwen-Image directory holds, a converted edit directory has the Qwen2.5-VL vision tower (for the source image's
patch grid), the VAE encoder's first-frame slice, the Qwen2-VL image processor's settings, and a transformer built
for the noise's tokens followed by the source image's.

The source image enters twice: (1) semantically, through Qwen2.5-VL: it is resized (Lanczos) to the size of the
directory's area with its own aspect ratio (diffusers: 1024 x 1024's area, sides multiples of 32), the Qwen2-VL
processor resizes and patches it, the vision tower's rows replace the prompt's image-pad tokens and the prompt runs
with Qwen2.5-VL's 3-D (multimodal RoPE) positions; the last hidden states from the template's 64th token on (the
image's tokens and the instruction) condition the transformer; (2) by appearance: its VAE latent (the posterior
mean, normalised), packed 2x2, follows the noise's tokens at every step (RoPE frame 1) and only the noise's rows of
the prediction are used.

transformers 5 computes Qwen2.5-VL's 3-D positions only when given mm_token_type_ids, which diffusers 0.42's edit
pipeline does not pass (its text encoder then uses 1-D positions for the image tokens); this module uses the 3-D
positions the model was trained with, and its test gives diffusers the token types."""
from __future__ import annotations

import math
import os
from typing import Sequence

import numpy as np

from ..llm.multimodal import PromptEmbeddings, qwen2_vl_positions
from ..qwen2_vl_image import qwen2_vl_pixels
from .flux import initial_latents, pack_latents
from .qwen_image import QwenImageTextToImage
from .wan import load_graph, read_json
from .wan_i2v import load_rgb, video_pixels

TEMPLATE = ("<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, objects, "
            "background), then explain how the user's text instruction should alter or modify the image. Generate a "
            "new image that meets the user's requirements while maintaining consistency with the original input "
            "where appropriate.<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>{}"
            "<|im_end|>\n<|im_start|>assistant\n")
TEMPLATE_TOKENS = 64   # the template's leading tokens diffusers drops from the text states
IMAGE_PAD = "<|image_pad|>"


def calculate_dimensions(target_area: int, ratio: float) -> tuple[int, int]:
    """diffusers' (width, height) for an aspect ratio (width / height) at about `target_area` pixels, sides rounded
    to multiples of 32."""
    width = math.sqrt(target_area * ratio)
    height = width / ratio
    return int(round(width / 32) * 32), int(round(height / 32) * 32)


class QwenImageEdit(QwenImageTextToImage):
    def __init__(self, model_dir: str, threads: int = 1, max_sequence_length: int = 1024):
        manifest = read_json(os.path.join(model_dir, "model_zoo.json"))
        self.image_tokens = int(manifest["vision_tokens"])
        super().__init__(model_dir, threads, max_sequence_length, extra_text_tokens=self.image_tokens)
        self.tokenizer.no_truncation()
        self.vision = load_graph(os.path.join(model_dir, "vision_encoder.ms"), threads)
        self.vae_encoder = load_graph(os.path.join(model_dir, "vae_encoder_first.ms"), threads)
        self.processor_config = read_json(os.path.join(model_dir, "vision_processor_config.json"))
        text = read_json(os.path.join(model_dir, "text_encoder_config.json"))
        self.image_token_id = int(text["image_token_id"])
        self.merge = int((text.get("vision_config") or {}).get("spatial_merge_size", 2))
        self.source_area = int(manifest["height"]) * int(manifest["width"])

    def source_size(self, image) -> tuple[int, int]:
        """(height, width) the source image is resized to: this directory's area at the image's aspect ratio; it
        must be the size the directory was converted for (the transformer's and the vision tower's grids)."""
        im = load_rgb(image)
        width, height = calculate_dimensions(self.source_area, im.width / im.height)
        if (height, width) != self.image_shape:
            raise ValueError(f"a {im.width}x{im.height} image is edited at {width}x{height} (its aspect ratio at "
                             f"{self.source_area} pixels); this directory was converted for {self.image_shape[1]}x"
                             f"{self.image_shape[0]}: convert with --height {height} --width {width}")
        return height, width

    def image_rows(self, image) -> tuple[np.ndarray, tuple[int, int, int]]:
        """(the vision tower's rows, the patch grid) of the source image, resized as the pipeline resizes it."""
        height, width = self.source_size(image)
        from PIL import Image
        resized = load_rgb(image).resize((width, height), resample=Image.LANCZOS)
        pixels, grid = qwen2_vl_pixels(resized, self.processor_config)
        n = grid[0] * grid[1] * grid[2] // self.merge ** 2
        if n != self.image_tokens:
            raise ValueError(f"the source image gives {n} image tokens; the vision tower was built for "
                             f"{self.image_tokens}")
        return self.vision.predict({"pixel_values": pixels})[0].get_data_to_numpy(), grid

    def encode_image_prompt(self, prompts: Sequence[str], image, image_rows=None) -> tuple[np.ndarray, np.ndarray]:
        """(states [B, L, hidden] zero-padded, mask [B, L] int64) of the prompts with the source image in them;
        `image_rows`: the image's (rows, grid) when already computed (image_rows)."""
        rows, grid = image_rows if image_rows is not None else self.image_rows(image)
        n = len(rows)
        ids, embeddings = [], []
        for p in prompts:
            text = TEMPLATE.format(p).replace(IMAGE_PAD, IMAGE_PAD * n)
            tokens = self.tokenizer.encode(text).ids
            where = np.flatnonzero(np.array(tokens) == self.image_token_id)
            if len(where) != n:
                raise ValueError(f"the prompt tokenised to {len(where)} image-pad tokens, not {n} (is "
                                 f"{IMAGE_PAD} one token of this tokenizer?)")
            if len(tokens) <= TEMPLATE_TOKENS:
                raise ValueError(f"the template tokenised to no more than the {TEMPLATE_TOKENS} tokens dropped")
            ids.append(tokens)
            embeddings.append(PromptEmbeddings(where, rows, qwen2_vl_positions(tokens, [grid], self.image_token_id,
                                                                               self.merge)))
        states = self.encoder.encode(ids, positions=[range(TEMPLATE_TOKENS, len(i)) for i in ids],
                                     embeddings=embeddings)
        longest = max(len(s) for s in states)
        if longest > self.max_sequence_length + n:
            raise ValueError(f"the prompt gives {longest} text states; the transformer takes up to "
                             f"{self.max_sequence_length + n} (max_sequence_length {self.max_sequence_length} + the "
                             f"image's {n} tokens)")
        return self._padded(states)

    def encode_source_latents(self, image) -> np.ndarray:
        """[1, tokens, 4C]: the source image's VAE latent (posterior mean), normalised and packed."""
        height, width = self.source_size(image)
        z = self.vae_encoder.predict({"video": video_pixels(image, height, width)[:, :, None]})[0].get_data_to_numpy()
        z = (z - self.latents_mean) / self.latents_std
        return pack_latents(np.ascontiguousarray(z[:, :, 0], np.float32))

    def __call__(self, image, prompt: str | Sequence[str], negative_prompt: str | Sequence[str] | None = None,
                 steps: int = 50, true_cfg_scale: float = 4.0, seed: int = 0, latents: np.ndarray | None = None,
                 output_type: str = "uint8") -> np.ndarray:
        """Edited images [B, H, W, 3] (uint8, or "float" in [0, 1]) or the final packed latents ("latent") of the
        source `image` (a path, PIL image or uint8 array) under each prompt. Guidance runs only with a negative
        prompt and true_cfg_scale > 1."""
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        latents = initial_latents(latents, len(prompts), self.tokens, self.packed_channels, self.latent_hw, seed)
        source = np.repeat(self.encode_source_latents(image), len(prompts), axis=0)
        rows = self.image_rows(image)   # once, for the prompts and the negative prompts
        return self._generate(prompts, negative_prompt, lambda texts: self.encode_image_prompt(texts, image, rows),
                              latents, steps, true_cfg_scale, output_type, source)
