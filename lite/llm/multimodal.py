"""Image (and video) tokens in a language model's prompt: the rows a vision tower computed stand in for the
embeddings of the prompt's placeholder tokens, and Qwen2-VL-style models give every token a 3-D position (temporal,
height, width: multimodal RoPE). `PromptEmbeddings` carries both into LLMEngine.add_request; `qwen2_vl_positions`
computes the positions the way transformers' Qwen2-VL / Qwen2.5-VL get_rope_index does."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np


@dataclass
class PromptEmbeddings:
    """`rows`: the prompt positions whose embeddings are replaced ([K] int); `embeds`: their rows ([K, hidden]
    float32, in the order of `rows`); `mrope_positions`: [3, prompt length] positions for a multimodal-RoPE graph
    (None: each token's index in all three components). Tokens generated after the prompt continue from the largest
    position + 1, as transformers' rope_deltas do. `deepstack`: [levels, K, hidden] features added to the same
    rows' states after the first layers (Qwen3-VL's DeepStack)."""
    rows: np.ndarray
    embeds: np.ndarray
    mrope_positions: np.ndarray | None = None
    deepstack: np.ndarray | None = None
    digest: str = field(init=False)

    def __post_init__(self):
        self.rows = np.asarray(self.rows, np.int64).reshape(-1)
        self.embeds = np.ascontiguousarray(self.embeds, np.float32)
        if self.embeds.ndim != 2 or self.embeds.shape[0] != self.rows.size:
            raise ValueError(f"embeds {list(self.embeds.shape)} must be [{self.rows.size}, hidden]: a row for each "
                             "replaced position")
        if len(np.unique(self.rows)) != self.rows.size:
            raise ValueError("a prompt position is replaced twice")
        if self.deepstack is not None:
            self.deepstack = np.ascontiguousarray(self.deepstack, np.float32)
            if self.deepstack.ndim != 3 or self.deepstack.shape[1:] != self.embeds.shape:
                raise ValueError(f"deepstack {list(self.deepstack.shape)} must be [levels, {self.rows.size}, "
                                 f"{self.embeds.shape[1]}]")
        if self.mrope_positions is not None:
            self.mrope_positions = np.ascontiguousarray(self.mrope_positions, np.int64)
            if self.mrope_positions.ndim != 2 or self.mrope_positions.shape[0] != 3:
                raise ValueError(f"mrope_positions {list(self.mrope_positions.shape)} must be [3, prompt length]")
        # Prefix caching tells prompts apart by this: the same placeholder tokens with other images are other prompts.
        self.digest = hashlib.blake2b(self.embeds.tobytes() + self.rows.tobytes(), digest_size=16).hexdigest()

    def check(self, prompt_len: int, hidden: int | None) -> None:
        if self.rows.size and (self.rows.min() < 0 or self.rows.max() >= prompt_len):
            raise ValueError(f"embedding rows {self.rows.min()}..{self.rows.max()} fall outside the prompt's "
                             f"{prompt_len} tokens")
        if hidden is not None and self.rows.size and self.embeds.shape[1] != hidden:
            raise ValueError(f"embeddings of width {self.embeds.shape[1]}; the model's hidden size is {hidden}")
        if self.mrope_positions is not None and self.mrope_positions.shape[1] != prompt_len:
            raise ValueError(f"mrope_positions cover {self.mrope_positions.shape[1]} tokens; the prompt has "
                             f"{prompt_len}")

    def cache_keys(self, prompt_ids: Sequence[int]) -> list:
        """The prompt's tokens as prefix caching hashes them: replaced positions keyed by this content's digest."""
        keys: list = list(prompt_ids)
        for k, r in enumerate(self.rows.tolist()):
            keys[r] = (self.digest, k)
        return keys

    def position_delta(self, prompt_len: int) -> int:
        """What a generated token's index adds to get its position (the largest prompt position + 1 - length)."""
        if self.mrope_positions is None or not prompt_len:
            return 0
        return int(self.mrope_positions.max()) + 1 - prompt_len


