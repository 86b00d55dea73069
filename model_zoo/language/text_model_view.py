"""A multimodal checkpoint's language model seen under a text-only decoder's tensor names: transformers 5 stores a
VLM's text stack as model.language_model.* (older saves as model.*), the decoder graph builders read model.*; the
vision tower is never read. The view keeps the checkpoint's lazy access (deferred reads, tensor infos)."""
from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Iterator

import numpy as np


def _info(weights, name: str):
    """The tensor's info from a Checkpoint, or its shape from a plain dict of arrays."""
    if hasattr(weights, "info"):
        return weights.info(name)
    return SimpleNamespace(shape=tuple(np.shape(weights[name])))


def _deferred(weights, name: str, index: int | None):
    """A Checkpoint's deferred read, or a plain dict's array (its slice `index`) as one."""
    if hasattr(weights, "deferred"):
        return weights.deferred(name, index)
    from converter.deferred import DeferredArray
    array = np.asarray(weights[name])
    return DeferredArray.of(array if index is None else array[index], name)


class RenamedView(Mapping):
    """A checkpoint's tensors under other names (`_name` maps a name asked for to the stored one), keeping its lazy
    access (deferred reads, tensor infos)."""

    def __init__(self, weights):
        self.w = weights
        self.description = getattr(weights, "description", "the weights")

    def _name(self, name: str) -> str:
        return name

    def __getitem__(self, name: str):
        return self.w[self._name(name)]

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and self._name(name) in self.w

    def __iter__(self) -> Iterator[str]:
        return iter(self.w)

    def __len__(self) -> int:
        return len(self.w)

    def info(self, name: str):
        return _info(self.w, self._name(name))

    def deferred(self, name: str, index: int | None = None):
        return _deferred(self.w, self._name(name), index)

    def close(self) -> None:
        if hasattr(self.w, "close"):
            self.w.close()


class TextModelView(RenamedView):
    def __init__(self, weights, root: str = "model.language_model.", lm_head: str | None = None):
        """`lm_head`: where the checkpoint keeps lm_head.weight when not there (older LLaVA saves:
        language_model.lm_head.weight)."""
        super().__init__(weights)
        self.root, self.lm_head = root, lm_head

    def _name(self, name: str) -> str:
        if name.startswith("model.") and self.root + name[len("model."):] in self.w:
            return self.root + name[len("model."):]
        if name == "lm_head.weight" and self.lm_head and name not in self.w:
            return self.lm_head
        return name

    def __iter__(self) -> Iterator[str]:
        prefix = self.root
        return iter("model." + k[len(prefix):] if k.startswith(prefix) else k for k in self.w)


def text_config(config: Mapping) -> dict:
    """A VLM config's text part as the decoder builders read it (model_type of the text family)."""
    text = dict(config.get("text_config") or config)
    text.setdefault("tie_word_embeddings", config.get("tie_word_embeddings", False))
    return text


class PrefixView(Mapping):
    """The tensors under `prefix` by their names without it (a sub-model of a composite checkpoint, e.g. LLaVA's
    model.vision_tower.*), keeping the checkpoint's lazy access."""

    def __init__(self, weights, prefix: str):
        self.w, self.prefix = weights, prefix
        self.description = getattr(weights, "description", "the weights")

    def __getitem__(self, name: str):
        return self.w[self.prefix + name]

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and self.prefix + name in self.w

    def __iter__(self) -> Iterator[str]:
        return iter(k[len(self.prefix):] for k in self.w if k.startswith(self.prefix))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def info(self, name: str):
        return _info(self.w, self.prefix + name)

    def deferred(self, name: str, index: int | None = None):
        return _deferred(self.w, self.prefix + name, index)
