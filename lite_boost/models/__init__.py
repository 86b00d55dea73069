"""Supported models: class name -> `boost_<name>(model, config)` converting it in place for lite_boost's
parallel execution. Registering a model is one function and one line here (see docs/lite_boost.md)."""
from .wan import boost_wan_dit, restore_wan_dit

SUPPORTED_MODELS = {
    "WanTransformer3DModel": boost_wan_dit,   # Wan2.1 T2V / I2V DiT (diffusers)
}
RESTORE = {
    "WanTransformer3DModel": restore_wan_dit,
}

__all__ = ["SUPPORTED_MODELS", "RESTORE", "boost_wan_dit", "restore_wan_dit"]
