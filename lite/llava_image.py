"""LLaVA's image tower on the runtime: an image -> its rows for the language model (the CLIP tower's features
projected to the text width; model_zoo/multimodal/llava_vision_graph.py), with the checkpoint's CLIP preprocessing, at
plain 1-D positions. LLaVA-1.5: 576 rows an image (the 336-pixel ViT-L/14). LLaVA-NeXT (AnyRes): a whole-image view and
tiles of the image fitted into its best pinpoint resolution, packed with a newline token ending each row of features."""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from .clip import ClipPreprocessor


class LlavaVision:
    mrope = False   # the rows sit at the placeholder tokens' ordinary positions

    def __init__(self, path: str, config: Mapping, processor_config: Mapping | None = None, threads: int = 1):
        from . import Context, Model, ModelType
        ctx = Context()
        ctx.cpu.thread_num = threads
        self.model = Model()
        self.model.build_from_file(path, ModelType.MINDIR_LITE, ctx)
        vision = dict(config.get("vision_config") or {})
        self.preprocess = ClipPreprocessor(dict(processor_config or {}), int(vision.get("image_size", 336)))
        self.tiler = LlavaNextTiler(config, dict(processor_config or {})) \
            if config.get("model_type") == "llava_next" else None
        self.last_deepstack = None

    def __call__(self, image) -> tuple[np.ndarray, None]:
        """(rows [tokens, text hidden], no grid) of one image (a PIL image, path or uint8 array)."""
        if self.tiler is None:
            pixels = self.preprocess(image)[None]
            return self.model.predict({"pixel_values": pixels})[0].get_data_to_numpy(), None
        pixels, grid, size = self.tiler.tiles(image)
        outputs = {o.name: t.get_data_to_numpy() for o, t in zip(self.model.get_outputs(),
                                                                 self.model.predict({"pixel_values": pixels}))}
        return self.tiler.pack(outputs["image_embeds"], grid, size, outputs["image_newline"]), None


def select_best_resolution(size: tuple[int, int], pinpoints: Sequence[Sequence[int]]) -> tuple[int, int]:
    """The (height, width) of `pinpoints` that keeps most of an image of `size` (height, width) when it is scaled to
    fit, the least padding breaking ties (LLaVA-NeXT's AnyRes choice)."""
    h, w = size
    best, most, least = None, 0, float("inf")
    for ph, pw in pinpoints:
        scale = min(pw / w, ph / h)
        effective = min(int(w * scale) * int(h * scale), w * h)
        wasted = pw * ph - effective
        if effective > most or (effective == most and wasted < least):
            best, most, least = (int(ph), int(pw)), effective, wasted
    return best


class LlavaNextTiler:
    """LLaVA-NeXT's AnyRes preprocessing and packing (as transformers' LlavaNextImageProcessor and
    LlavaNextModel.pack_image_features do): a whole-image view at tile size plus the image fitted into the best
    pinpoint resolution (aspect kept, centred on black) cut into tiles; after the tower, the tiles' feature grids
    joined, the padding cropped back to the image's aspect ratio and image_newline appended to every row."""

    def __init__(self, config: Mapping, processor_config: Mapping):
        self.pinpoints = [tuple(int(v) for v in p) for p in (processor_config.get("image_grid_pinpoints")
                                                              or config.get("image_grid_pinpoints"))]
        vision = dict(config.get("vision_config") or {})
        image_size = int(vision.get("image_size", 336))
        size, crop = processor_config.get("size") or {}, processor_config.get("crop_size") or {}
        size = {"shortest_edge": size} if isinstance(size, int) else size
        crop = {"height": crop, "width": crop} if isinstance(crop, int) else crop
        # as LlavaNextImageProcessor: the whole-image view at `size` (a square of shortest_edge), tiles of the crop
        self.base = (int(size.get("width", size.get("shortest_edge", image_size))),
                     int(size.get("height", size.get("shortest_edge", image_size))))
        self.tile = int(crop.get("height", size.get("height", size.get("shortest_edge", image_size))))
        self.side = image_size // int(vision.get("patch_size", 14))   # feature rows / columns of one tile
        self.preprocess = ClipPreprocessor(dict(processor_config), image_size)
        self.resample = int(processor_config.get("resample", 3))

    def tiles(self, image) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]]:
        """(pixels [1 + tiles, 3, tile, tile], the grid of tiles (rows, columns), the image's (height, width))."""
        from PIL import Image

        from .clip import _open_image
        image = _open_image(image)
        w, h = image.size
        th, tw = select_best_resolution((h, w), self.pinpoints)
        sw, sh = tw / w, th / h
        if sw < sh:
            nw, nh = tw, min(math.ceil(h * sw), th)
        else:
            nw, nh = min(math.ceil(w * sh), tw), th
        canvas = Image.new("RGB", (tw, th), (0, 0, 0))
        canvas.paste(image.resize((nw, nh), self.resample), ((tw - nw) // 2, (th - nh) // 2))
        views = [image.resize(self.base, self.resample)]
        views += [canvas.crop((x, y, x + self.tile, y + self.tile)) for y in range(0, th, self.tile)
                  for x in range(0, tw, self.tile)]
        pixels = np.stack([self.preprocess(v) for v in views])
        return pixels, (th // self.tile, tw // self.tile), (h, w)

    def pack(self, rows: np.ndarray, grid: tuple[int, int], size: tuple[int, int], newline: np.ndarray) -> np.ndarray:
        """The language model's rows of one image from the tower's rows of its views ([views x side^2, hidden])."""
        s, hidden = self.side, rows.shape[-1]
        views = rows.reshape(-1, s * s, hidden)
        base, tiles = views[0], views[1:]
        gh, gw = grid
        feature = tiles.reshape(gh, gw, s, s, hidden).transpose(4, 0, 2, 1, 3).reshape(hidden, gh * s, gw * s)
        h, w = size
        cur_h, cur_w = feature.shape[1:]
        if w / h > cur_w / cur_h:   # wider than the canvas: rows were padded
            new_h = int(round(h * (cur_w / w), 7))
            pad = (cur_h - new_h) // 2
            feature = feature[:, pad:cur_h - pad]
        else:
            new_w = int(round(w * (cur_h / h), 7))
            pad = (cur_w - new_w) // 2
            feature = feature[:, :, pad:cur_w - pad]
        with_newline = np.concatenate([feature, np.broadcast_to(newline[:, None, None],
                                                                (hidden, feature.shape[1], 1))], axis=2)
        return np.concatenate([base, with_newline.reshape(hidden, -1).T]).astype(np.float32)
