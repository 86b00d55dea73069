"""`ParallelManager(model_or_pipeline, config)`: the one line that makes a supported model run across ranks."""
from __future__ import annotations

import os
import warnings
from typing import Any

import torch
import torch.distributed as dist

# Config keys this build carries out; the others are named in a NotImplementedError rather than ignored.
_BUILT = {"dit": {"alg": {"ulysses"}}, "vae": {"alg": {"exact", "time_slice"}}, "attention": {}, "rope": {}}


def _load_config(config: Any) -> dict:
    if config is None:
        return {}
    if isinstance(config, dict):
        return config
    import yaml
    with open(config) as f:
        return yaml.safe_load(f) or {}


def init_from_env() -> None:
    """Initialises the default process group from torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...)
    when none exists: gloo on CPU, NCCL with CUDA, HCCL with Ascend."""
    if not dist.is_available() or dist.is_initialized() or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if hasattr(torch, "npu") and torch.npu.is_available():
        backend = "hccl"
    dist.init_process_group(backend)


def _components(obj) -> list:
    """The models to convert: a pipeline's transformer(s) or UNet and VAE, or the model itself."""
    if hasattr(obj, "unet"):
        return [m for m in (obj.unet, getattr(obj, "vae", None)) if m is not None]
    if hasattr(obj, "transformer"):
        return [m for m in (obj.transformer, getattr(obj, "transformer_2", None), getattr(obj, "vae", None))
                if m is not None]
    return [obj]


def ParallelManager(model_or_pipeline, config: Any = None):  # noqa: N802 (the name users write)
    """Converts a supported model (or a diffusers pipeline's transformer) in place for multi-rank execution
    and returns it. Idempotent; without an `attention` section a no-op at world size 1. Config (dict or YAML
    path): `dit: {alg: ulysses}`, `vae: {alg: exact | time_slice, overlap: k}`,
    `attention: {sparse_type: rf_v2, sparsity: s, dense_steps: k, block_size: b}`, `rope: cached`."""
    from ..models import SUPPORTED_MODELS
    config = _load_config(config)
    for key in config:
        if key not in _BUILT:
            raise NotImplementedError(f"lite_boost config section {key!r} is not built yet (built: {sorted(_BUILT)})")
    dit = config.get("dit", {"alg": "ulysses"})
    if dit.get("alg", "ulysses") not in _BUILT["dit"]["alg"]:
        raise NotImplementedError(f"dit alg {dit.get('alg')!r} is not built (built: ulysses)")
    vae = config.get("vae", {"alg": "exact"})
    if vae.get("alg", "exact") not in _BUILT["vae"]["alg"]:
        raise NotImplementedError(f"vae alg {vae.get('alg')!r} is not built (built: exact, time_slice)")
    init_from_env()
    if "world_size" in dit and dist.is_initialized() and int(dit["world_size"]) != dist.get_world_size():
        raise ValueError(f"config asks for world_size {dit['world_size']} but the process group has "
                         f"{dist.get_world_size()} ranks")
    for model in _components(model_or_pipeline):
        name = type(model).__name__
        boost = SUPPORTED_MODELS.get(name)
        if boost is None and model is getattr(model_or_pipeline, "vae", None):
            # a pipeline's VAE without a parallel decode (Qwen-Image's) decodes whole on every rank
            warnings.warn(f"{name}: lite_boost has no parallel decode for it; every rank decodes the whole "
                          "latent", RuntimeWarning, stacklevel=2)
            continue
        if boost is None:
            raise ValueError(f"{name} is not supported by lite_boost's ParallelManager; supported: "
                             f"{sorted(SUPPORTED_MODELS)}")
        boost(model, vae if name.startswith("Autoencoder") else {**dit, "attention": config.get("attention"), "rope": config.get("rope")})
    return model_or_pipeline


def restore(model_or_pipeline):
    """Undoes ParallelManager: original attention processors, no hooks."""
    from ..models import RESTORE
    for model in _components(model_or_pipeline):
        fn = RESTORE.get(type(model).__name__)
        if fn is not None:
            fn(model)
    return model_or_pipeline
