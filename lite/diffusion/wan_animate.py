"""Character animation with Wan 2.2 Animate on the runtime: diffusers' WanAnimatePipeline recipe (mode "animate")
without torch. A converted directory holds what a Wan 2.1 I2V directory holds (UMT5, the CLIP vision tower, the
VAE's encoder and decoder time slices) with Animate's transformer (`transformer.ms`, built for one segment: the
reference frame + (segment - 1) / 4 + 1 latent frames) and its face encoder (`face_encoder.ms`).

The reference image is resized into the video's size without distortion (black bars: diffusers'
WanAnimateImageProcessor "fill"), its CLIP states feed the image cross-attention and its VAE latent (with an all-ones
mask) is the first latent frame of every segment's condition. The pose and face videos are padded to whole segments
by reflection; the video is made segment by segment (77 frames, overlapping by `prev_segment_conditioning_frames`):
each segment's pose frames through the VAE encoder feed the pose embedding, its face frames (at the motion encoder's
size) the face encoder once (and frames of -1 for the unconditional pass), and the previous segment's last decoded
frames (zeros for the first) through the VAE encoder, masked where given, condition the frames after the reference.
The latents' reference frame is dropped before decoding, the overlap frames of later segments too. Replacement mode
(background and mask videos) is not built."""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from .wan import load_graph, run_time_slices
from .wan_i2v import WanImageToVideo, load_rgb

FACE_ENCODER = "face_encoder.ms"


