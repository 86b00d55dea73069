"""CLIP on the runtime: image and text embeddings in a shared space, and zero-shot image classification.

    clip = CLIP("path/to/clip-vit-base-patch32")          # a Hugging Face CLIPModel directory, or a converted one
    images = clip.embed_images(["cat.png"])              # [N, projection_dim], L2-normalised
    texts = clip.embed_texts(["a photo of a cat"])       # [M, projection_dim], L2-normalised
    clip.classify("cat.png", ["cat", "dog"])             # [("cat", 0.93), ("dog", 0.07)], zero-shot

The two towers are converted from the checkpoint on first use (heads "image" and "text" of model_zoo's CLIP
builder) and cached beside it as image_encoder[_<weight format>].ms and text_encoder[_<weight format>].ms.
Preprocessing follows the checkpoint's preprocessor_config.json as transformers' CLIPImageProcessor does (shortest
edge resized with the aspect ratio kept, a centre crop, rescale, normalise); texts go through tokenizer.json,
truncated to the model's positions and right-padded (the causal text tower pools at the end-of-text token, so
padding after it changes nothing)."""
from __future__ import annotations

import json
import math
import os
from typing import Sequence

import numpy as np

from .checkpoint_graph import checkpoint_graph

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _open_image(image):
    """A PIL image in RGB from a PIL image, a path or an [H, W, 3] uint8 array; undecodable files are a ValueError
    naming the file."""
    from PIL import Image, UnidentifiedImageError
    if isinstance(image, np.ndarray):
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ValueError(f"an image array must be [height, width, 3] uint8, got {image.dtype} {image.shape}")
        return Image.fromarray(image)
    if isinstance(image, (str, os.PathLike)):
        try:
            with Image.open(image) as im:
                return im.convert("RGB")
        except (UnidentifiedImageError, OSError) as e:
            raise ValueError(f"cannot read the image '{image}': {e}") from None
    if hasattr(image, "convert"):
        return image.convert("RGB")
    raise TypeError(f"an image is a path, a PIL image or a uint8 array, not {type(image).__name__}")


