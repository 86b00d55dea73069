"""Kandinsky 5.0 Lite on the runtime: text-to-image (Image Lite) and text-to-video (Video Lite). A converted directory
(model_zoo convert) holds the Qwen2.5-VL language model as a step graph with the "hidden" head, the CLIP-L text tower
(its pooled output), the CrossDiT (one latent size), the VAE decoder (Image: the FLUX AutoencoderKL; Video: the
HunyuanVideo VAE, one graph per temporal tile length), both tokenizers and the configs. This module runs diffusers'
Kandinsky5T2IPipeline / Kandinsky5T2VPipeline recipes without torch: the cleaned prompt in the pipeline's chat
template, the last hidden states of its tokens after the template's leading ones (40 image, 128 video) through
LLMEngine.encode, CLIP's pooled embedding, latents kept channels last [B, frames, h, w, C] (with visual_cond: zero
condition channels and mask, never stepped), the static-shift flow-match schedule, classifier-free guidance against a
negative prompt, and the VAE decode of latents / scaling_factor (the pipelines apply no shift_factor); video in
diffusers' temporal tiles with the overlap blended.

Each prompt goes through the transformer alone (batch 1), so a prompt's states are never padded: the reference
model has no text mask, and diffusers' batches of unequal prompts attend to their padding."""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from ..llm.multimodal import PromptEmbeddings, qwen2_vl_positions
from .flux import _tokenizer
from .qwen_image import qwen_text_encoder
from .schedulers import make_scheduler, read_scheduler_config
from .wan import load_graph, prompt_clean, read_json

IMAGE_TEMPLATE = ("<|im_start|>system\nYou are a prompt engineer. Describe the image by detailing the color, shape, "
                  "size, texture, quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
                  "<|im_start|>user\n{}<|im_end|>")
VIDEO_TEMPLATE = "\n".join([
    "<|im_start|>system\nYou are a prompt engineer. Describe the video in detail.",
    "Describe how the camera moves or shakes, describe the zoom and view angle, whether it follows the objects.",
    "Describe the location of the video, main characters or objects and their action.",
    "Describe the dynamism of the video and presented actions.",
    "Name the visual style of the video: whether it is a professional footage, user generated content, some kind of "
    "animation, video game or scren content.",
    "Describe the visual effects, postprocessing and transitions if they are presented in the video.",
    "Pay attention to the order of key actions shown in the scene.<|im_end|>",
    "<|im_start|>user\n{}<|im_end|>"])
VIDEO_NEGATIVE = ("Static, 2D cartoon, cartoon, 2d animation, paintings, images, worst quality, low quality, ugly, "
                  "deformed, walking backwards")
I2I_TEMPLATE = ("<|im_start|>system\nYou are a prompt engineer. Based on the provided source image (first image) and "
                "target image (second image), create an interesting text prompt that can be used together with the "
                "source image to create the target image:<|im_end|><|im_start|>user{}<|vision_start|><|image_pad|>"
                "<|vision_end|><|im_end|>")
IMAGE_PAD = "<|image_pad|>"
# the sizes Kandinsky 5 Image Lite was trained at (diffusers snaps other requests to the nearest aspect ratio)
RESOLUTIONS = ((1024, 1024), (640, 1408), (1408, 640), (768, 1280), (1280, 768), (896, 1152), (1152, 896))


def image_prompt(ids: Sequence[int], rows: np.ndarray, grid: tuple[int, int, int], image_token_id: int,
                 merge: int) -> PromptEmbeddings:
    """The vision tower's rows at a prompt's image-pad tokens, with Qwen2.5-VL's 3-D positions."""
    where = np.flatnonzero(np.asarray(ids) == image_token_id)
    if len(where) != len(rows):
        raise ValueError(f"the prompt tokenised to {len(where)} image-pad tokens, not {len(rows)} (is {IMAGE_PAD} one "
                         "token of this tokenizer?)")
    return PromptEmbeddings(where, rows, qwen2_vl_positions(ids, [grid], image_token_id, merge))


