"""openpi pi0.5 on the runtime: camera images, a task and the robot's state -> a chunk of actions.

    policy = Pi05Policy("path/to/pi05")           # a transformers PI05 checkpoint, or `python -m model_zoo convert`'s
    actions = policy.act(["base.png", "wrist.png"], "pick up the cup", state=[0.1, -0.3, ...])   # [chunk, dims]

As PI05ForConditionalGeneration.sample_actions with PI05Processor's inputs: each image resized to fit the tower's
square (aspect kept, bicubic), scaled to [-1, 1] and padded right / below with 0; the prompt is the image tokens,
bos, "Task: <task>, State: <bins>;\\nAction: " with the state (already normalised to [-1, 1], as the processor's
dataset statistics would) in 256 bins; the prefix graph runs once (every layer's keys / values), then the action
expert num_inference_steps times, Euler steps from t = 1 (noise) to t = 0: x += -1/steps x velocity. Actions come out
in the model's normalised units, max_action_dim wide (the caller keeps its robot's dimensions and undoes its
normalisation)."""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from ..checkpoint_graph import checkpoint_graph
from ..clip import _open_image

IMAGE_TOKEN = "<image>"


def preprocess_image(image, size: int) -> np.ndarray:
    """[3, size, size] float32: PI0ImageProcessor's steps (fit within size x size keeping the aspect ratio, each side
    int(side x scale), bicubic; x / 255 normalised with mean 0.5, std 0.5; zeros padded right and below)."""
    from PIL import Image
    img = _open_image(image)
    w, h = img.size
    scale = min(size / h, size / w)
    new_h, new_w = max(1, int(h * scale)), max(1, int(w * scale))
    if (new_w, new_h) != (w, h):
        img = img.resize((new_w, new_h), Image.BICUBIC)
    x = (np.asarray(img, np.float32) * np.float32(1 / 255) - np.float32(0.5)) / np.float32(0.5)
    out = np.zeros((3, size, size), np.float32)
    out[:, :new_h, :new_w] = x.transpose(2, 0, 1)
    return out


def state_bins(state: Sequence[float] | np.ndarray) -> list[int]:
    """The state's 256-bin indices as PI05Processor.build_prompts writes them: bucketize(state, linspace(-1, 1,
    257)[:-1], right=True) - 1 (values below -1 give -1, at or above 1 give 255)."""
    s = np.asarray(state, np.float32).reshape(-1)
    if not np.all(np.isfinite(s)):
        raise ValueError("the state has NaN or infinite values")
    bins = np.linspace(-1, 1, 257, dtype=np.float32)[:-1]
    return (np.searchsorted(bins, s, side="right") - 1).tolist()


def build_prompt(task: str, state: Sequence[float] | np.ndarray | None, bos_token: str) -> str:
    """The prompt's text after the image tokens (PI05Processor.build_prompts)."""
    task = task.strip().replace("_", " ").replace("\n", " ")
    state_text = "" if state is None else ", State: " + " ".join(map(str, state_bins(state)))
    return f"{bos_token}Task: {task}{state_text};\nAction: "