def qwen2_vl_positions(ids: Sequence[int], grids: Sequence[tuple[int, int, int]], image_token_id: int,
                       merge: int = 2, video_token_id: int | None = None,
                       time_intervals: Sequence[float] | None = None) -> np.ndarray:
    """[3, len(ids)] positions of a Qwen2-VL / Qwen2.5-VL prompt: text tokens count on in all three components;
    each run of image (video) tokens takes its grid's (t, h / merge, w / merge) layout from the position it starts
    at (temporal index x its interval, 1 for images: tokens_per_second x seconds per grid for videos), and the text
    after it starts at that position + max(h, w) / merge. `grids`: each image's then video's (t, h, w) in patches,
    in prompt order."""
    ids = np.asarray(ids, np.int64)
    kind = np.zeros(len(ids), np.int64)
    kind[ids == image_token_id] = 1
    if video_token_id is not None:
        kind[ids == video_token_id] = 2
    out = np.zeros((3, len(ids)), np.int64)
    pos, i, g, videos = 0, 0, 0, 0
    while i < len(ids):
        j = i
        while j < len(ids) and kind[j] == kind[i]:
            j += 1
        if kind[i] == 0:
            out[:, i:j] = pos + np.arange(j - i)
            pos += j - i
            i = j
            continue
        if g >= len(grids):
            raise ValueError(f"the prompt has more image/video token runs than the {len(grids)} grids given")
        t, h, w = (int(v) for v in grids[g])
        lh, lw = h // merge, w // merge
        n = t * lh * lw
        if j - i < n:
            raise ValueError(f"grid {g} ({t}, {h}, {w}) needs {n} tokens; the prompt's run has {j - i}")
        interval = 1.0
        if kind[i] == 2:
            interval = float(time_intervals[videos]) if time_intervals is not None else 1.0
            videos += 1
        tt, hh, ww = np.meshgrid((np.arange(t) * interval).astype(np.int64), np.arange(lh), np.arange(lw),
                                 indexing="ij")
        out[:, i:i + n] = np.stack([tt.ravel(), hh.ravel(), ww.ravel()]) + pos
        pos += max(lh, lw)
        i, g = i + n, g + 1
    if g != len(grids):
        raise ValueError(f"{len(grids)} grids given; the prompt has {g} image/video token runs")
    return out


def load_image(source):
    """A PIL image (RGB) from a path, PIL image, uint8 array, or a URL of the `data:image/...;base64,` form (OpenAI's
    image_url parts); anything unreadable is a ValueError naming the source's kind."""
    import base64
    import io

    from ..diffusion.wan_i2v import load_rgb
    if isinstance(source, str) and source.startswith("data:"):
        head, _, payload = source.partition(",")
        if ";base64" not in head:
            raise ValueError("an image data URL must be base64 (data:image/png;base64,...)")
        try:
            raw = base64.b64decode(payload, validate=True)
        except ValueError as e:
            raise ValueError(f"an image data URL's base64 does not decode: {e}") from None
        source = io.BytesIO(raw)
    try:
        if isinstance(source, io.BytesIO):
            from PIL import Image
            with Image.open(source) as im:
                return im.convert("RGB")
        return load_rgb(source)
    except (OSError, SyntaxError) as e:   # PIL's UnidentifiedImageError / truncated files are OSErrors
        raise ValueError(f"the image cannot be read: {e}") from None


@dataclass
class Video:
    """A video part's frames (paths, PIL images or uint8 arrays, in order) and their rate (frames per second)."""
    frames: list
    fps: float = 2.0


def _video(part: dict) -> Video:
    source = part.get("video")
    if isinstance(source, (str, os.PathLike)):
        from ..diffusion.wan_animate import read_frames
        try:
            source = read_frames(os.fspath(source))
        except (OSError, SyntaxError) as e:
            raise ValueError(f"the video '{part.get('video')}' cannot be read: {e}") from None
    if not isinstance(source, (list, tuple)) or not source:
        raise ValueError("a video part's 'video' is a folder of frames, a .gif, or a non-empty list of frames")
    fps = float(part.get("fps", 2.0))
    if not fps > 0:
        raise ValueError(f"a video's fps must be positive, got {fps}")
    return Video(list(source), fps)


