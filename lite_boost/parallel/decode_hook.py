"""How a parallel VAE decode is put in place of `vae.decode` (and taken out again), for every VAE family."""
from __future__ import annotations


def install_parallel_decode(vae, decode_fn, alg: str):
    """Makes vae.decode(z, return_dict=True, ...) return decode_fn(z) (as a DecoderOutput or a tuple): an instance
    attribute, so the class's decode stays what the parallel modes call on each rank."""
    from diffusers.models.autoencoders.vae import DecoderOutput

    def decode(z, return_dict: bool = True, generator=None):
        sample = decode_fn(z)
        return DecoderOutput(sample=sample) if return_dict else (sample,)

    vae.decode = decode
    vae._lite_boost_parallel = {"alg": alg}
    return vae


def restore_parallel_decode(vae):
    """Undoes install_parallel_decode."""
    if getattr(vae, "_lite_boost_parallel", None):
        del vae.decode
        vae._lite_boost_parallel = None
    return vae
