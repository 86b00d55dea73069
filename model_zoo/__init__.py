"""The model registry (`entries()`, `get(name)`: one entry per model, as data in model_zoo/families/) and the
builders of graphs and test models from configs with seeded random weights (model hubs are never contacted).
`python -m model_zoo` lists, shows, converts and runs the registered models."""
from .registry import Entry, entries, get, graph_builders
from .tiny import TINY_MODELS, build_tiny_onnx

__all__ = ["Entry", "entries", "get", "graph_builders", "TINY_MODELS", "build_tiny_onnx"]
