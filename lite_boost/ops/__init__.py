"""lite_boost operators."""
from .rain_fusion import rain_fusion_attention

__all__ = ["rain_fusion_attention"]
