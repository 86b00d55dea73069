"""Qwen2-VL / Qwen2.5-VL image preprocessing without torch: what transformers' Qwen2VLImageProcessor (PIL backend)
does, so the runtime's vision tower (model_zoo head "vision") gets the same rows. The image is resized (bicubic) to
sides that are multiples of patch x merge (28) with a pixel count inside [min_pixels, max_pixels] (smart_resize),
rescaled, normalised with CLIP's mean / std, repeated over the temporal patch (2 frames) and cut into patches, each
2 x 2 merge group's four patches consecutive."""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def smart_resize(height: int, width: int, factor: int = 28, min_pixels: int = 56 * 56,
                 max_pixels: int = 28 * 28 * 1280) -> tuple[int, int]:
    """transformers' smart_resize: sides rounded to multiples of `factor`, the area scaled into [min_pixels,
    max_pixels], the aspect ratio kept as closely as that allows."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}")
    h, w = round(height / factor) * factor, round(width / factor) * factor
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h, w


def resized_size(height: int, width: int, config: dict | None = None) -> tuple[int, int]:
    """The (height, width) the processor resizes an image to (smart_resize with the config's pixel bounds)."""
    c = dict(config or {})
    size = c.get("size") or {}
    min_pixels = int(c.get("min_pixels") or size.get("shortest_edge") or 56 * 56)
    max_pixels = int(c.get("max_pixels") or size.get("longest_edge") or 28 * 28 * 1280)
    factor = int(c.get("patch_size", 14)) * int(c.get("merge_size", 2))
    return smart_resize(height, width, factor, min_pixels, max_pixels)


def image_grid(height: int, width: int, config: dict | None = None) -> tuple[int, int, int]:
    """The patch grid (1, grid_h, grid_w) of a height x width image after the processor's resize."""
    patch = int((config or {}).get("patch_size", 14))
    h, w = resized_size(height, width, config) if (config or {}).get("do_resize", True) else (height, width)
    return 1, h // patch, w // patch


VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS = 128 * 28 * 28, 768 * 28 * 28   # Qwen2VLVideoProcessor's defaults


def video_volume_size(frames: int, height: int, width: int, temporal: int, factor: int, min_pixels: int,
                      max_pixels: int) -> tuple[int, int]:
    """Qwen3-VL's video smart resize: (height, width) in multiples of `factor` whose frames x height x width stays
    within the pixel bounds (the bounds count the whole clip, not one frame)."""
    if frames < temporal:
        raise ValueError(f"a Qwen3-VL video needs at least {temporal} frames, got {frames}")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    t_bar = round(frames / temporal) * temporal
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def qwen2_vl_video_pixels(frames, config: dict | None = None,
                          whole_clip_bounds: bool = False) -> tuple[np.ndarray, tuple[int, int, int]]:
    """(pixel_values [grid_t grid_h grid_w, 3 x temporal_patch x patch x patch] float32, the grid) of a video's frames
    (paths, PIL images or uint8 arrays, one size), as Qwen2VLVideoProcessor lays them out: every frame resized to the
    first's smart size within the video pixel bounds (`min_pixels` / `max_pixels`, or size.shortest_edge /
    longest_edge, of the video processor's settings), rescaled and normalised, the last frame repeated up to a
    whole temporal patch, then each temporal group of frames cut into merge-ordered patches. The reference resizes
    with torchvision; here PIL's bicubic does it, so frames that need resizing can differ slightly from it (frames
    already at a multiple of patch x merge within the bounds are not resized by either). `whole_clip_bounds`:
    Qwen3-VL's bounds on frames x height x width (video_volume_size) instead of on one frame."""
    from PIL import Image

    from .diffusion.wan_i2v import load_rgb
    c = dict(config or {})
    patch, merge = int(c.get("patch_size", 14)), int(c.get("merge_size", 2))
    temporal = int(c.get("temporal_patch_size", 2))
    images = [load_rgb(f) for f in frames]
    if not images:
        raise ValueError("a video needs at least one frame")
    if any(im.size != images[0].size for im in images):
        raise ValueError("a video's frames must share one size")
    if c.get("do_resize", True):
        size = c.get("size") or {}
        bounds = {"min_pixels": c.get("min_pixels") or size.get("shortest_edge") or VIDEO_MIN_PIXELS,
                  "max_pixels": c.get("max_pixels") or size.get("longest_edge") or VIDEO_MAX_PIXELS,
                  "patch_size": patch, "merge_size": merge}
        if whole_clip_bounds:
            h, w = video_volume_size(len(images), images[0].height, images[0].width, temporal, patch * merge,
                                     int(bounds["min_pixels"]), int(bounds["max_pixels"]))
        else:
            h, w = resized_size(images[0].height, images[0].width, bounds)
        resample = int(c.get("resample", Image.BICUBIC))
        images = [im if im.size == (w, h) else im.resize((w, h), resample=resample) for im in images]
    x = np.stack([np.asarray(im) for im in images]).transpose(0, 3, 1, 2).astype(np.float32)   # [F, C, H, W]
    if c.get("do_rescale", True):
        x = (x.astype(np.float64) * float(c.get("rescale_factor", 1 / 255))).astype(np.float32)
    if c.get("do_normalize", True):
        mean = np.array(c.get("image_mean", CLIP_MEAN), np.float32).reshape(1, -1, 1, 1)
        std = np.array(c.get("image_std", CLIP_STD), np.float32).reshape(1, -1, 1, 1)
        x = (x - mean) / std
    if pad := -x.shape[0] % temporal:
        x = np.concatenate([x, np.repeat(x[-1:], pad, axis=0)])
    frames_n, channels, height, width = x.shape
    gt, gh, gw = frames_n // temporal, height // patch, width // patch
    if gh % merge or gw % merge:
        raise ValueError(f"{height}x{width} frames do not split into {merge}x{merge} groups of {patch}-pixel patches")
    p = x.reshape(gt, temporal, channels, gh // merge, merge, patch, gw // merge, merge, patch)
    p = p.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return np.ascontiguousarray(p.reshape(gt * gh * gw, channels * temporal * patch * patch), np.float32), (gt, gh, gw)


def qwen2_vl_pixels(image, config: dict | None = None) -> tuple[np.ndarray, tuple[int, int, int]]:
    """(pixel_values [grid_h grid_w, 3 x temporal_patch x patch x patch] float32, the grid (1, grid_h, grid_w)) of
    one image (a path, a PIL image or a uint8 [H, W, 3] array); `config`: the checkpoint's
    preprocessor_config.json values (defaults: Qwen2.5-VL's)."""
    from PIL import Image

    from .diffusion.wan_i2v import load_rgb
    c = dict(config or {})
    patch, merge = int(c.get("patch_size", 14)), int(c.get("merge_size", 2))
    temporal = int(c.get("temporal_patch_size", 2))
    im = load_rgb(image)
    if c.get("do_resize", True):
        h, w = resized_size(im.height, im.width, c)
        im = im.resize((w, h), resample=int(c.get("resample", Image.BICUBIC)))
    x = np.asarray(im).transpose(2, 0, 1).astype(np.float32)
    if c.get("do_rescale", True):
        x = (x.astype(np.float64) * float(c.get("rescale_factor", 1 / 255))).astype(np.float32)
    if c.get("do_normalize", True):
        mean = np.array(c.get("image_mean", CLIP_MEAN), np.float32).reshape(-1, 1, 1)
        std = np.array(c.get("image_std", CLIP_STD), np.float32).reshape(-1, 1, 1)
        x = (x - mean) / std
    channels, height, width = x.shape
    gh, gw = height // patch, width // patch
    if gh % merge or gw % merge:
        raise ValueError(f"a {height}x{width} image does not split into {merge}x{merge} groups of {patch}-pixel "
                         "patches (resize it, or keep do_resize)")
    p = x.reshape(channels, gh // merge, merge, patch, gw // merge, merge, patch).transpose(1, 4, 2, 5, 0, 3, 6)
    p = np.broadcast_to(p[:, :, :, :, :, None], (*p.shape[:5], temporal, *p.shape[5:]))
    return np.ascontiguousarray(p.reshape(gh * gw, channels * temporal * patch * patch), np.float32), (1, gh, gw)


# The vision tower's layout of one patch grid (the any-size graph's inputs;
# model_zoo/multimodal/qwen2_5_vl_vision_graph.py)
def window_order(grid: tuple[int, int, int], merge: int, window: int, patch: int) -> tuple[np.ndarray, np.ndarray]:
    """(the merge groups in window order, the windows' lengths in patches) of transformers' get_vision_window_index
    for one image or video."""
    t, h, w = grid
    gh, gw, side = h // merge, w // merge, window // merge // patch
    index = np.arange(t * gh * gw).reshape(t, gh, gw)
    ph, pw = side - gh % side, side - gw % side   # (a whole extra window when it divides: as transformers pads)
    padded = np.full((t, gh + ph, gw + pw), -1)
    padded[:, :gh, :gw] = index
    nh, nw = (gh + ph) // side, (gw + pw) // side
    padded = padded.reshape(t, nh, side, nw, side).transpose(0, 1, 3, 2, 4).reshape(t * nh * nw, side * side)
    lengths = (padded >= 0).sum(1) * merge * merge
    order = padded[padded >= 0]
    return order, lengths[lengths > 0]


def block_diagonal(lengths: Sequence[int]) -> np.ndarray:
    """[1, 1, S, S] bool: each run of `lengths` rows attends only to itself."""
    owner = np.repeat(np.arange(len(lengths)), lengths)
    return (owner[:, None] == owner[None, :])[None, None]


def vision_rope_angles(grid: tuple[int, int, int], merge: int, head_dim: int, theta: float) -> np.ndarray:
    """[t h w, head_dim / 2] angles in the processor's row order: each patch's row times head_dim / 4 frequencies,
    then its column times the same (transformers' axial vision RoPE)."""
    t, h, w = grid
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    shape = (h // merge, merge, w // merge, merge)
    rows = np.tile(rows.reshape(shape).transpose(0, 2, 1, 3).ravel(), t)
    cols = np.tile(cols.reshape(shape).transpose(0, 2, 1, 3).ravel(), t)
    spatial = head_dim // 2
    inv = (1.0 / np.power(np.float32(theta), np.arange(0, spatial, 2, dtype=np.float32) / np.float32(spatial)))
    inv = inv.astype(np.float32)
    return np.concatenate([rows.astype(np.float32)[:, None] * inv, cols.astype(np.float32)[:, None] * inv], axis=1)


def is_qwen2_vl(config: Mapping) -> bool:
    """Qwen2-VL's vision tower (no windows: every block attends over whole frames) rather than Qwen2.5-VL's."""
    v = config.get("vision_config") or config
    return config.get("model_type") == "qwen2_vl" or ("embed_dim" in v and "window_size" not in v)


def vision_inputs(config: Mapping, grid: Sequence[int]) -> dict[str, np.ndarray]:
    """The grid-dependent inputs of the any-size graph for one image (t 1) or video's patch grid (t, h, w)."""
    v = dict(config.get("vision_config") or config)
    t, h, w = (int(g) for g in grid)
    qwen2 = is_qwen2_vl(config)
    D, heads = int(v.get("embed_dim" if qwen2 else "hidden_size", 1280)), int(v.get("num_heads", 16))
    merge, patch = int(v.get("spatial_merge_size", 2)), int(v.get("patch_size", 14))
    theta = float((v.get("rope_parameters") or {}).get("rope_theta", v.get("rope_theta", 10000.0)))
    if min(t, h, w) <= 0 or h % merge or w % merge:
        raise ValueError(f"patch grid {[t, h, w]}: positive, with h and w multiples of {merge}")
    if qwen2:   # no window order: the processor's rows, frames attended whole
        groups, lengths = np.arange(t * h * w // (merge * merge)), np.array([h * w] * t)
    else:
        groups, lengths = window_order((t, h, w), merge, int(v.get("window_size", 112)), patch)
    unit = merge * merge
    rows = (groups[:, None] * unit + np.arange(unit)).ravel()
    angles = vision_rope_angles((t, h, w), merge, D // heads, theta)[rows]
    return {"window_index": rows.astype(np.int64), "rope_cos": np.cos(angles).astype(np.float32)[None],
            "rope_sin": np.sin(angles).astype(np.float32)[None], "window_mask": block_diagonal(lengths),
            "full_mask": block_diagonal([h * w] * t), "merge_order": np.argsort(groups).astype(np.int64)}


class VisionTower:
    """A converted Qwen2.5-VL vision tower (model_zoo head "vision": for one patch grid, or any) with the image
    processor's settings: an image in, its language-model rows and patch grid out."""

    mrope = True   # the rows take 3-D positions (lite.llm.multimodal.qwen2_vl_positions)

    def __init__(self, path: str, config: Mapping, processor_config: Mapping | None = None, threads: int = 1):
        from . import Context, Model, ModelType
        ctx = Context()
        ctx.cpu.thread_num = threads
        self.model = Model()
        self.model.build_from_file(path, ModelType.MINDIR_LITE, ctx)
        self.config, self.processor_config = dict(config), dict(processor_config or {})
        names = {i.name for i in self.model.get_inputs()}
        self.qwen3 = "pos_indices" in names   # Qwen3-VL's tower (learned positions, DeepStack features)
        self.any_size = self.qwen3 or "window_index" in names
        vision = self.config.get("vision_config") or {}
        self.merge = int(vision.get("spatial_merge_size", 2))
        self.last_deepstack: np.ndarray | None = None   # the latest image's DeepStack features [levels, rows, dim]
        self.video_config: dict = {}   # video_preprocessor_config.json's settings, when the checkpoint has one

    def video(self, frames) -> tuple[np.ndarray, tuple[int, int, int]]:
        """(rows, grid (t, h, w)) of a video's frames (lite.qwen2_vl_image.qwen2_vl_video_pixels)."""
        if not self.any_size:
            raise NotImplementedError("video inputs need the any-size vision graph")
        video = dict(self.processor_config)
        if self.qwen3:   # Qwen3VLVideoProcessor's bounds count the whole clip
            video.update(size={"shortest_edge": 128 * 32 * 32, "longest_edge": 768 * 32 * 32})
            video.pop("min_pixels", None), video.pop("max_pixels", None)
        video.update(self.video_config)
        pixels, grid = qwen2_vl_video_pixels(frames, video, whole_clip_bounds=self.qwen3)
        return self._run(pixels, grid), tuple(grid)

    # Qwen3-VL writes each temporal patch of a video as its own run of tokens after a "<t seconds>" timestamp
    split_video_frames = property(lambda self: self.qwen3)

    def video_prompt(self, text: str, videos: Sequence) -> str:
        """Qwen3-VL: each video's <|vision_start|><|video_pad|><|vision_end|> rewritten as one timestamped run per
        temporal patch (Qwen3VLProcessor's "<t seconds>": the mean time of the patch's frames, from the part's fps),
        in order; other towers leave the text as it is."""
        if not self.qwen3 or not videos:
            return text
        wrapper = "<|vision_start|><|video_pad|><|vision_end|>"
        temporal = int(self.video_config.get("temporal_patch_size", self.processor_config.get("temporal_patch_size",
                                                                                                2)))
        pieces = text.split(wrapper)
        if len(pieces) - 1 != len(videos):
            raise ValueError(f"the prompt has {len(pieces) - 1} video placeholders for {len(videos)} videos")
        out = [pieces[0]]
        for video, rest in zip(videos, pieces[1:]):
            indices = list(range(len(video.frames)))
            indices += [indices[-1]] * (-len(indices) % temporal)
            times = [i / video.fps for i in indices]
            stamps = [(times[i] + times[i + temporal - 1]) / 2 for i in range(0, len(times), temporal)]
            out.append("".join(f"<{t:.1f} seconds>{wrapper}" for t in stamps))
            out.append(rest)
        return "".join(out)

    def video_interval(self, fps: float) -> float:
        """How far a video's temporal position moves per grid step: Qwen2.5-VL's tokens_per_second x the seconds one
        temporal patch spans; 1 for Qwen2-VL."""
        if self.config.get("model_type") != "qwen2_5_vl":
            return 1.0
        vision = self.config.get("vision_config") or {}
        temporal = int(self.video_config.get("temporal_patch_size", self.processor_config.get("temporal_patch_size",
                                                                                                2)))
        return float(vision.get("tokens_per_second", 2)) * temporal / fps

    def _run(self, pixels: np.ndarray, grid) -> np.ndarray:
        """The tower's rows for patches of `grid` (the grid's layout inputs for an any-size graph; a graph built for
        one grid checks it); DeepStack features kept in last_deepstack."""
        feeds = {"pixel_values": pixels}
        if self.qwen3:
            feeds.update(qwen3_vl_vision_inputs(self.config, grid))
        elif self.any_size:
            feeds.update(vision_inputs(self.config, grid))
        else:
            built = tuple(int(v) for v in self.model.get_metadata().get("grid_thw", "0,0,0").split(","))
            if tuple(grid) != built:
                raise ValueError(f"the image gives the patch grid {list(grid)}; this vision tower was built for "
                                 f"{list(built)}")
        outputs = {o.name: t.get_data_to_numpy() for o, t in zip(self.model.get_outputs(), self.model.predict(feeds))}
        self.last_deepstack = outputs.get("deepstack_embeds")
        return outputs["image_embeds"]

    def __call__(self, image) -> tuple[np.ndarray, tuple[int, int, int]]:
        pixels, grid = qwen2_vl_pixels(image, self.processor_config)
        return self._run(pixels, grid), tuple(grid)


def qwen3_vl_vision_inputs(config: Mapping, grid: Sequence[int]) -> dict[str, np.ndarray]:
    """The grid-dependent inputs of Qwen3-VL's vision graph for one patch grid (t, h, w): the learned position table's
    bilinear taps (align_corners, 4 per patch, clamped to the border: transformers'
    get_vision_interpolation_indices_and_weights) in merge-block order, the 2-D RoPE tables, the per-frame mask."""
    v = dict(config.get("vision_config") or config)
    t, h, w = (int(g) for g in grid)
    merge = int(v.get("spatial_merge_size", 2))
    side = int(round(float(v.get("num_position_embeddings", 2304)) ** 0.5))
    if min(t, h, w) <= 0 or h % merge or w % merge:
        raise ValueError(f"patch grid {[t, h, w]}: positive, with h and w multiples of {merge}")
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    shape = (h // merge, merge, w // merge, merge)
    rows = rows.reshape(shape).transpose(0, 2, 1, 3).ravel()
    cols = cols.reshape(shape).transpose(0, 2, 1, 3).ravel()

    def taps(index, size):
        src = index.astype(np.float32) * np.float32(side - 1) / np.float32(max(size - 1, 1))
        floor = np.floor(src)
        offsets = np.arange(2)
        tap = np.clip(floor.astype(np.int64)[:, None] + offsets, 0, side - 1)
        weight = np.clip(1 - np.abs(src[:, None] - floor[:, None] - offsets), 0, None).astype(np.float32)
        return tap, weight
    ht, hw_ = taps(rows, h)
    wt, ww = taps(cols, w)
    indices = (ht[:, :, None] * side + wt[:, None, :]).reshape(-1, 4)
    weights = (hw_[:, :, None] * ww[:, None, :]).reshape(-1, 4).astype(np.float32)
    heads = int(v.get("num_heads", 16))
    D = int(v.get("hidden_size", 1152))
    theta = float((v.get("rope_parameters") or {}).get("rope_theta", v.get("rope_theta", 10000.0)))
    angles = vision_rope_angles((1, h, w), merge, D // heads, theta)
    angles = np.tile(angles, (t, 1))
    return {"pos_indices": np.tile(indices, (t, 1)).astype(np.int64), "pos_weights": np.tile(weights, (t, 1)),
            "rope_cos": np.cos(angles).astype(np.float32)[None], "rope_sin": np.sin(angles).astype(np.float32)[None],
            "full_mask": block_diagonal([h * w] * t)}
