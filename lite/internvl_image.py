"""InternVL3's image tower on the runtime: an image -> its rows for the language model, with the checkpoint's
GotOcr2ImageProcessor tiling (crop_to_patches: the grid of tiles whose aspect ratio is closest to the image's, at
most max_patches, more tiles on a tie while the image covers over half of them; the image resized onto the grid and
cut row by row, then a thumbnail of the whole image when there are several tiles), rescale and normalise, all tiles
through model_zoo/multimodal/internvl_vision_graph.py as one batch (256 rows a 448-pixel tile). The rows stand at
ordinary positions between the <img> and </img> tokens that InternVLProcessor writes around each image."""
from __future__ import annotations

import json
import os
from typing import Mapping

import numpy as np


def tile_grids(min_tiles: int, max_tiles: int) -> list[tuple[int, int]]:
    """(columns, rows) with min..max tiles, fewest tiles first (columns-major order within a count)."""
    grids = [(w, h) for w in range(1, max_tiles + 1) for h in range(1, max_tiles + 1) if min_tiles <= w * h <= max_tiles]
    return sorted(grids, key=lambda g: g[0] * g[1])


def best_grid(height: int, width: int, tile: int, min_tiles: int, max_tiles: int) -> tuple[int, int]:
    """(columns, rows) of the tiling whose aspect ratio is closest to the image's."""
    aspect, area = width / height, width * height
    best, best_diff = (1, 1), float("inf")
    for grid in tile_grids(min_tiles, max_tiles):
        diff = abs(aspect - grid[0] / grid[1])
        if diff < best_diff:
            best, best_diff = grid, diff
        elif diff == best_diff and area > 0.5 * tile * tile * grid[0] * grid[1]:
            best = grid
    return best


