"""Pipelines on encoder graphs converted from checkpoints (model_zoo's BERT builder): `FillMask` (the most likely
tokens at each [MASK]) and `SentenceEmbedder` (mean- or CLS-pooled last hidden state, L2-normalised). Each takes a
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
                            checkpoint_options=CheckpointOptions(weight_format=weight_format, head=head))
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
