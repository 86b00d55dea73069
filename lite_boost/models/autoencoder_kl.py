"""Parallel decode for diffusers' `AutoencoderKL` (Stable Diffusion's and FLUX's image VAE): exact bands of rows
across the ranks (lite_boost.parallel.vae_rows)."""
from __future__ import annotations

from ..parallel.decode_hook import install_parallel_decode, restore_parallel_decode
from ..parallel.ulysses import world_size


def boost_autoencoder_kl(vae, config: dict | None = None):
    """Makes `vae.decode` decode across the ranks by bands of latent rows (config `alg` "exact", the default and
    only mode: an image has no time axis to slice). A no-op at world size 1."""
    from ..parallel.vae_rows import decode_rows
    config = config or {}
    alg, group = config.get("alg", "exact"), config.get("group")
    if alg != "exact":
        raise ValueError(f"AutoencoderKL decodes images: vae alg must be 'exact' (bands of rows), got {alg!r}")
    if world_size(group) == 1 or getattr(vae, "_lite_boost_parallel", None):
        return vae
    if getattr(vae, "use_tiling", False) or getattr(vae, "use_slicing", False):
        raise NotImplementedError("AutoencoderKL tiling / slicing together with the row-parallel decode")

    return install_parallel_decode(vae, lambda z: decode_rows(vae, z, group), alg)


restore_autoencoder_kl = restore_parallel_decode
