"""Supported models: class name -> `boost_<name>(model, config)` converting it in place for lite_boost's
parallel execution. Registering a model is one function and one line here (see docs/lite_boost.md)."""
from .flux import boost_flux, restore_flux
from .wan import boost_wan_dit, boost_wan_vae, restore_wan_dit, restore_wan_vae

SUPPORTED_MODELS = {
    "WanTransformer3DModel": boost_wan_dit,   # Wan2.1 T2V / I2V DiT (diffusers): Ulysses
    "AutoencoderKLWan": boost_wan_vae,        # Wan2.1 VAE: parallel decode (exact or time_slice)
    "FluxTransformer2DModel": boost_flux,     # FLUX.1 MMDiT: Ulysses over the joint text + image attention
}
RESTORE = {
    "WanTransformer3DModel": restore_wan_dit,
    "AutoencoderKLWan": restore_wan_vae,
    "FluxTransformer2DModel": restore_flux,
}

__all__ = ["SUPPORTED_MODELS", "RESTORE", "boost_flux", "boost_wan_dit", "boost_wan_vae", "restore_flux",
           "restore_wan_dit", "restore_wan_vae"]