class Pi05Policy:
    """Two graphs: `prefix` (vision_language.ms) and `expert` (action_expert.ms), converted on first use from a
    transformers checkpoint directory, or the files `python -m model_zoo convert "openpi π0.5"` wrote.
    `precision_mode` "preferred_bf16" computes the products in bfloat16 where the CPU has bf16 dot products; by
    default it is that for bfloat16 weights (as TextEngine), else "enforce_fp32"."""

    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1,
                 precision_mode: str | None = None):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        vision = self.config["vlm_config"]["vision_config"]
        self.image_size = int(vision["image_size"])
        self.image_tokens = (self.image_size // int(vision["patch_size"])) ** 2
        self.chunk_size = int(self.config.get("chunk_size", 50))
        self.action_dim = int(self.config.get("max_action_dim", 32))
        self.steps = int(self.config.get("num_inference_steps", 10))
        self.layers = int(self.config["dit_config"]["num_hidden_layers"])
        self.tokenizer, self.bos_token = self._tokenizer(model_dir)
        if precision_mode is None:
            precision_mode = "preferred_bf16" if weight_format == "bfloat16" else "enforce_fp32"
        self.prefix = checkpoint_graph(model_dir, "vision_language", "prefix", weight_format, threads, precision_mode)
        self.expert = checkpoint_graph(model_dir, "action_expert", "action_expert", weight_format, threads,
                                       precision_mode)

    @staticmethod
    def _tokenizer(model_dir: str):
        from tokenizers import Tokenizer
        path = os.path.join(model_dir, "tokenizer.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no tokenizer.json in {model_dir} (pi0.5 reads its prompt with the PaliGemma "
                                    "tokenizer)")
        tok = Tokenizer.from_file(path)
        bos = "<bos>"
        cfg_path = os.path.join(model_dir, "tokenizer_config.json")
        if os.path.isfile(cfg_path):
            with open(cfg_path) as f:
                bos = json.load(f).get("bos_token") or bos
            bos = bos["content"] if isinstance(bos, dict) else bos
        return tok, bos

    def prompt_ids(self, task: str, state=None) -> np.ndarray:
        """The prompt's token ids after the image tokens (no special tokens added: bos is in the text)."""
        text = build_prompt(task, state, self.bos_token)
        return np.asarray(self.tokenizer.encode(text, add_special_tokens=False).ids, np.int64)

    def prefix_cache(self, pixel_values: np.ndarray, input_ids: np.ndarray,
                     attention_mask: np.ndarray | None = None) -> tuple[list[np.ndarray], np.ndarray]:
        """(every layer's key and value rows, the prefix mask) for pixel_values [batch, cameras, 3, S, S] and the
        prompt's ids [batch, text tokens] (attention_mask [batch, all tokens]: 1 valid, 0 padding; default all
        valid)."""
        pixel_values = np.ascontiguousarray(pixel_values, np.float32)
        input_ids = np.ascontiguousarray(input_ids, np.int64)
        if pixel_values.ndim != 5 or pixel_values.shape[2:] != (3, self.image_size, self.image_size):
            raise ValueError(f"pixel_values must be [batch, cameras, 3, {self.image_size}, {self.image_size}], got "
                             f"{list(pixel_values.shape)}")
        if input_ids.ndim != 2 or input_ids.shape[0] != pixel_values.shape[0]:
            raise ValueError(f"input_ids must be [batch, tokens] with the images' batch {pixel_values.shape[0]}, got "
                             f"{list(input_ids.shape)}")
        total = pixel_values.shape[1] * self.image_tokens + input_ids.shape[1]
        if attention_mask is None:
            attention_mask = np.ones((input_ids.shape[0], total), np.int64)
        attention_mask = np.ascontiguousarray(attention_mask, np.int64)
        if attention_mask.shape != (input_ids.shape[0], total):
            raise ValueError(f"attention_mask must be [batch, {total}] (image and prompt tokens), got "
                             f"{list(attention_mask.shape)}")
        outs = self.prefix.predict({"pixel_values": pixel_values, "input_ids": input_ids,
                                    "attention_mask": attention_mask})
        return [t.get_data_to_numpy() for t in outs], attention_mask

    def velocity(self, noisy_actions: np.ndarray, t: float, cache: list[np.ndarray], mask: np.ndarray) -> np.ndarray:
        """One expert step: the flow's velocity [batch, chunk, action_dim] at time t."""
        feeds = {"noisy_actions": np.ascontiguousarray(noisy_actions, np.float32),
                 "timestep": np.full(noisy_actions.shape[0], t, np.float32), "prefix_mask": mask}
        for i in range(self.layers):
            feeds[f"key.{i}"], feeds[f"value.{i}"] = cache[2 * i], cache[2 * i + 1]
        return self.expert.predict(feeds)[0].get_data_to_numpy()

    def sample_actions(self, pixel_values: np.ndarray, input_ids: np.ndarray, noise: np.ndarray,
                       attention_mask: np.ndarray | None = None, steps: int | None = None) -> np.ndarray:
        """PI05ForConditionalGeneration.sample_actions on the runtime: [batch, chunk, action_dim]."""
        steps = int(steps or self.steps)
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        x = np.array(noise, np.float32)
        if x.shape[1:] != (self.chunk_size, self.action_dim) or x.shape[0] != np.shape(input_ids)[0]:
            raise ValueError(f"noise must be [batch, {self.chunk_size}, {self.action_dim}], got {list(x.shape)}")
        cache, mask = self.prefix_cache(pixel_values, input_ids, attention_mask)
        dt = -1.0 / steps
        for step in range(steps):
            x += np.float32(dt) * self.velocity(x, 1.0 + step * dt, cache, mask)
        return x

    def act(self, images: Sequence, task: str, state=None, seed: int = 0, steps: int | None = None,
            noise: np.ndarray | None = None) -> np.ndarray:
        """The action chunk [chunk, max_action_dim] for one observation: `images` one per camera (paths, PIL images
        or uint8 arrays), `task` the instruction, `state` the robot state normalised to [-1, 1] (None: no state in
        the prompt); the initial noise from `seed` unless `noise` [chunk, max_action_dim] is given."""
        if not images:
            raise ValueError("pi0.5 needs at least one camera image")
        pixels = np.stack([preprocess_image(im, self.image_size) for im in images])[None]
        ids = self.prompt_ids(task, state)[None]
        if noise is None:
            noise = np.random.default_rng(seed).standard_normal((self.chunk_size, self.action_dim)).astype(np.float32)
        return self.sample_actions(pixels, ids, np.asarray(noise, np.float32)[None], steps=steps)[0]
