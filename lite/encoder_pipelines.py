"""Pipelines on encoder graphs converted from checkpoints (model_zoo's BERT, ViT and ConvNeXt builders): `FillMask`
(the most likely tokens at each [MASK]), `SentenceEmbedder` (mean- or CLS-pooled last hidden state, L2-normalised)
`ImageClassifier` (labels of images, with the checkpoint's preprocessing) and `ImageEmbedder` (a DINOv3 backbone's
[CLS], register and patch features). Each takes a
Hugging Face checkpoint directory (config.json, weights, tokenizer.json): the graph is converted on first use and
cached beside the checkpoint as encoder_<head>[_<weight format>].ms. Texts of one call run as one padded batch."""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from . import Context, Model, ModelType


def _encoder(model_dir: str, head: str, weight_format: str, threads: int) -> Model:
    from converter.api import Converter, FmkType
    from converter.frontends.hf_frontend import CheckpointOptions
    path = os.path.join(model_dir, f"encoder_{head}{'' if weight_format == 'float32' else '_' + weight_format}.ms")
    if not os.path.isfile(path):
        Converter().convert(FmkType.HF, model_dir, path, verify_build=False,
                            checkpoint_options=CheckpointOptions(weight_format=weight_format,
                                                                 head=None if head == "logits" else head))
    ctx = Context()
    ctx.cpu.thread_num = threads
    model = Model()
    model.build_from_file(path, ModelType.MINDIR_LITE, ctx)
    return model


class _Encoder:
    def __init__(self, model_dir: str, head: str, weight_format: str = "float32", threads: int = 1):
        from tokenizers import Tokenizer
        path = os.path.join(model_dir, "tokenizer.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"'{model_dir}' has no tokenizer.json")
        self.tokenizer = Tokenizer.from_file(path)
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        self.model = _encoder(model_dir, head, weight_format, threads)

    def batch(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """input_ids, attention_mask and token_type_ids of the texts, padded to the longest."""
        encodings = [self.tokenizer.encode(t) for t in texts]
        width = max(len(e.ids) for e in encodings)
        pad = int(self.config.get("pad_token_id") or 0)
        ids = np.full((len(texts), width), pad, np.int64)
        mask = np.zeros((len(texts), width), np.int64)
        types = np.zeros((len(texts), width), np.int64)
        for i, e in enumerate(encodings):
            ids[i, :len(e.ids)], mask[i, :len(e.ids)], types[i, :len(e.ids)] = e.ids, 1, e.type_ids
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self.model.predict(feeds)
        return {o.name: o.get_data_to_numpy() for o in outputs}


class FillMask(_Encoder):
    """The `top_k` most likely tokens (and their probabilities) at each mask token of each text."""

    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1, mask_token: str = "[MASK]"):
        super().__init__(model_dir, "masked_lm", weight_format, threads)
        self.mask_id = self.tokenizer.token_to_id(mask_token)
        if self.mask_id is None:
            raise ValueError(f"the tokenizer has no mask token {mask_token!r}")

    def __call__(self, texts: Sequence[str], top_k: int = 5) -> list[list[list[tuple[str, float]]]]:
        feeds = self.batch(texts)
        logits = self.run(feeds)["logits"]
        results = []
        for i in range(len(texts)):
            per_mask = []
            for pos in np.flatnonzero(feeds["input_ids"][i] == self.mask_id):
                row = logits[i, pos].astype(np.float64)
                probs = np.exp(row - row.max())
                probs /= probs.sum()
                best = np.argsort(-probs, kind="stable")[:top_k]
                per_mask.append([(self.tokenizer.id_to_token(int(t)), float(probs[t])) for t in best])
            results.append(per_mask)
        return results


class SentenceEmbedder(_Encoder):
    """Unit vectors of texts: the mean of the last hidden state over each text's tokens (or its [CLS] row)."""

    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1, pooling: str = "mean"):
        if pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be 'mean' or 'cls', not {pooling!r}")
        super().__init__(model_dir, "hidden", weight_format, threads)
        self.pooling = pooling

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        feeds = self.batch(texts)
        hidden = self.run(feeds)["last_hidden_state"]
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            m = feeds["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


class _ImageInput:
    """A checkpoint's image preprocessing (preprocessor_config.json, as transformers' image processors apply it):
    resize (to height x width, or the shortest edge to size / crop_pct, then a centre crop), rescale to [0, 1],
    normalise by the mean and std."""

    def __init__(self, model_dir: str, config: dict):
        self.config = config
        path = os.path.join(model_dir, "preprocessor_config.json")
        self.pre = {}
        if os.path.isfile(path):
            with open(path) as f:
                self.pre = json.load(f)

    def preprocess(self, image) -> np.ndarray:
        """A PIL image (or a path) as the model's [3, H, W] float32 input."""
        from PIL import Image
        if isinstance(image, (str, os.PathLike)):
            image = Image.open(image)
        image = image.convert("RGB")
        pre = self.pre
        resample = int(pre.get("resample", 2))
        side = self.config.get("image_size", 224)
        side = side if isinstance(side, (list, tuple)) else (side, side)
        size = pre.get("size") or {"height": int(side[0]), "width": int(side[1])}
        if pre.get("do_resize", True):
            if "shortest_edge" in size:
                edge = int(size["shortest_edge"])
                crop_pct = pre.get("crop_pct")
                if crop_pct is not None and edge < 384:   # resize, then crop the centre (ConvNeXt's processor)
                    short = int(edge / crop_pct)
                    w, h = image.size
                    nw, nh = (short, int(short * h / w)) if w <= h else (int(short * w / h), short)
                    image = image.resize((nw, nh), resample)
                    left, top = (nw - edge) // 2, (nh - edge) // 2
                    image = image.crop((left, top, left + edge, top + edge))
                else:
                    image = image.resize((edge, edge), resample)
            else:
                image = image.resize((int(size["width"]), int(size["height"])), resample)
        x = np.asarray(image, np.float32)
        if pre.get("do_rescale", True):
            x = x * np.float32(pre.get("rescale_factor", 1 / 255))
        if pre.get("do_normalize", True):
            mean = np.asarray(pre.get("image_mean", [0.5, 0.5, 0.5]), np.float32)
            std = np.asarray(pre.get("image_std", [0.5, 0.5, 0.5]), np.float32)
            x = (x - mean) / std
        return np.ascontiguousarray(x.transpose(2, 0, 1))


class ImageClassifier(_ImageInput):
    """Images -> the `top_k` labels (config.json's id2label) with their probabilities, on a ViT / ConvNeXt graph
    converted from the checkpoint, with the checkpoint's preprocessing (_ImageInput)."""

    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1):
        with open(os.path.join(model_dir, "config.json")) as f:
            super().__init__(model_dir, json.load(f))
        self.model = _encoder(model_dir, "logits", weight_format, threads)

    def __call__(self, images: Sequence, top_k: int = 5) -> list[list[tuple[str, float]]]:
        pixels = np.stack([self.preprocess(im) for im in images])
        outputs = {o.name: o.get_data_to_numpy() for o in self.model.predict({"pixel_values": pixels})}
        labels = self.config.get("id2label") or {}
        results = []
        for row in outputs["logits"].astype(np.float64):
            probs = np.exp(row - row.max())
            probs /= probs.sum()
            best = np.argsort(-probs, kind="stable")[:top_k]
            results.append([(labels.get(str(int(i)), str(int(i))), float(probs[i])) for i in best])
        return results