def split_images(messages: Sequence[dict]) -> tuple[list[dict], list]:
    """Chat messages with their image parts ({"type": "image", "image": ...} or OpenAI's {"type": "image_url",
    "image_url": {"url": ...}}) and video parts ({"type": "video", "video": frames | folder | .gif, "fps": 2.0})
    turned into {"type": "image"} / {"type": "video"} placeholders for the chat template, and their sources in
    order (videos as `Video`)."""
    out, images = [], []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, list):
            out.append(m)
            continue
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "image":
                images.append(part.get("image", part.get("url")))
                parts.append({"type": "image"})
            elif kind == "image_url":
                url = part.get("image_url")
                images.append(url.get("url") if isinstance(url, dict) else url)
                parts.append({"type": "image"})
            elif kind == "video":
                images.append(_video(part))
                parts.append({"type": "video"})
            else:
                parts.append(part)
        out.append({**m, "content": parts})
    if any(s is None for s in images):
        raise ValueError("an image part has no image (image / image_url.url)")
    return out, images


def expand_image_prompt(ids: Sequence[int], images: Sequence, vision, image_token_id: int,
                        video_token_id: int | None = None) -> tuple[list[int], PromptEmbeddings]:
    """The prompt with each image-pad (video-pad) token (one per image or video, as chat templates write them; one
    per temporal patch for a tower that splits videos, Qwen3-VL's) repeated for its rows, and the rows with the 3-D
    positions (`vision`: lite.qwen2_vl_image.VisionTower; `images`: the sources in placeholder order, videos as
    `Video`; a tower whose `mrope` is False, LLaVA's or InternVL's, keeps 1-D positions; one with `brackets`
    (InternVL's <img>, </img> ids) has each image's rows written between them)."""
    is_video = [video_token_id is not None and t == video_token_id for t in ids]
    together = getattr(vision, "image_rows_together", None)   # InternVL3.5-Flash routes a prompt's images jointly
    prepared = iter(together([load_image(s) for s in images if not isinstance(s, Video)])) if together else None
    rows, grids, out, deep, intervals = [], [], [], [], []
    used, pending = 0, []   # media consumed; the remaining temporal patches of a split video
    for i, t in enumerate(ids):
        if t != image_token_id and not is_video[i]:
            out.append(int(t))
            continue
        if is_video[i] and pending:
            r, grid, d, interval = pending.pop(0)
        else:
            if used >= len(images):
                raise ValueError(f"the prompt has more image / video placeholders than its {len(images)} images and "
                                 "videos")
            source = images[used]
            used += 1
            if is_video[i] != isinstance(source, Video):
                raise ValueError("the prompt's image / video placeholders do not match the order of its image and "
                                 "video parts")
            if is_video[i]:
                if not hasattr(vision, "video"):
                    raise NotImplementedError("video inputs for this model")
                r, grid = vision.video(source.frames)
                d, interval = getattr(vision, "last_deepstack", None), vision.video_interval(source.fps)
                if getattr(vision, "split_video_frames", False):   # one run per temporal patch
                    frames, h, w = grid
                    per = h * w // (vision.merge * vision.merge)
                    chunks = [(r[k * per:(k + 1) * per], (1, h, w),
                               None if d is None else d[:, k * per:(k + 1) * per], interval) for k in range(frames)]
                    (r, grid, d, interval), pending = chunks[0], chunks[1:]
            else:
                r, grid = next(prepared) if prepared is not None else vision(load_image(source))
                d, interval = getattr(vision, "last_deepstack", None), None
        if interval is not None:
            intervals.append(interval)
        rows.append(r)
        grids.append(grid)
        if d is not None:
            deep.append(d)
        brackets = getattr(vision, "brackets", None)   # InternVL: <img> rows </img>
        out += ([brackets[0]] if brackets else []) + [int(t)] * len(r) + ([brackets[1]] if brackets else [])
    if used != len(images) or pending:
        raise ValueError(f"the prompt's image / video placeholders do not cover its {len(images)} images and videos")
    kinds = np.asarray(out)
    where = np.flatnonzero((kinds == image_token_id) | ((kinds == video_token_id) if video_token_id is not None
                                                        else False))
    if not getattr(vision, "mrope", True):   # LLaVA: the rows at ordinary positions
        return out, PromptEmbeddings(where, np.concatenate(rows))
    positions = qwen2_vl_positions(out, grids, image_token_id, vision.merge, video_token_id, intervals)
    return out, PromptEmbeddings(where, np.concatenate(rows), positions,
                                 np.concatenate(deep, axis=1) if deep else None)
