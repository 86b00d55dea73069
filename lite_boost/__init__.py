"""lite_boost: a PyTorch plugin that makes large video/multimodal generative models cheaper to run.

`lite_boost.ops` holds the operator layer: block-sparse attention (`rain_fusion_attention`) on the lite
runtime's fused attention kernel. Model wiring and multi-device runs build on it.
"""
from . import ops
from .parallel import ParallelManager

__all__ = ["ops", "ParallelManager"]
