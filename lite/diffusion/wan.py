"""Text-to-video with Wan 2.1 on the runtime: a converted directory (model_zoo convert) holds the UMT5 text encoder,
the DiT (built for one latent size), the VAE decoder's two time-slice graphs, the tokenizer and the configs; this
module runs diffusers' WanPipeline recipe on them without torch: prompt cleaning and T5 tokenisation, the text
states cut at each prompt's length and zero-padded to `max_sequence_length`, classifier-free guidance (conditional
and unconditional rows in one batch of the DiT), the scheduler (lite.diffusion.schedulers), latents de-normalised
with the VAE's per-channel mean / std, and the VAE decoded one latent frame at a time with its caches."""
from __future__ import annotations

import html
import json
import os
import re
from typing import Iterable, Sequence

import numpy as np

from .. import Context, Model, ModelType
from .schedulers import make_scheduler, read_scheduler_config

GRAPHS = {"text_encoder": "text_encoder.ms", "transformer": "transformer.ms",
          "vae_decoder_first": "vae_decoder_first.ms", "vae_decoder": "vae_decoder.ms"}


def prompt_clean(text: str) -> str:
    """diffusers' Wan prompt cleaning (ftfy's fixes when it is installed, HTML entities, whitespace)."""
    try:
        import ftfy
        text = ftfy.fix_text(text)
    except ImportError:
        pass
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


def load_graph(path: str, threads: int) -> Model:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing: convert the model with `python -m model_zoo convert`")
    ctx = Context()
    ctx.cpu.thread_num = threads
    m = Model()
    m.build_from_file(path, ModelType.MINDIR_LITE, ctx)
    return m


def read_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def starting_noise(latents: np.ndarray | None, shape: tuple, seed: int, network: str) -> np.ndarray:
    """A copy of the given initial latents, checked against the size the `network` graph is built for, or standard
    normal noise from `seed`."""
    if latents is None:
        return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    if tuple(latents.shape) != tuple(shape):
        raise ValueError(f"latents {list(latents.shape)} do not match this directory's {list(shape)} (the {network} "
                         "is built for one latent size)")
    return np.array(latents, np.float32)


def run_time_slices(first: Model, nxt: Model, chunks: Iterable[np.ndarray], input_name: str,
                    output_name: str) -> list[np.ndarray]:
    """Runs the Wan VAE's time-slice graphs (model_zoo/generation/wan_vae_graph.py) over `chunks` in order: `first` on chunk
    0, `nxt` on the others, each call's cache_out.K fed back as the next call's cache.K (a cache the first slice does
    not write starts as zeros). Returns each call's `output_name`."""
    outputs, caches = [], {}
    for i, chunk in enumerate(chunks):
        model = first if i == 0 else nxt
        feeds = {input_name: np.ascontiguousarray(chunk, dtype=np.float32)}
        for inp in model.get_inputs():
            if inp.name != input_name:
                cache = caches.get(inp.name)
                feeds[inp.name] = cache if cache is not None else np.zeros([len(chunk), *inp.shape[1:]], np.float32)
        result = {o.name: t.get_data_to_numpy() for o, t in zip(model.get_outputs(), model.predict(feeds))}
        outputs.append(result.pop(output_name))
        caches = {n.replace("cache_out.", "cache.", 1): v for n, v in result.items()}
    return outputs


