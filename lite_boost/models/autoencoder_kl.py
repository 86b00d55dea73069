"""Parallel decode for diffusers' `AutoencoderKL` (Stable Diffusion's and FLUX's image VAE): exact bands of rows
across the ranks (lite_boost.parallel.vae_rows)."""
from __future__ import annotations

from ..parallel.ulysses import world_size


def boost_autoencoder_kl(vae, config: dict | None = None):
    """Makes `vae.decode` decode across the ranks by bands of latent rows (config `alg` "exact", the default and
    only mode: an image has no time axis to slice). A no-op at world size 1."""
    from diffusers.models.autoencoders.vae import DecoderOutput

    from ..parallel.vae_rows import decode_rows
    config = config or {}
    alg, group = config.get("alg", "exact"), config.get("group")
    if alg != "exact":
        raise ValueError(f"AutoencoderKL decodes images: vae alg must be 'exact' (bands of rows), got {alg!r}")
    if world_size(group) == 1 or getattr(vae, "_lite_boost_parallel", None):
        return vae
    if getattr(vae, "use_tiling", False) or getattr(vae, "use_slicing", False):
        raise NotImplementedError("AutoencoderKL tiling / slicing together with the row-parallel decode")

    def decode(z, return_dict: bool = True, generator=None):
        image = decode_rows(vae, z, group)
        return DecoderOutput(sample=image) if return_dict else (image,)

    vae.decode = decode   # an instance attribute: the class's decode stays what a single rank calls
    vae._lite_boost_parallel = {"alg": alg}
    return vae


def restore_autoencoder_kl(vae):
    if getattr(vae, "_lite_boost_parallel", None):
        del vae.decode
        vae._lite_boost_parallel = None
    return vae
