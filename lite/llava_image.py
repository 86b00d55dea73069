"""LLaVA-1.5's image tower on the runtime: an image -> its rows for the language model (the CLIP tower's features
projected to the text width; model_zoo/llava_vision_graph.py), with the checkpoint's CLIP preprocessing. Every image
gives the same number of rows (576 for the 336-pixel ViT-L/14) at plain 1-D positions."""
from __future__ import annotations

from typing import Mapping

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
        self.last_deepstack = None

    def __call__(self, image) -> tuple[np.ndarray, None]:
        """(rows [tokens, text hidden], no grid) of one image (a PIL image, path or uint8 array)."""
        pixels = self.preprocess(image)[None]
        return self.model.predict({"pixel_values": pixels})[0].get_data_to_numpy(), None