class WanTextToVideo:
    def __init__(self, model_dir: str, threads: int = 1, max_sequence_length: int = 512):
        from tokenizers import Tokenizer
        self.dir = model_dir
        self.models = {k: load_graph(os.path.join(model_dir, f), threads) for k, f in GRAPHS.items()}
        index_path = os.path.join(model_dir, "model_index.json")
        index = read_json(index_path) if os.path.isfile(index_path) else {}
        # Wan 2.2 A14B: the low-noise expert takes the steps below boundary_ratio * num_train_timesteps
        self.boundary_ratio = index.get("boundary_ratio")
        if os.path.isfile(os.path.join(model_dir, "transformer_2.ms")):
            self.models["transformer_2"] = load_graph(os.path.join(model_dir, "transformer_2.ms"), threads)
        if self.boundary_ratio is not None and "transformer_2" not in self.models:
            raise FileNotFoundError(f"{model_dir}: model_index.json sets boundary_ratio but transformer_2.ms is missing")
        tok = os.path.join(model_dir, "tokenizer", "tokenizer.json")
        if not os.path.isfile(tok):
            raise FileNotFoundError(f"{tok} is missing (the T5 tokenizer's fast form)")
        self.tokenizer = Tokenizer.from_file(tok)
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_sequence_length)
        self.max_sequence_length = max_sequence_length
        self.scheduler_config = read_scheduler_config(model_dir)
        vae = read_json(os.path.join(model_dir, "vae_config.json"))
        z = int(vae.get("z_dim", 16))
        self.latents_mean = np.array(vae.get("latents_mean", [0.0] * z), np.float32).reshape(1, z, 1, 1, 1)
        self.latents_std = np.array(vae.get("latents_std", [1.0] * z), np.float32).reshape(1, z, 1, 1, 1)
        down = list(vae.get("temperal_downsample", [False, True, True]))
        self.temporal_scale = 2 ** sum(bool(d) for d in down)   # the VAE's geometry (its config's scale factors)
        self.spatial_scale = 2 ** len(down) * int(vae.get("patch_size") or 1)
        # Wan 2.2 TI2V: a timestep per token (0 on a given first frame's tokens)
        self.expand_timesteps = bool(index.get("expand_timesteps"))
        dit_inputs = {i.name: i for i in self.models["transformer"].get_inputs()}
        x = dit_inputs["hidden_states"]
        self.latent_shape = (z, *(int(v) for v in x.shape[2:]))   # (C, F, H, W) of the noise
        self.condition_channels = int(x.shape[1]) - z
        self.text_dim = int(dit_inputs["encoder_hidden_states"].shape[2])
        self._check_transformer(dit_inputs)

    def _check_transformer(self, dit_inputs: dict) -> None:
        if self.condition_channels:
            raise ValueError(f"{self.dir}: the transformer takes {self.condition_channels} condition channels beside "
                             "the latents: an image-to-video model (lite.diffusion.wan_i2v.WanImageToVideo)")

    @property
    def video_shape(self) -> tuple[int, int, int]:
        """(frames, height, width) of the videos this directory renders."""
        _, f, h, w = self.latent_shape
        return (f - 1) * self.temporal_scale + 1, h * self.spatial_scale, w * self.spatial_scale

    def encode_prompt(self, prompts: Sequence[str]) -> np.ndarray:
        """[len(prompts), max_sequence_length, text_dim]: each prompt's states, zeros past its tokens."""
        out = np.zeros((len(prompts), self.max_sequence_length, self.text_dim), np.float32)
        for i, text in enumerate(prompts):
            ids = np.array([self.tokenizer.encode(prompt_clean(text)).ids], np.int64)
            # the padding diffusers adds is masked out: the real rows are the same without it
            states = self.models["text_encoder"].predict({"input_ids": ids, "attention_mask": np.ones_like(ids)})
            out[i, :ids.shape[1]] = states[0].get_data_to_numpy()[0]
        return out

    def denoise(self, latents: np.ndarray, cond: np.ndarray, uncond: np.ndarray | None, steps: int,
                guidance_scale: float, callback=None, guidance_scale_2: float | None = None,
                condition: np.ndarray | None = None, image_states: np.ndarray | None = None,
                first_frame: np.ndarray | None = None, extra: dict | None = None) -> np.ndarray:
        """`guidance_scale_2`: the low-noise expert's scale (Wan 2.2 A14B; default `guidance_scale`). Image to video:
        `condition` (mask and image latents, [B, 4 + C, F, h, w]) joins the latents' channels at every step, and
        `image_states` (CLIP's, [B, tokens, dim]) feed the DiT's image cross-attention; Wan 2.2 TI2V's
        `first_frame` (the image's latents [B, C, 1, h, w]) replaces latent frame 0 before every step and at the
        end, its tokens at timestep 0. `extra`: more DiT inputs, name -> (conditional, unconditional or None: the
        same) rows (Wan Animate's pose latents and motion features)."""
        scheduler = make_scheduler(self.scheduler_config)
        timesteps = scheduler.set_timesteps(steps)
        batch = latents.shape[0]
        guided = uncond is not None and guidance_scale > 1.0   # diffusers decides on the first scale alone
        text = np.concatenate([cond, uncond]) if guided else cond
        boundary = None
        if self.boundary_ratio is not None:
            boundary = self.boundary_ratio * scheduler.train_steps
        _, f, h, w = self.latent_shape
        frame_tokens = (h // 2) * (w // 2)   # the DiT's (1, 2, 2) patches of one latent frame
        for i, t in enumerate(timesteps):
            high_noise = boundary is None or t >= boundary
            dit = self.models["transformer" if high_noise else "transformer_2"]
            scale = guidance_scale if high_noise or guidance_scale_2 is None else guidance_scale_2
            if first_frame is not None:
                latents[:, :, :1] = first_frame
            x = latents if condition is None else np.concatenate([latents, condition], axis=1)
            x = np.concatenate([x, x]) if guided else x
            if self.expand_timesteps:
                timestep = np.full((x.shape[0], f * frame_tokens), t, np.float32)
                if first_frame is not None:
                    timestep[:, :frame_tokens] = 0.0
            else:
                timestep = np.full(x.shape[0], t, np.float32)
            feeds = {"hidden_states": x, "timestep": timestep, "encoder_hidden_states": text}
            if image_states is not None:
                feeds["encoder_hidden_states_image"] = (np.concatenate([image_states, image_states]) if guided
                                                        else image_states)
            for name, (c, u) in (extra or {}).items():
                feeds[name] = np.concatenate([c, c if u is None else u]) if guided else c
            pred = dit.predict(feeds)[0].get_data_to_numpy()
            if guided:
                pred = pred[batch:] + np.float32(scale) * (pred[:batch] - pred[batch:])
            latents = scheduler.step(pred, latents)
            if callback is not None:
                callback(i, int(t), latents)
        if first_frame is not None:
            latents[:, :, :1] = first_frame
        return latents

    def decode(self, latents: np.ndarray) -> np.ndarray:
        """[B, 3, frames, H, W] in [-1, 1] from normalised latents [B, C, F, h, w], one latent frame per call."""
        z = np.ascontiguousarray(latents * self.latents_std + self.latents_mean, dtype=np.float32)
        chunks = [z[:, :, i:i + 1] for i in range(z.shape[2])]
        frames = run_time_slices(self.models["vae_decoder_first"], self.models["vae_decoder"], chunks, "latents",
                                 "frames")
        return np.concatenate(frames, axis=2)

    def __call__(self, prompt: str | Sequence[str], negative_prompt: str | Sequence[str] = "", steps: int = 50,
                 guidance_scale: float = 5.0, seed: int = 0, latents: np.ndarray | None = None,
                 output_type: str = "uint8", guidance_scale_2: float | None = None) -> np.ndarray:
        """Videos [B, frames, H, W, 3]: uint8 (output_type "uint8"), floats in [0, 1] ("float"), or the final
        latents ("latent"). `latents`: the initial noise [B, C, F, h, w] (default: standard normal from `seed`)."""
        return self._generate(prompt, negative_prompt, steps, guidance_scale, seed, latents, output_type,
                              guidance_scale_2)

    def _generate(self, prompt, negative_prompt, steps: int, guidance_scale: float, seed: int,
                  latents: np.ndarray | None, output_type: str, guidance_scale_2: float | None,
                  condition: np.ndarray | None = None, image_states: np.ndarray | None = None,
                  first_frame: np.ndarray | None = None) -> np.ndarray:
        """The text-to-video recipe; image to video adds `condition` and `image_states` (one row, repeated for
        every prompt)."""
        if output_type not in ("uint8", "float", "latent"):
            raise ValueError(f"output_type is uint8, float or latent, not {output_type!r}")
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        negatives = [negative_prompt] * len(prompts) if isinstance(negative_prompt, str) else list(negative_prompt)
        if len(negatives) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(negatives)} negative prompts")
        latents = starting_noise(latents, (len(prompts), *self.latent_shape), seed, "transformer")
        cond = self.encode_prompt(prompts)
        uncond = self.encode_prompt(negatives) if guidance_scale > 1.0 else None
        repeat = (lambda a: None if a is None else np.repeat(a, len(prompts), axis=0))
        latents = self.denoise(latents, cond, uncond, steps, guidance_scale,
                               guidance_scale_2=guidance_scale_2, condition=repeat(condition),
                               image_states=repeat(image_states), first_frame=repeat(first_frame))
        if output_type == "latent":
            return latents
        video = np.clip(self.decode(latents) / 2 + 0.5, 0.0, 1.0).transpose(0, 2, 3, 4, 1)
        if output_type == "float":
            return video
        return np.round(video * 255).astype(np.uint8)


