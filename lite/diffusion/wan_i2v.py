"""Image-to-video with Wan 2.1 I2V and Wan 2.2 I2V A14B on the runtime: diffusers' WanImageToVideoPipeline recipe
without torch. Beside the text-to-video directory (lite.diffusion.wan) a converted I2V directory holds the VAE
encoder's two time-slice graphs and, for Wan 2.1, the CLIP vision tower (its penultimate states, `image_context`)
with the image processor's settings.

The first frame enters twice: (1) the VAE encodes a video made of the image and black frames (the image last too for
first-last-frame), normalised with the latents' mean / std, and a 4-channel mask marks the latent slots that hold a
given frame; mask and image latents join the noise's channels at every step (16 + 4 + 16 = 36 for Wan); (2) Wan
2.1's DiT also attends to CLIP's states of the image (224 x 224, the processor's resize, centre crop and
normalisation). The image is resized to the video's size with Lanczos, as diffusers' VideoProcessor does.

Wan 2.2 TI2V-5B (expand_timesteps) conditions differently: the image alone is encoded (one latent frame) and
replaces latent frame 0 before every step and at the end, its tokens at timestep 0 (the DiT takes a timestep per
token); its directory is a text-to-video one with the VAE encoder added, so the image is optional."""
from __future__ import annotations

import os
from typing import Iterator, Sequence

import numpy as np

from .wan import WanTextToVideo, load_graph, read_json, run_time_slices

ENCODER_GRAPHS = {"vae_encoder_first": "vae_encoder_first.ms", "vae_encoder": "vae_encoder.ms"}
IMAGE_ENCODER = "image_encoder.ms"
IMAGE_PROCESSOR = "image_processor_config.json"


def load_rgb(image):
    """A PIL image (made RGB), from a path, a PIL image or a uint8 [H, W, 3] array."""
    try:
        from PIL import Image
    except ImportError:
        raise RuntimeError("image to video reads its image with Pillow (pip install pillow)") from None
    if isinstance(image, (str, os.PathLike)):
        with Image.open(image) as im:
            return im.convert("RGB")
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"an image array must be uint8 [height, width, 3], not {image.dtype} {list(image.shape)}")
        return Image.fromarray(image)
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    raise TypeError(f"an image is a path, a PIL image or a uint8 array, not {type(image).__name__}")


def video_pixels(image, height: int, width: int) -> np.ndarray:
    """[1, 3, height, width] in [-1, 1]: diffusers' VideoProcessor.preprocess of a PIL image (Lanczos resize)."""
    from PIL import Image
    im = load_rgb(image).resize((width, height), resample=Image.LANCZOS)
    return (np.asarray(im, np.float32) / 255.0 * 2.0 - 1.0).transpose(2, 0, 1)[None]


def clip_pixels(image, config: dict) -> np.ndarray:
    """[1, 3, crop, crop]: a CLIPImageProcessor's resize (shortest edge), centre crop, rescale and normalise, as
    transformers' PIL backend computes them."""
    im = load_rgb(image)
    size = config.get("size", {"shortest_edge": 224})
    if config.get("do_resize", True):
        if "shortest_edge" in size:
            edge = int(size["shortest_edge"])
            w, h = im.size
            short, long = (w, h) if w <= h else (h, w)
            new_short, new_long = edge, int(edge * long / short)
            new_h, new_w = (new_long, new_short) if w <= h else (new_short, new_long)
        else:
            new_h, new_w = int(size["height"]), int(size["width"])
        im = im.resize((new_w, new_h), resample=int(config.get("resample", 3)))
    x = np.asarray(im).transpose(2, 0, 1)
    if config.get("do_center_crop", True):
        crop = config.get("crop_size", {"height": 224, "width": 224})
        ch, cw = int(crop["height"]), int(crop["width"])
        h, w = x.shape[1:]
        if h < ch or w < cw:
            raise NotImplementedError(f"a {h}x{w} image after resizing is smaller than the {ch}x{cw} crop "
                                      "(the processor's padding is not reproduced)")
        top, left = (h - ch) // 2, (w - cw) // 2
        x = x[:, top:top + ch, left:left + cw]
    x = x.astype(np.float32)
    if config.get("do_rescale", True):
        x = (x.astype(np.float64) * float(config.get("rescale_factor", 1 / 255))).astype(np.float32)
    if config.get("do_normalize", True):
        mean = np.array(config.get("image_mean", [0.48145466, 0.4578275, 0.40821073]), np.float32).reshape(-1, 1, 1)
        std = np.array(config.get("image_std", [0.26862954, 0.26130258, 0.27577711]), np.float32).reshape(-1, 1, 1)
        x = (x - mean) / std
    return np.ascontiguousarray(x[None], dtype=np.float32)


def first_frame_mask(latent_frames: int, height: int, width: int, temporal_scale: int,
                     last_frame: bool = False) -> np.ndarray:
    """[1, temporal_scale, latent_frames, height, width]: 1 where a latent slot holds a given frame. diffusers
    repeats the first pixel frame temporal_scale times, so slot (frame j, channel c) covers pixel frame
    max(0, j * temporal_scale + c - temporal_scale + 1)."""
    frames = (latent_frames - 1) * temporal_scale + 1
    slot = np.arange(latent_frames)[None, :] * temporal_scale + np.arange(temporal_scale)[:, None]
    pixel = np.maximum(0, slot - temporal_scale + 1)
    given = (pixel == 0) | (last_frame & (pixel == frames - 1))
    return np.broadcast_to(given.astype(np.float32)[None, :, :, None, None],
                           (1, temporal_scale, latent_frames, height, width)).copy()


