"""Qwen2-VL / Qwen2.5-VL image preprocessing without torch: what transformers' Qwen2VLImageProcessor (PIL backend)
does, so the runtime's vision tower (model_zoo head "vision") gets the same rows. The image is resized (bicubic) to
sides that are multiples of patch x merge (28) with a pixel count inside [min_pixels, max_pixels] (smart_resize),
rescaled, normalised with CLIP's mean / std, repeated over the temporal patch (2 frames) and cut into patches, each
2 x 2 merge group's four patches consecutive."""
from __future__ import annotations

import math

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