def fill_pixels(image, height: int, width: int) -> np.ndarray:
    """[1, 3, height, width] in [-1, 1]: the image resized to fit (aspect kept) and centred on black, as diffusers'
    WanAnimateImageProcessor (resize_mode "fill", fill_color 0) prepares the reference image: with Lanczos, since
    its constructor re-registers VaeImageProcessor's defaults over the "bilinear" the pipeline asks for."""
    from PIL import Image
    im = load_rgb(image)
    ratio, src_ratio = width / height, im.width / im.height
    src_w = width if ratio < src_ratio else im.width * height // im.height
    src_h = height if ratio >= src_ratio else im.height * width // im.width
    canvas = Image.new("RGB", (width, height), color=0)
    canvas.paste(im.resize((src_w, src_h), resample=Image.LANCZOS), box=(width // 2 - src_w // 2,
                                                                         height // 2 - src_h // 2))
    return (np.asarray(canvas, np.float32) / 255.0 * 2.0 - 1.0).transpose(2, 0, 1)[None]


def frames_pixels(frames: Sequence, height: int, width: int) -> np.ndarray:
    """[1, 3, len(frames), height, width] in [-1, 1]: each frame resized (Lanczos), as diffusers' VideoProcessor."""
    from PIL import Image
    out = [np.asarray(load_rgb(f).resize((width, height), resample=Image.LANCZOS), np.float32) for f in frames]
    return (np.stack(out) / 255.0 * 2.0 - 1.0).transpose(3, 0, 1, 2)[None].astype(np.float32)


def read_frames(path: str) -> list:
    """A video's frames as PIL images: every frame of a .gif (or other multi-frame picture), or the pictures of a
    folder in name order."""
    from PIL import Image, ImageSequence
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if n.lower().endswith((".png", ".jpg", ".jpeg", ".webp", ".bmp")))
        if not names:
            raise ValueError(f"{path}: no picture files")
        return [load_rgb(os.path.join(path, n)) for n in names]
    with Image.open(path) as im:
        return [frame.convert("RGB") for frame in ImageSequence.Iterator(im)]


def reflect_pad(frames: Sequence, count: int) -> list:
    """diffusers' pad_video_frames: the frames, then back and forth over them, until `count`."""
    if len(frames) == 1:
        return [frames[0]] * count
    out, i, step = [], 0, 1
    while len(out) < count:
        out.append(frames[i])
        i += step
        if i == 0 or i == len(frames) - 1:
            step = -step
    return out


def given_frames_mask(latent_frames: int, height: int, width: int, temporal: int, given: int) -> np.ndarray:
    """[1, temporal, latent_frames, h, w]: 1 where a latent slot holds one of the first `given` pixel frames (the
    first pixel frame repeated `temporal` times, as diffusers' get_i2v_mask lays them out)."""
    slot = np.arange(latent_frames)[None, :] * temporal + np.arange(temporal)[:, None]
    pixel = np.maximum(0, slot - temporal + 1)
    return np.broadcast_to((pixel < given).astype(np.float32)[None, :, :, None, None],
                           (1, temporal, latent_frames, height, width)).copy()


class WanAnimate(WanImageToVideo):
    def __init__(self, model_dir: str, threads: int = 1, max_sequence_length: int = 512):
        super().__init__(model_dir, threads, max_sequence_length)
        self.models["face_encoder"] = load_graph(os.path.join(model_dir, FACE_ENCODER), threads)
        face = self.models["face_encoder"].get_inputs()[0]
        self.face_size = int(face.shape[-1])
        if not self.takes_image_states:
            raise ValueError(f"{model_dir}: Animate's transformer attends to the reference image's CLIP states")

    @property
    def segment_frames(self) -> int:
        """Pixel frames per segment: the latent frames after the reference one decode to these."""
        return (self.latent_shape[1] - 2) * self.temporal_scale + 1

    @property
    def video_shape(self) -> tuple[int, int, int]:
        _, f, h, w = self.latent_shape
        return self.segment_frames, h * self.spatial_scale, w * self.spatial_scale

    def encode_video(self, pixels: np.ndarray) -> np.ndarray:
        """Normalised VAE latents (posterior means) [1, C, 1 + (F - 1) / 4, h, w] of pixels [1, 3, F, H, W]: frame
        0, then 4 frames a call, the caches carried."""
        step = int(self.models["vae_encoder"].get_inputs()[0].shape[2])
        chunks = [pixels[:, :, :1]] + [pixels[:, :, s:s + step] for s in range(1, pixels.shape[2], step)]
        latents = np.concatenate(run_time_slices(self.models["vae_encoder_first"], self.models["vae_encoder"],
                                                 chunks, "video", "latents"), axis=2)
        return ((latents - self.latents_mean) / self.latents_std).astype(np.float32)

    def reference_condition(self, image) -> np.ndarray:
        """[1, temporal + C, 1, h, w]: an all-ones mask and the reference image's latent."""
        _, height, width = self.video_shape
        latent = self.encode_video(fill_pixels(image, height, width)[:, :, None])
        _, _, h, w = self.latent_shape
        return np.concatenate([np.ones((1, self.temporal_scale, 1, h, w), np.float32), latent], axis=1)

    def motion(self, face: np.ndarray) -> np.ndarray:
        return self.models["face_encoder"].predict({"face_pixel_values": face})[0].get_data_to_numpy()

    def __call__(self, image, pose_video: Sequence, face_video: Sequence, prompt: str | Sequence[str],
                 negative_prompt: str | Sequence[str] = "", steps: int = 20, guidance_scale: float = 1.0,
                 seed: int = 0, latents: np.ndarray | None = None, output_type: str = "uint8",
                 prev_segment_conditioning_frames: int = 1, mode: str = "animate") -> np.ndarray:
        """Videos [B, len(pose_video), H, W, 3] (uint8, or "float" in [0, 1]; "latent": the last segment's latents,
        de-normalised as diffusers returns them)
        of the reference `image` moving as the pose and face videos (lists of frames: paths, PIL images or uint8
        arrays) show. `latents`: the first segment's starting noise [B, C, F, h, w] (later segments draw theirs from
        `seed`). Guidance runs when guidance_scale > 1 (diffusers' default is 1: none)."""
        if mode != "animate":
            raise NotImplementedError("Wan Animate's replacement mode (background and mask videos) is not built")
        if output_type not in ("uint8", "float", "latent"):
            raise ValueError(f"output_type is uint8, float or latent, not {output_type!r}")
        if prev_segment_conditioning_frames not in (1, 5):
            raise ValueError("prev_segment_conditioning_frames is 1 or 5, as diffusers allows")
        if len(pose_video) != len(face_video) or not pose_video:
            raise ValueError(f"{len(pose_video)} pose frames and {len(face_video)} face frames: one each per frame")
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        negatives = [negative_prompt] * len(prompts) if isinstance(negative_prompt, str) else list(negative_prompt)
        if len(negatives) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(negatives)} negative prompts")
        B, prev = len(prompts), prev_segment_conditioning_frames
        seg, (_, height, width) = self.segment_frames, self.video_shape
        if len(pose_video) <= prev:
            raise ValueError(f"{len(pose_video)} frames: more than the {prev} conditioning frames are needed")
        effective = seg - prev
        remainder = (len(pose_video) - prev) % effective
        target = len(pose_video) + (effective - remainder if remainder else 0)
        pose = frames_pixels(reflect_pad(list(pose_video), target), height, width)
        face = frames_pixels(reflect_pad(list(face_video), target), self.face_size, self.face_size)

        cond = self.encode_prompt(prompts)
        guided = guidance_scale > 1.0
        uncond = self.encode_prompt(negatives) if guided else None
        states = np.repeat(self.encode_image(image), B, axis=0)
        reference = self.reference_condition(image)
        rng = np.random.default_rng(seed)
        shape = (B, *self.latent_shape)
        _, f, h, w = self.latent_shape
        outputs, previous, start = [], None, 0
        while start + prev < len(pose_video):
            end = start + seg
            if start == 0 and latents is not None:
                if tuple(latents.shape) != shape:
                    raise ValueError(f"latents {list(latents.shape)} do not match this directory's {list(shape)}")
                x = np.array(latents, np.float32)
            else:
                x = rng.standard_normal(shape).astype(np.float32)
            pose_latents = np.repeat(self.encode_video(pose[:, :, start:end]), B, axis=0)
            motion = np.repeat(self.motion(face[:, :, start:end]), B, axis=0)
            extra = {"pose_hidden_states": (pose_latents, pose_latents)}
            if guided:
                extra["motion_vec"] = (motion, np.repeat(self.motion(np.full_like(face[:, :, start:end], -1.0)), B,
                                                         axis=0))
            else:
                extra["motion_vec"] = (motion, None)
            condition = []
            for b in range(B):   # the previous segment's last frames, then zeros, through the VAE encoder
                video = np.zeros((1, 3, seg, height, width), np.float32)
                if previous is not None:
                    video[:, :, :prev] = previous[b:b + 1, :, -prev:]
                mask = given_frames_mask(f - 1, h, w, self.temporal_scale, prev if start > 0 else 0)
                prior = np.concatenate([mask, self.encode_video(video)], axis=1)
                condition.append(np.concatenate([reference, prior], axis=2))
            x = self.denoise(x, cond, uncond, steps, guidance_scale, condition=np.concatenate(condition),
                             image_states=states, extra=extra)
            frames = self.decode(x[:, :, 1:])
            previous = frames
            outputs.append(frames[:, :, prev:] if start > 0 else frames)
            latents_out = x
            start += effective
        if output_type == "latent":   # as diffusers returns them: de-normalised for the VAE
            return latents_out * self.latents_std + self.latents_mean
        video = np.concatenate(outputs, axis=2)[:, :, :len(pose_video)]
        video = np.clip(video / 2 + 0.5, 0.0, 1.0).transpose(0, 2, 3, 4, 1)
        return video if output_type == "float" else np.round(video * 255).astype(np.uint8)