class InternVLVision:
    mrope = False   # the rows sit at the placeholder tokens' ordinary positions

    def __init__(self, path: str, config: Mapping, processor_config: Mapping | None = None, threads: int = 1,
                 model_dir: str | None = None):
        from . import Context, Model, ModelType
        ctx = Context()
        ctx.cpu.thread_num = threads
        self.model = Model()
        self.model.build_from_file(path, ModelType.MINDIR_LITE, ctx)
        pre = dict(processor_config or {})
        vision = dict(config.get("vision_config") or {})
        size = pre.get("size") or {}
        image_size = vision.get("image_size", 448)
        image_size = int(image_size[0] if isinstance(image_size, (list, tuple)) else image_size)
        self.tile = int(size.get("height", image_size)) if isinstance(size, dict) else int(size)
        self.crop_to_patches = bool(pre.get("crop_to_patches", True))
        self.min_patches, self.max_patches = int(pre.get("min_patches", 1)), int(pre.get("max_patches", 12))
        self.resample = int(pre.get("resample", 3))
        self.rescale = float(pre.get("rescale_factor", 1 / 255)) if pre.get("do_rescale", True) else 1.0
        self.normalize = bool(pre.get("do_normalize", True))
        self.mean = np.asarray(pre.get("image_mean", [0.485, 0.456, 0.406]), np.float32)
        self.std = np.asarray(pre.get("image_std", [0.229, 0.224, 0.225]), np.float32)
        self.brackets = None   # (<img>, </img>) ids around each image's rows
        tokenizer = os.path.join(model_dir, "tokenizer.json") if model_dir else None
        if tokenizer and os.path.isfile(tokenizer):
            from tokenizers import Tokenizer
            tok = Tokenizer.from_file(tokenizer)
            start, end = tok.token_to_id("<img>"), tok.token_to_id("</img>")
            if start is None or end is None:
                raise ValueError("an InternVL tokenizer has <img> and </img> tokens; this one has not")
            self.brackets = (int(start), int(end))
        self.last_deepstack = None

    @classmethod
    def from_dir(cls, path: str, model_dir: str, threads: int = 1) -> "InternVLVision":
        with open(os.path.join(model_dir, "config.json")) as f:
            config = json.load(f)
        pre = {}
        if os.path.isfile(os.path.join(model_dir, "preprocessor_config.json")):
            with open(os.path.join(model_dir, "preprocessor_config.json")) as f:
                pre = json.load(f)
        return cls(path, config, pre, threads, model_dir)

    def tiles(self, image) -> np.ndarray:
        """[tiles, 3, tile, tile] float32 pixels of one image (a path, PIL image or uint8 array)."""
        from .clip import _open_image
        image = _open_image(image)
        t = self.tile
        views = [image.resize((t, t), self.resample)]
        if self.crop_to_patches and self.max_patches > 1:
            cols, rows = best_grid(image.height, image.width, t, self.min_patches, self.max_patches)
            canvas = image.resize((t * cols, t * rows), self.resample)
            views = [canvas.crop(((i % cols) * t, (i // cols) * t, (i % cols + 1) * t, (i // cols + 1) * t))
                     for i in range(cols * rows)]
            if len(views) != 1:
                views.append(image.resize((t, t), self.resample))   # the thumbnail
        out = []
        for v in views:
            x = (np.asarray(v).astype(np.float64) * self.rescale).astype(np.float32)
            if self.normalize:
                x = (x - self.mean) / self.std
            out.append(x.transpose(2, 0, 1))
        return np.ascontiguousarray(np.stack(out), np.float32)

    def __call__(self, image) -> tuple[np.ndarray, None]:
        """(rows [tiles x 256, text hidden], no grid) of one image."""
        return self.model.predict({"pixel_values": self.tiles(image)})[0].get_data_to_numpy(), None


class InternVLFlashVision(InternVLVision):
    """InternVL3.5-Flash's image tower (the original project's layout): per tile the vision graph gives the 0.5
    pixel-shuffle rows (mlp1), the 0.25 rows (mlp2) and the Visual Resolution Router's probabilities; a tile takes the
    small view when its first probability is above the image's quantile flash_relative_threshold (linear
    interpolation, as torch.quantile) and at least flash_absolute_threshold, as the project's generate does. The
    rows stand between <img> and </img>; `image_token_id` is the tokenizer's <IMG_CONTEXT>. A prompt's images are
    routed together (lite.llm.multimodal.expand_image_prompt calls `image_rows_together`)."""

    def __init__(self, path: str, config: Mapping, processor_config: Mapping | None = None, threads: int = 1,
                 model_dir: str | None = None):
        super().__init__(path, config, processor_config, threads, model_dir)
        self.flash = bool(config.get("flash_mode", True)) and \
            any(o.name == "gate" for o in self.model.get_outputs())
        self.relative = float(config.get("flash_relative_threshold", 0.0))
        self.absolute = float(config.get("flash_absolute_threshold", 0.0))
        self.image_token_id = None
        tokenizer = os.path.join(model_dir, "tokenizer.json") if model_dir else None
        if tokenizer and os.path.isfile(tokenizer):
            from tokenizers import Tokenizer
            token = Tokenizer.from_file(tokenizer).token_to_id("<IMG_CONTEXT>")
            self.image_token_id = None if token is None else int(token)

    def views(self, image) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(rows at 0.5 [tiles, n, hidden], at 0.25 [tiles, n / 4, hidden] and gate [tiles, 2]; None without a
        router) of one image."""
        outs = {o.name: t.get_data_to_numpy() for o, t in zip(self.model.get_outputs(),
                                                              self.model.predict({"pixel_values": self.tiles(image)}))}
        large = outs["image_embeds"]
        if not self.flash:
            return large[None], None, None
        tiles = outs["gate"].shape[0]
        hidden = large.shape[-1]
        return large.reshape(tiles, -1, hidden), outs["flash_embeds"].reshape(tiles, -1, hidden), outs["gate"]

    def small_tiles(self, gate: np.ndarray) -> np.ndarray:
        first = gate[:, 0].astype(np.float32)
        return (first > np.quantile(first, self.relative)) & (first >= self.absolute)

    def image_rows_together(self, images) -> list[tuple[np.ndarray, None]]:
        """Each image's (rows, no grid), the router's quantile taken over all their tiles together, as the project's
        generate takes it over a request's tiles."""
        views = [self.views(image) for image in images]
        if not self.flash or not views:
            return [(large.reshape(-1, large.shape[-1]), None) for large, _, _ in views]
        chosen = self.small_tiles(np.concatenate([gate for _, _, gate in views]))
        out, first = [], 0
        for large, small, _ in views:
            picks = chosen[first:first + len(large)]
            first += len(large)
            out.append((np.concatenate([small[t] if picks[t] else large[t] for t in range(len(large))]), None))
        return out

    def __call__(self, image) -> tuple[np.ndarray, None]:
        return self.image_rows_together([image])[0]
