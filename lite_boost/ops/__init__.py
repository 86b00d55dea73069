"""lite_boost operators: block-sparse attention (RainFusion), the attention backend chooser, cached RoPE."""
from .flash_attention import available_backends, flash_attention
from .rain_fusion import rain_fusion_attention
from .rope import apply_rope, rope, rope_tables_1d, rope_tables_3d
from .sparse_attention import sparse_attention

__all__ = ["apply_rope", "available_backends", "flash_attention", "rain_fusion_attention", "rope", "rope_tables_1d",
           "rope_tables_3d", "sparse_attention"]
