"""The model registry: one `Entry` per model, as data, in one module per family under `model_zoo/families/`.

A family is added by adding a file: every module of that package that defines `ENTRIES` (a list of `Entry`) is
collected here, and one that defines `GRAPH_BUILDERS` (transformers `model_type` -> builder) gives the checkpoint
frontend (`converter_lite --fmk=HF`) the graph for that architecture. Nothing else lists the families.

An entry is `supported` only when a test proves it end to end at a tiny configuration (its `test` names that test,
`path::name`); otherwise it is `planned` and `missing` says what it still lacks."""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

CATEGORIES = ("generation", "vlm", "llm", "audio", "driving_embodied", "retrieval_vision")
CATEGORY_TITLES = {
    "generation": "Image / video generation",
    "vlm": "Vision-language",
    "llm": "Language models",
    "audio": "Audio (speech recognition, speech synthesis)",
    "driving_embodied": "Driving / embodied",
    "retrieval_vision": "Retrieval, embeddings, vision and other",
}
STATUSES = ("supported", "planned")
# What the entry's pipeline does with its graphs (the `run` command's mode).
PIPELINES = ("chat", "generate", "embed", "rerank", "classify", "fill-mask", "ner", "caption", "transcribe",
             "speak", "render", "edit", "detect", "segment", "depth", "act", "ocr")


@dataclass(frozen=True)
class Entry:
    name: str                          # as the supported-model list writes it
    category: str                      # one of CATEGORIES
    family: str                        # the family module's name (e.g. "qwen2", "wan")
    architecture: str                  # transformers / diffusers class(es), or our builder
    config: Mapping[str, Any]          # the full-size hyper-parameters (the model's config.json values)
    config_source: str                 # where those numbers come from
    graphs: tuple[str, ...]            # the graphs the model is cut into, e.g. ("decoder_step",)
    pipeline: str                      # one of PIPELINES
    status: str = "planned"            # one of STATUSES
    missing: str = ""                  # planned: what it still lacks
    test: str = ""                     # supported: the test that proves it, "tests/...py::test_name"
    hub_id: str = ""                   # the checkpoint's Hugging Face / project id
    converter: Mapping[str, Any] = field(default_factory=dict)   # converter settings (precision, frontend)
    model_type: str = ""               # the checkpoint's config.json model_type, where it has one
    boost_classes: tuple[str, ...] = ()   # generation rows: the PyTorch classes lite_boost's ParallelManager converts

    def __post_init__(self):
        if self.category not in CATEGORIES:
            raise ValueError(f"{self.name}: category {self.category!r} is not one of {', '.join(CATEGORIES)}")
        if self.status not in STATUSES:
            raise ValueError(f"{self.name}: status {self.status!r} is not one of {', '.join(STATUSES)}")
        if self.pipeline not in PIPELINES:
            raise ValueError(f"{self.name}: pipeline {self.pipeline!r} is not one of {', '.join(PIPELINES)}")
        if self.status == "supported" and not self.test:
            raise ValueError(f"{self.name}: a supported entry names the test that proves it")
        if self.status == "planned" and not self.missing:
            raise ValueError(f"{self.name}: a planned entry says what it is missing")
        if not self.graphs:
            raise ValueError(f"{self.name}: no graphs")

    @property
    def parameters(self) -> str:
        """The size the config or name states (e.g. "0.5B"), for the tables."""
        return str(self.config.get("_parameters", ""))


def _family_modules():
    from . import families
    for info in sorted(pkgutil.iter_modules(families.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            yield importlib.import_module(f"{families.__name__}.{info.name}")


_cache: dict[str, Any] = {}


def entries(category: str | None = None, status: str | None = None) -> list[Entry]:
    """Every registered model (optionally of one category / status), in the families' order."""
    if "entries" not in _cache:
        found, names = [], {}
        for module in _family_modules():
            for e in getattr(module, "ENTRIES", ()):
                if not isinstance(e, Entry):
                    raise TypeError(f"{module.__name__}.ENTRIES holds {type(e).__name__}, not Entry")
                if e.name in names:
                    raise ValueError(f"model {e.name!r} is registered by {names[e.name]} and {module.__name__}")
                names[e.name] = module.__name__
                found.append(e)
        _cache["entries"] = found
    out = _cache["entries"]
    if category is not None:
        if category not in CATEGORIES:
            raise ValueError(f"category {category!r} is not one of {', '.join(CATEGORIES)}")
        out = [e for e in out if e.category == category]
    if status is not None:
        if status not in STATUSES:
            raise ValueError(f"status {status!r} is not one of {', '.join(STATUSES)}")
        out = [e for e in out if e.status == status]
    return list(out)


def get(name: str) -> Entry:
    """The entry of that name (exact, or ignoring case)."""
    all_entries = entries()
    for e in all_entries:
        if e.name == name:
            return e
    folded = [e for e in all_entries if e.name.lower() == name.lower()]
    if len(folded) == 1:
        return folded[0]
    close = [e.name for e in all_entries if name.lower() in e.name.lower()][:8]
    hint = f"; did you mean: {', '.join(close)}" if close else ""
    raise KeyError(f"no model named {name!r} in the registry{hint}")


def graph_builders() -> dict[str, Callable]:
    """transformers model_type -> the builder of its graph from a checkpoint (the families' GRAPH_BUILDERS)."""
    if "builders" not in _cache:
        found: dict[str, Callable] = {}
        for module in _family_modules():
            for model_type, builder in getattr(module, "GRAPH_BUILDERS", {}).items():
                if model_type in found:
                    raise ValueError(f"model_type {model_type!r} has two builders ({module.__name__} and another)")
                found[model_type] = builder
        _cache["builders"] = found
    return dict(_cache["builders"])