class WanImageToVideo(WanTextToVideo):
    def __init__(self, model_dir: str, threads: int = 1, max_sequence_length: int = 512):
        super().__init__(model_dir, threads, max_sequence_length)
        for key, name in ENCODER_GRAPHS.items():
            self.models[key] = load_graph(os.path.join(model_dir, name), threads)
        self.image_processor = None
        if os.path.isfile(os.path.join(model_dir, IMAGE_ENCODER)):
            self.models["image_encoder"] = load_graph(os.path.join(model_dir, IMAGE_ENCODER), threads)
            self.image_processor = read_json(os.path.join(model_dir, IMAGE_PROCESSOR))
        if ("image_encoder" in self.models) != self.takes_image_states:
            raise ValueError(f"{model_dir}: the transformer {'takes' if self.takes_image_states else 'takes no'} CLIP "
                             f"image states but the directory has {'no' if self.takes_image_states else 'an'} "
                             "image encoder")

    def _check_transformer(self, dit_inputs: dict) -> None:
        self.takes_image_states = "encoder_hidden_states_image" in dit_inputs
        if self.expand_timesteps:   # Wan 2.2 TI2V: the image's latents replace frame 0; no condition channels
            if self.condition_channels:
                raise ValueError(f"{self.dir}: a timestep-per-token (TI2V) transformer takes no condition channels")
            return
        want = self.temporal_scale + self.latent_shape[0]   # the mask, then the image latents
        if self.condition_channels != want:
            raise ValueError(f"{self.dir}: an image-to-video transformer takes {self.latent_shape[0]} + {want} "
                             f"channels, this one {self.latent_shape[0] + self.condition_channels}")

    def encode_image(self, image, last_image=None) -> np.ndarray:
        """CLIP's penultimate states of the image [1, tokens, dim] (Wan 2.1)."""
        if last_image is not None:
            raise NotImplementedError("first-last-frame with a CLIP image encoder (Wan FLF2V's two-image position "
                                      "embedding) is not built")
        pixels = clip_pixels(image, self.image_processor)
        return self.models["image_encoder"].predict({"pixel_values": pixels})[0].get_data_to_numpy()

    def encode_condition(self, image, last_image=None) -> np.ndarray:
        """[1, temporal_scale + C, F, h, w]: the first-frame mask and the normalised VAE latents of the image
        followed by black frames (and the last image, when given), encoded a time slice at a time (frame 0, then
        4 frames a call, the caches carried: memory bounded by one slice)."""
        frames, height, width = self.video_shape
        first = video_pixels(image, height, width)
        last = None if last_image is None else video_pixels(last_image, height, width)

        step = int(self.models["vae_encoder"].get_inputs()[0].shape[2])   # 4, as diffusers' encode slices
        if (frames - 1) % step:
            raise ValueError(f"{frames} frames: the VAE encoder takes frame 0, then {step} frames a call")

        def slices() -> Iterator[np.ndarray]:
            yield first[:, :, None]
            for start in range(1, frames, step):
                chunk = np.zeros((1, 3, step, height, width), np.float32)
                if last is not None and start + step == frames:
                    chunk[:, :, -1] = last
                yield chunk
        latents = np.concatenate(run_time_slices(self.models["vae_encoder_first"], self.models["vae_encoder"],
                                                 slices(), "video", "latents"), axis=2)
        latents = (latents - self.latents_mean) / self.latents_std
        _, f, h, w = self.latent_shape
        mask = first_frame_mask(f, h, w, self.temporal_scale, last_frame=last is not None)
        return np.concatenate([mask, latents.astype(np.float32)], axis=1)

    def __call__(self, image, prompt: str | Sequence[str], negative_prompt: str | Sequence[str] = "",
                 steps: int = 50, guidance_scale: float = 5.0, seed: int = 0, latents: np.ndarray | None = None,
                 output_type: str = "uint8", guidance_scale_2: float | None = None, last_image=None) -> np.ndarray:
        """Videos [B, frames, H, W, 3] that start from `image` (a path, PIL image or uint8 array; every prompt
        starts from it), and end at `last_image` when given (Wan 2.2 I2V's form, no CLIP)."""
        if self.expand_timesteps:   # Wan 2.2 TI2V
            if last_image is not None:
                raise NotImplementedError("a last frame with Wan 2.2 TI2V (its pipeline conditions on the first only)")
            return self._generate(prompt, negative_prompt, steps, guidance_scale, seed, latents, output_type,
                                  guidance_scale_2, first_frame=self.encode_first_frame(image))
        condition = self.encode_condition(image, last_image)
        states = self.encode_image(image, last_image) if self.takes_image_states else None
        return self._generate(prompt, negative_prompt, steps, guidance_scale, seed, latents, output_type,
                              guidance_scale_2, condition=condition, image_states=states)

    def encode_first_frame(self, image) -> np.ndarray:
        """[1, C, 1, h, w]: the image alone through the VAE encoder's first slice, normalised (Wan 2.2 TI2V)."""
        _, height, width = self.video_shape
        pixels = video_pixels(image, height, width)[:, :, None]
        latents = self.models["vae_encoder_first"].predict({"video": pixels})[0].get_data_to_numpy()
        return ((latents - self.latents_mean) / self.latents_std).astype(np.float32)