class ClipPreprocessor:
    """transformers' CLIPImageProcessor (and LlavaImageProcessor's pad to a square first, `do_pad`) from a
    preprocessor_config.json's settings: the shortest edge resized with the aspect ratio kept (PIL, the checkpoint's
    resample), a centre crop, rescale, normalise; [3, H, W] float32."""

    def __init__(self, settings: dict, image_size: int):
        pre = dict(settings)
        self.size = pre.get("size", {"shortest_edge": image_size})
        if isinstance(self.size, int):
            self.size = {"shortest_edge": self.size}
        self.crop = pre.get("crop_size", {"height": image_size, "width": image_size})
        if isinstance(self.crop, int):
            self.crop = {"height": self.crop, "width": self.crop}
        self.resample = int(pre.get("resample", 3))
        self.do_center_crop = bool(pre.get("do_center_crop", True))
        self.do_pad = bool(pre.get("do_pad", False))
        self.rescale = float(pre.get("rescale_factor", 1 / 255)) if pre.get("do_rescale", True) else 1.0
        self.mean = np.asarray(pre.get("image_mean", OPENAI_CLIP_MEAN), np.float32)
        self.std = np.asarray(pre.get("image_std", OPENAI_CLIP_STD), np.float32)
        self.normalize = bool(pre.get("do_normalize", True))

    @classmethod
    def from_dir(cls, model_dir: str, image_size: int) -> "ClipPreprocessor":
        path = os.path.join(model_dir, "preprocessor_config.json")
        settings = {}
        if os.path.isfile(path):
            with open(path) as f:
                settings = json.load(f)
        return cls(settings, image_size)

    def __call__(self, image) -> np.ndarray:
        from PIL import Image
        image = _open_image(image)
        if self.do_pad and image.size[0] != image.size[1]:   # centred on the mean colour (LLaVA)
            side = max(image.size)
            square = Image.new("RGB", (side, side), tuple(int(m * 255) for m in self.mean))
            square.paste(image, ((side - image.size[0]) // 2, (side - image.size[1]) // 2))
            image = square
        w, h = image.size
        if "shortest_edge" in self.size:
            edge = int(self.size["shortest_edge"])
            short, long = (w, h) if w <= h else (h, w)
            new_short, new_long = edge, int(edge * long / short)
            new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
        else:
            new_w, new_h = int(self.size["width"]), int(self.size["height"])
        image = image.resize((new_w, new_h), self.resample)
        x = np.asarray(image)
        if self.do_center_crop:
            ch, cw = int(self.crop["height"]), int(self.crop["width"])
            if ch > new_h or cw > new_w:
                raise ValueError(f"the resized image {new_w}x{new_h} is smaller than the {cw}x{ch} crop")
            top, left = (new_h - ch) // 2, (new_w - cw) // 2
            x = x[top:top + ch, left:left + cw]
        x = (x.astype(np.float64) * self.rescale).astype(np.float32)
        if self.normalize:
            x = (x - self.mean) / self.std
        return np.ascontiguousarray(x.transpose(2, 0, 1))


class CLIP:
    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1):
        from tokenizers import Tokenizer
        self.model_dir = model_dir
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        text_cfg = self.config.get("text_config") or {}
        vision_cfg = self.config.get("vision_config") or {}
        path = os.path.join(model_dir, "tokenizer.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"'{model_dir}' has no tokenizer.json")
        self.tokenizer = Tokenizer.from_file(path)
        self.max_length = int(text_cfg.get("max_position_embeddings", 77))
        self.tokenizer.enable_truncation(self.max_length)
        self.pad_id = self._pad_id(text_cfg)
        self.preprocessor = ClipPreprocessor.from_dir(model_dir, int(vision_cfg.get("image_size", 224)))
        self.image_model = checkpoint_graph(model_dir, "image_encoder", "image", weight_format, threads)
        self.text_model = checkpoint_graph(model_dir, "text_encoder", "text", weight_format, threads)
        scale = self.text_model.get_metadata().get("logit_scale")
        self.logit_scale = math.exp(float(scale)) if scale is not None else 100.0

    def _pad_id(self, text_cfg: dict) -> int:
        path = os.path.join(self.model_dir, "tokenizer_config.json")
        if os.path.isfile(path):
            with open(path) as f:
                token = json.load(f).get("pad_token")
            if isinstance(token, dict):
                token = token.get("content")
            if token is not None and self.tokenizer.token_to_id(token) is not None:
                return int(self.tokenizer.token_to_id(token))
        return int(text_cfg.get("pad_token_id", 1))

    def preprocess(self, image) -> np.ndarray:
        """One image (path, PIL image or [H, W, 3] uint8 array) as the [3, crop height, crop width] float32 input."""
        return self.preprocessor(image)

    def tokenize(self, texts: Sequence[str]) -> np.ndarray:
        """input_ids [N, longest], right-padded."""
        if isinstance(texts, str):
            raise TypeError("texts is a list of strings")
        encodings = [self.tokenizer.encode(t) for t in texts]
        ids = np.full((len(texts), max(len(e.ids) for e in encodings)), self.pad_id, np.int64)
        for i, e in enumerate(encodings):
            ids[i, :len(e.ids)] = e.ids
        return ids

    @staticmethod
    def _normalised(x: np.ndarray) -> np.ndarray:
        return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)

    def embed_images(self, images: Sequence, normalize: bool = True) -> np.ndarray:
        """[N, projection_dim] image embeddings (image_embeds), L2-normalised unless normalize=False."""
        if not len(images):
            raise ValueError("no images to embed")
        pixels = np.stack([self.preprocess(im) for im in images])
        out = {o.name: o.get_data_to_numpy() for o in self.image_model.predict({"pixel_values": pixels})}
        return self._normalised(out["image_embeds"]) if normalize else out["image_embeds"]

    def embed_texts(self, texts: Sequence[str], normalize: bool = True) -> np.ndarray:
        """[N, projection_dim] text embeddings (text_embeds), L2-normalised unless normalize=False."""
        if not len(texts):
            raise ValueError("no texts to embed")
        out = {o.name: o.get_data_to_numpy() for o in self.text_model.predict({"input_ids": self.tokenize(texts)})}
        return self._normalised(out["text_embeds"]) if normalize else out["text_embeds"]

    def logits_per_image(self, images: Sequence, texts: Sequence[str]) -> np.ndarray:
        """[images, texts] scaled cosine similarities (CLIPModel's logits_per_image)."""
        return self.logit_scale * self.embed_images(images) @ self.embed_texts(texts).T

    def classify(self, image, labels: Sequence[str], template: str = "a photo of a {}.") -> list[tuple[str, float]]:
        """Zero-shot: the labels by probability (a softmax over the image's similarity to `template` per label)."""
        if not labels:
            raise ValueError("classify needs at least one label")
        logits = self.logits_per_image([image], [template.format(label) for label in labels])[0].astype(np.float64)
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        order = np.argsort(-probs, kind="stable")
        return [(labels[i], float(probs[i])) for i in order]
