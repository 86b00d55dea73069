"""Registry of models the project supports, with builders that make them from configs and seeded
random weights (model hubs are never contacted)."""
from .tiny import TINY_MODELS, build_tiny_onnx

__all__ = ["TINY_MODELS", "build_tiny_onnx"]
