"""Supported models: class name -> `boost_<name>(model, config)` converting it in place for lite_boost's
parallel execution. Registering a model is one function and one line here (see docs/lite_boost.md)."""
from .autoencoder_kl import boost_autoencoder_kl, restore_autoencoder_kl
from .flux import boost_flux, restore_flux
from .hunyuan_video_vae import boost_hunyuan_video_vae, restore_hunyuan_video_vae
from .kandinsky5 import boost_kandinsky5, restore_kandinsky5
from .qwen_image import boost_qwen_image, restore_qwen_image
from .unet import boost_unet, restore_unet
from .wan import boost_wan_dit, boost_wan_vae, restore_wan_dit, restore_wan_vae
from .wan_animate import boost_wan_animate, restore_wan_animate

SUPPORTED_MODELS = {
    "WanTransformer3DModel": boost_wan_dit,   # Wan2.1 T2V / I2V DiT (diffusers): Ulysses
    "AutoencoderKLWan": boost_wan_vae,        # Wan2.1 VAE: parallel decode (exact or time_slice)
    "WanAnimateTransformer3DModel": boost_wan_animate,   # Wan2.2 Animate: Wan's Ulysses + face adapters per rank
    "FluxTransformer2DModel": boost_flux,     # FLUX.1 MMDiT: Ulysses over the joint text + image attention
    "QwenImageTransformer2DModel": boost_qwen_image,   # Qwen-Image MMDiT: the same, with its text mask and MSRoPE
    "UNet2DConditionModel": boost_unet,       # Stable Diffusion UNets: the spatial transformers' tokens split
    "AutoencoderKL": boost_autoencoder_kl,    # SD / FLUX image VAE: exact decode by bands of rows
    "Kandinsky5Transformer3DModel": boost_kandinsky5,   # Kandinsky 5 CrossDiT: Ulysses over the visual tokens
    "AutoencoderKLHunyuanVideo": boost_hunyuan_video_vae,   # Kandinsky 5 video VAE: its temporal tiles split
}
RESTORE = {
    "WanTransformer3DModel": restore_wan_dit,
    "AutoencoderKLWan": restore_wan_vae,
    "WanAnimateTransformer3DModel": restore_wan_animate,
    "FluxTransformer2DModel": restore_flux,
    "QwenImageTransformer2DModel": restore_qwen_image,
    "UNet2DConditionModel": restore_unet,
    "AutoencoderKL": restore_autoencoder_kl,
    "Kandinsky5Transformer3DModel": restore_kandinsky5,
    "AutoencoderKLHunyuanVideo": restore_hunyuan_video_vae,
}

__all__ = ["SUPPORTED_MODELS", "RESTORE", "boost_autoencoder_kl", "boost_flux", "boost_hunyuan_video_vae",
           "boost_kandinsky5", "boost_qwen_image", "boost_unet", "boost_wan_animate", "boost_wan_dit", "boost_wan_vae",
           "restore_autoencoder_kl", "restore_flux", "restore_hunyuan_video_vae", "restore_kandinsky5",
           "restore_qwen_image", "restore_unet", "restore_wan_animate", "restore_wan_dit", "restore_wan_vae"]