def write_video(frames: np.ndarray, path: str, fps: int = 16) -> str:
    """Writes [frames, H, W, 3] uint8: .gif (animated) or .png (one frame, or frame_NNN.png per frame when several)
    through Pillow, or .npy; atomically (temp file, then rename)."""
    ext = os.path.splitext(path)[1].lower()
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".tmp_{os.getpid()}_{os.path.basename(path)}")
    if ext == ".npy":
        with open(tmp, "wb") as f:
            np.save(f, frames)
        os.replace(tmp, path)
        return path
    if ext not in (".gif", ".png"):
        raise ValueError(f"{path}: write .gif, .png or .npy (no video encoder is bundled)")
    try:
        from PIL import Image
    except ImportError:
        raise RuntimeError(f"writing {ext} needs Pillow (pip install pillow); .npy needs nothing") from None
    images = [Image.fromarray(f) for f in frames]
    if ext == ".gif":
        images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    elif len(images) == 1:
        images[0].save(tmp, format="PNG")
    else:
        stem = os.path.splitext(path)[0]
        for i, im in enumerate(images):
            t = f"{tmp}.{i}"
            im.save(t, format="PNG")
            os.replace(t, f"{stem}_{i:03d}.png")
        return f"{stem}_000.png"
    os.replace(tmp, path)
    return path