class _Kandinsky5:
    template: str
    template_tokens: int
    default_negative: str
    keeps_first_frame = False   # image to video: latent frame 0 is the encoded image, never stepped

    def __init__(self, model_dir: str, threads: int, max_sequence_length: int):
        with open(os.path.join(model_dir, "model_zoo.json")) as f:
            self.manifest = json.load(f)
        self.model_dir, self.threads = model_dir, threads
        self.encoder = qwen_text_encoder(model_dir, threads, max_sequence_length + self.template_tokens)
        self.clip = load_graph(os.path.join(model_dir, "text_encoder_2.ms"), threads)
        self.transformer = load_graph(os.path.join(model_dir, "transformer.ms"), threads)
        self.tokenizer = _tokenizer(model_dir, "tokenizer")
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_sequence_length + self.template_tokens)
        self.clip_tokenizer = _tokenizer(model_dir, "tokenizer_2")
        self.clip_tokenizer.no_padding()
        self.clip_tokenizer.enable_truncation(int(self.manifest.get("clip_max_length", 77)))
        self.scheduler_config = read_scheduler_config(model_dir)
        self.vae_config = read_json(os.path.join(model_dir, "vae_config.json"))
        self.scaling = float(self.vae_config.get("scaling_factor", 1.0))
        x = {i.name: i for i in self.transformer.get_inputs()}["hidden_states"]
        self.latent_shape = tuple(int(v) for v in x.shape[1:])   # (frames, h, w, channels incl. the condition)
        self.channels = int(self.manifest.get("latent_channels", self.latent_shape[-1]))

    def encode_prompt(self, prompt: str, image_rows: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(Qwen2.5-VL states [1, L, hidden], CLIP pooled [1, 768]) of one prompt; `image_rows`: (the vision tower's
        rows, the image's patch grid) of an image in the template (image to image)."""
        text = prompt_clean(prompt)
        full = self.template.format(text)
        embeddings = None
        if image_rows is not None:
            rows, grid = image_rows
            full = full.replace(IMAGE_PAD, IMAGE_PAD * len(rows))
        ids = self.tokenizer.encode(full).ids
        if len(ids) <= self.template_tokens:
            raise ValueError(f"the prompt's template tokenised to no more than the {self.template_tokens} tokens "
                             "Kandinsky 5 drops")
        if image_rows is not None:
            embeddings = [image_prompt(ids, rows, grid, self.image_token_id, self.merge)]
        states = self.encoder.encode([ids], positions=[list(range(self.template_tokens, len(ids)))],
                                     embeddings=embeddings)[0]
        # CLIP: causal attention pooled at the end-of-text token, so the padding to 77 changes nothing
        clip_ids = np.array([self.clip_tokenizer.encode(text).ids], np.int64)
        pooled = self.clip.predict({"input_ids": clip_ids})[1].get_data_to_numpy()
        return np.ascontiguousarray(states[None], np.float32), pooled

    def _velocity(self, latents: np.ndarray, t: float, states: np.ndarray, pooled: np.ndarray) -> np.ndarray:
        return self.transformer.predict({"hidden_states": latents, "encoder_hidden_states": states,
                                         "pooled_projections": pooled,
                                         "timestep": np.full(1, t, np.float32)})[0].get_data_to_numpy()

    def _starting_latents(self, latents: np.ndarray | None, batch: int, seed: int) -> np.ndarray:
        """[B, frames, h, w, channels incl. the zero condition channels]: given, or standard normal from `seed` in the
        noise channels."""
        shape = (batch, *self.latent_shape)
        if latents is None:
            noise = np.random.default_rng(seed).standard_normal((*shape[:-1], self.channels)).astype(np.float32)
            latents = np.zeros(shape, np.float32)
            latents[..., :self.channels] = noise
        elif tuple(latents.shape) != shape:
            raise ValueError(f"latents {list(latents.shape)} do not match this directory's {list(shape)} (the "
                             "transformer is built for one latent size; with visual_cond the condition channels "
                             "follow the noise)")
        return np.array(latents, np.float32)

    def denoise(self, prompts: Sequence[str], negative_prompt, steps: int, guidance_scale: float, seed: int,
                latents: np.ndarray | None, encode=None) -> np.ndarray:
        """The final latents [B, frames, h, w, channels]; guidance when guidance_scale > 1. `encode`: a prompt's
        conditioning (default encode_prompt)."""
        encode = encode or self.encode_prompt
        latents = self._starting_latents(latents, len(prompts), seed)
        guided = guidance_scale > 1.0
        negatives = [self.default_negative] * len(prompts) if negative_prompt is None else (
            [negative_prompt] * len(prompts) if isinstance(negative_prompt, str) else list(negative_prompt))
        if len(negatives) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(negatives)} negative prompts")
        C = self.channels
        for i, p in enumerate(prompts):
            cond = encode(p)
            uncond = encode(negatives[i]) if guided else None
            scheduler = make_scheduler(self.scheduler_config)
            x = np.ascontiguousarray(latents[i:i + 1])
            f0 = 1 if self.keeps_first_frame else 0
            for t in scheduler.set_timesteps(steps):
                v = self._velocity(x, t, *cond)
                if guided:
                    u = self._velocity(x, t, *uncond)
                    v = u + np.float32(guidance_scale) * (v - u)
                # the condition channels (and an image-to-video first frame) stay as they are
                x[:, f0:, ..., :C] = scheduler.step(v[:, f0:], x[:, f0:, ..., :C])
            latents[i] = x[0]
        return latents


class Kandinsky5TextToImage(_Kandinsky5):
    template, template_tokens, default_negative = IMAGE_TEMPLATE, 40, ""

    def __init__(self, model_dir: str, threads: int = 1, max_sequence_length: int = 512):
        super().__init__(model_dir, threads, max_sequence_length)
        self.vae = load_graph(os.path.join(model_dir, "vae_decoder.ms"), threads)
        self.vae_scale = 2 ** (len(self.vae_config.get("block_out_channels", [0] * 4)) - 1)

    @property
    def image_shape(self) -> tuple[int, int]:
        return self.latent_shape[1] * self.vae_scale, self.latent_shape[2] * self.vae_scale

    def __call__(self, prompt: str | Sequence[str], negative_prompt: str | Sequence[str] | None = None,
                 steps: int = 50, guidance_scale: float = 3.5, seed: int = 0, latents: np.ndarray | None = None,
                 output_type: str = "uint8") -> np.ndarray:
        """Images [B, H, W, 3] (uint8, or "float" in [0, 1]) or the final latents [B, 1, h, w, C] ("latent").
        Guidance runs when guidance_scale > 1, against `negative_prompt` (default ""), as diffusers does."""
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        return self._decode(self.denoise(prompts, negative_prompt, steps, guidance_scale, seed, latents), output_type)

    def _decode(self, latents: np.ndarray, output_type: str) -> np.ndarray:
        if output_type == "latent":
            return latents[..., :self.channels]
        z = latents[:, 0, ..., :self.channels].transpose(0, 3, 1, 2) / np.float32(self.scaling)
        images = self.vae.predict({"latents": np.ascontiguousarray(z, np.float32)})[0].get_data_to_numpy()
        images = np.clip(images / 2 + 0.5, 0.0, 1.0).transpose(0, 2, 3, 1)
        return images if output_type == "float" else np.round(images * 255).astype(np.uint8)


class Kandinsky5TextToVideo(_Kandinsky5):
    template, template_tokens, default_negative = VIDEO_TEMPLATE, 128, VIDEO_NEGATIVE

    def __init__(self, model_dir: str, threads: int = 1, max_sequence_length: int = 512):
        super().__init__(model_dir, threads, max_sequence_length)
        self.tiles = [tuple(t) for t in self.manifest["vae_tiles"]]
        self.tile_graphs = {n: load_graph(os.path.join(model_dir, f"vae_decoder_f{n}.ms"), threads)
                            for n in sorted({n for _, n in self.tiles})}
        self.temporal = int(self.vae_config.get("temporal_compression_ratio", 4))
        self.spatial = int(self.vae_config.get("spatial_compression_ratio", 8))

    @property
    def video_shape(self) -> tuple[int, int, int]:
        f, h, w = self.latent_shape[:3]
        return (f - 1) * self.temporal + 1, h * self.spatial, w * self.spatial

    def decode(self, latents: np.ndarray) -> np.ndarray:
        """[B, frames, h, w, C] latents -> [B, 3, F, H, W] in [-1, 1]: diffusers' temporal tiles (each decoded on its
        own), the first frame of every later tile dropped, the 4-frame overlap blended linearly, 12 frames kept per
        tile (13 of the first)."""
        z = np.ascontiguousarray(latents[..., :self.channels].transpose(0, 4, 1, 2, 3) / np.float32(self.scaling))
        decoded = []
        for i, (start, n) in enumerate(self.tiles):
            part = np.ascontiguousarray(z[:, :, start:start + n])
            out = self.tile_graphs[n].predict({"latents": part})[0].get_data_to_numpy()
            decoded.append(out[:, :, 1:] if i > 0 else out)
        if len(decoded) == 1:
            return decoded[0]
        stride, blend = 3 * self.temporal, self.temporal   # tile_sample_stride 12, min 16: 4 blended frames
        kept = []
        for i, tile in enumerate(decoded):
            if i > 0:
                prev, extent = decoded[i - 1], min(decoded[i - 1].shape[2], tile.shape[2], blend)
                for x in range(extent):   # in place, as diffusers' blend_t: the next tile blends with this one
                    tile[:, :, x] = prev[:, :, x - extent] * np.float32(1 - x / extent) + \
                        tile[:, :, x] * np.float32(x / extent)
                kept.append(tile[:, :, :stride])
            else:
                kept.append(tile[:, :, :stride + 1])
        return np.concatenate(kept, axis=2)[:, :, :self.video_shape[0]]

    def __call__(self, prompt: str | Sequence[str], negative_prompt: str | Sequence[str] | None = None,
                 steps: int = 50, guidance_scale: float = 5.0, seed: int = 0, latents: np.ndarray | None = None,
                 output_type: str = "uint8") -> np.ndarray:
        """Videos [B, F, H, W, 3] (uint8, or "float" in [0, 1]) or the final latents [B, frames, h, w, C] ("latent", without
        the condition channels, as diffusers returns them). The default negative prompt is diffusers' ("Static, 2D cartoon, ...")."""
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        latents = self.denoise(prompts, negative_prompt, steps, guidance_scale, seed, latents)
        return self._output(latents[..., :self.channels], output_type)

    def _output(self, latents: np.ndarray, output_type: str) -> np.ndarray:
        if output_type == "latent":
            return latents
        video = np.clip(self.decode(latents) / 2 + 0.5, 0.0, 1.0).transpose(0, 2, 3, 4, 1)
        return video if output_type == "float" else np.round(video * 255).astype(np.uint8)


def normalize_first_frames(latents: np.ndarray, count: int = 4, references: int = 5) -> np.ndarray:
    """Kandinsky5I2VPipeline.normalize_first_frame (its fix for mesh artifacts): the first `count` latent frames of
    each sample re-normalised to the mean / std (unbiased) of the next `references` frames of the whole batch, the
    change clamped (mean -0.05 .. +0.1, std -0.1 .. +0.25). Latents of `count` frames or fewer have no reference
    frames (diffusers' result is NaN there): they are returned unchanged."""
    if latents.shape[1] <= count:
        return latents
    out = latents.copy()
    first = latents[:, :count].astype(np.float64)
    ref = latents[:, count:count + min(references, latents.shape[1] - 1)]
    axes = tuple(range(1, latents.ndim))
    mean = first.mean(axis=axes, keepdims=True).astype(np.float32)
    std = first.std(axis=axes, ddof=1, keepdims=True).astype(np.float32)
    ref_mean = np.clip(np.float32(ref.astype(np.float64).mean()), mean - np.float32(0.05), mean + np.float32(0.1))
    ref_std = np.clip(np.float32(ref.astype(np.float64).std(ddof=1)), std - np.float32(0.1), std + np.float32(0.25))
    out[:, :count] = (latents[:, :count] - mean) / std * ref_std + ref_mean
    return out


class Kandinsky5ImageToVideo(Kandinsky5TextToVideo):
    """Image to video (Kandinsky5I2VPipeline): the image (Lanczos-resized to the video size, in [-1, 1]) encoded by
    the HunyuanVideo VAE encoder and sampled from its posterior (seeded) times scaling_factor becomes latent frame 0,
    the mask channel marks it (visual_cond), only frames 1.. are stepped, and the first four latent frames are
    re-normalised before decoding."""
    keeps_first_frame = True

    def __init__(self, model_dir: str, threads: int = 1, max_sequence_length: int = 512):
        super().__init__(model_dir, threads, max_sequence_length)
        self.vae_encoder = load_graph(os.path.join(model_dir, "vae_encoder.ms"), threads)

    def encode_image(self, image, seed: int = 0) -> np.ndarray:
        """[1, 1, h, w, C]: a sample of the image's posterior times scaling_factor."""
        from .wan_i2v import video_pixels
        _, height, width = self.video_shape
        pixels = video_pixels(image, height, width)[:, :, None]
        moments = self.vae_encoder.predict({"video": np.ascontiguousarray(pixels, np.float32)})[0].get_data_to_numpy()
        mean, logvar = np.split(moments, 2, axis=1)
        std = np.exp(np.float32(0.5) * np.clip(logvar, -30.0, 20.0))
        noise = np.random.default_rng(seed).standard_normal(mean.shape).astype(np.float32)
        return ((mean + std * noise) * np.float32(self.scaling)).transpose(0, 2, 3, 4, 1)

    def __call__(self, image, prompt: str | Sequence[str], negative_prompt: str | Sequence[str] | None = None,
                 steps: int = 50, guidance_scale: float = 5.0, seed: int = 0, latents: np.ndarray | None = None,
                 output_type: str = "uint8") -> np.ndarray:
        """Videos [B, F, H, W, 3] (uint8, or "float" in [0, 1]) or the final latents ("latent"). `latents`: the
        complete starting latents with their condition channels (as diffusers takes them: the image is then not
        encoded, frame 0 is the condition); default: noise from `seed` with the image in frame 0."""
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        if latents is None:
            latents = self._starting_latents(None, len(prompts), seed)
            latents[:, :1, ..., :self.channels] = self.encode_image(image, seed + 1)
            if self.latent_shape[-1] > self.channels:   # visual_cond: the mask channel marks frame 0
                latents[:, 0, ..., -1] = 1.0
        latents = self.denoise(prompts, negative_prompt, steps, guidance_scale, seed, latents)
        return self._output(normalize_first_frames(latents[..., :self.channels]), output_type)


class Kandinsky5ImageToImage(Kandinsky5TextToImage):
    """Image to image (Kandinsky5I2IPipeline): the source image goes into Qwen2.5-VL's prompt (after the instruction;
    resized to half its size, then the Qwen2-VL processor's resize and patches, through the vision tower, 3-D
    positions; the states from the template's 54th token on, the image's included) and into the latents (Lanczos-
    resized to the output size, the AutoencoderKL encoder's posterior sampled (seeded) times scaling_factor, beside
    the noise with a channel of ones: [noise, image, 1], never stepped). The directory is converted for one output
    size; the image must give it (its own size, or diffusers' nearest trained resolution) and the vision tower's patch
    grid at half its size."""
    template, template_tokens, default_negative = I2I_TEMPLATE, 54, ""

    def __init__(self, model_dir: str, threads: int = 1, max_sequence_length: int = 1024):
        self.vision_tokens = int(read_json(os.path.join(model_dir, "model_zoo.json"))["vision_tokens"])
        super().__init__(model_dir, threads, max_sequence_length)   # (diffusers: image tokens included)
        self.vision = load_graph(os.path.join(model_dir, "vision_encoder.ms"), threads)
        self.vae_encoder = load_graph(os.path.join(model_dir, "vae_encoder.ms"), threads)
        self.processor_config = read_json(os.path.join(model_dir, "vision_processor_config.json"))
        self.grid = tuple(int(v) for v in self.manifest["vision_grid"])
        text = read_json(os.path.join(model_dir, "text_encoder_config.json"))
        self.image_token_id = int(text["image_token_id"])
        self.merge = int((text.get("vision_config") or {}).get("spatial_merge_size", 2))

    def output_size(self, image) -> tuple[int, int]:
        """(height, width) diffusers renders for this image: its size if trained at or converted for, else the
        nearest trained aspect ratio; it must be this directory's."""
        from .wan_i2v import load_rgb
        im = load_rgb(image)
        sizes = list(RESOLUTIONS) + [(self.image_shape[1], self.image_shape[0])]
        w, h = (im.width, im.height) if (im.width, im.height) in sizes else \
            RESOLUTIONS[int(np.argmin([abs(a / b - im.width / im.height) for a, b in RESOLUTIONS]))]
        if (h, w) != self.image_shape:
            raise ValueError(f"a {im.width}x{im.height} image renders at {w}x{h}; this directory was converted for "
                             f"{self.image_shape[1]}x{self.image_shape[0]}")
        return h, w

    def image_rows(self, image) -> tuple[np.ndarray, tuple[int, int, int]]:
        """(vision tower rows [tokens, hidden], patch grid) of the image at half its size, as diffusers prompts it."""
        from ..qwen2_vl_image import qwen2_vl_pixels
        from .wan_i2v import load_rgb
        im = load_rgb(image)
        half = im.resize((im.width // 2, im.height // 2))   # PIL's default filter, as diffusers resizes it
        pixels, grid = qwen2_vl_pixels(half, self.processor_config)
        if tuple(grid) != self.grid:
            raise ValueError(f"a {im.width}x{im.height} image gives the patch grid {list(grid)} at half size; the "
                             f"vision tower was built for {list(self.grid)} (convert for this image's size)")
        return self.vision.predict({"pixel_values": pixels})[0].get_data_to_numpy(), grid

    def encode_image(self, image, seed: int = 0) -> np.ndarray:
        """[1, 1, h, w, C]: a sample of the image's posterior (seeded) times scaling_factor."""
        from .wan_i2v import video_pixels
        height, width = self.output_size(image)
        moments = self.vae_encoder.predict({"images": video_pixels(image, height, width)})[0].get_data_to_numpy()
        mean, logvar = np.split(moments, 2, axis=1)
        std = np.exp(np.float32(0.5) * np.clip(logvar, -30.0, 20.0))
        noise = np.random.default_rng(seed).standard_normal(mean.shape).astype(np.float32)
        return ((mean + std * noise) * np.float32(self.scaling)).transpose(0, 2, 3, 1)[:, None]

    def __call__(self, image, prompt: str | Sequence[str], negative_prompt: str | Sequence[str] | None = None,
                 steps: int = 50, guidance_scale: float = 3.5, seed: int = 0, latents: np.ndarray | None = None,
                 output_type: str = "uint8") -> np.ndarray:
        """Images [B, H, W, 3] (uint8, or "float" in [0, 1]) or the final latents [B, 1, h, w, C] ("latent").
        `latents`: the complete starting latents [noise, image latents, ones] (as diffusers takes them: the image
        is then not encoded into them, only prompted); default: noise from `seed` and the image's posterior sample."""
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        self.output_size(image)
        if latents is None:
            latents = self._starting_latents(None, len(prompts), seed)
            C = self.channels
            latents[..., C:2 * C] = self.encode_image(image, seed + 1)
            latents[..., 2 * C:] = 1.0
        rows = self.image_rows(image)
        latents = self.denoise(prompts, negative_prompt, steps, guidance_scale, seed, latents,
                               encode=lambda p: self.encode_prompt(p, rows))
        return self._decode(latents, output_type)
