"""A multimodal checkpoint's language model seen under a text-only decoder's tensor names: transformers 5 stores a
VLM's text stack as model.language_model.* (older saves as model.*), the decoder graph builders read model.*; the
vision tower is never read. The view keeps the checkpoint's lazy access (deferred reads, tensor infos)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Iterator


class TextModelView(Mapping):
    def __init__(self, weights, root: str = "model.language_model."):
        self.w, self.root = weights, root
        self.description = getattr(weights, "description", "the weights")

    def _name(self, name: str) -> str:
        if name.startswith("model.") and self.root + name[len("model."):] in self.w:
            return self.root + name[len("model."):]
        return name

    def __getitem__(self, name: str):
        return self.w[self._name(name)]

    def __contains__(self, name) -> bool:
        return self._name(name) in self.w

    def __iter__(self) -> Iterator[str]:
        prefix = self.root
        return iter("model." + k[len(prefix):] if k.startswith(prefix) else k for k in self.w)

    def __len__(self) -> int:
        return len(self.w)

    def info(self, name: str):
        return self.w.info(self._name(name))

    def deferred(self, name: str, index: int | None = None):
        return self.w.deferred(self._name(name), index)

    def close(self) -> None:
        if hasattr(self.w, "close"):
            self.w.close()


def text_config(config: Mapping) -> dict:
    """A VLM config's text part as the decoder builders read it (model_type of the text family)."""
    text = dict(config.get("text_config") or config)
    text.setdefault("tie_word_embeddings", config.get("tie_word_embeddings", False))
    return text