class ImageEmbedder(_ImageInput):
    """Images -> image features from a self-supervised backbone (DINOv3 ViT) converted from its checkpoint:
    `embed` the [CLS] vectors after the final norm (pooler_output; L2-normalised with normalize=True), `features` the
    whole token sequence split into cls [N, H], registers [N, R, H] and patches [N, rows, cols, H]."""

    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1):
        with open(os.path.join(model_dir, "config.json")) as f:
            super().__init__(model_dir, json.load(f))
        self.model = _encoder(model_dir, "features", weight_format, threads)
        self.registers = int(self.config.get("num_register_tokens", 0))

    def _run(self, images: Sequence) -> tuple[dict[str, np.ndarray], tuple[int, ...]]:
        """The graph's outputs and the pixel batch's shape."""
        if len(images) == 0:
            raise ValueError("no images")
        pixels = np.stack([self.preprocess(im) for im in images])
        return {o.name: o.get_data_to_numpy() for o in self.model.predict({"pixel_values": pixels})}, pixels.shape

    def embed(self, images: Sequence, normalize: bool = False) -> np.ndarray:
        pooled = self._run(images)[0]["pooler_output"]
        if normalize:
            pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return pooled

    def features(self, images: Sequence) -> dict[str, np.ndarray]:
        outputs, (_, _, h, w) = self._run(images)
        hidden = outputs["last_hidden_state"]
        n, tokens, width = hidden.shape
        patch = int(self.config.get("patch_size", 16))
        rows, cols = h // patch, w // patch
        first = 1 + self.registers
        if tokens != first + rows * cols:
            raise ValueError(f"the graph has {tokens} tokens; {rows}x{cols} patches and {first} prefix tokens expected")
        return {"cls": hidden[:, 0], "registers": hidden[:, 1:first],
                "patches": hidden[:, first:].reshape(n, rows, cols, width)}
