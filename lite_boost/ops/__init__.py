"""lite_boost operators: block-sparse attention (RainFusion), the attention backend chooser, cached RoPE."""
from .flash_attention import available_backends, flash_attention
from .rain_fusion import rain_fusion_attention
from .sparse_attention import sparse_attention

__all__ = ["available_backends", "flash_attention", "rain_fusion_attention", "sparse_attention"]
