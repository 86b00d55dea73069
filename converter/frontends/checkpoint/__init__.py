"""Checkpoint containers, read lazily: a Hugging Face directory (config.json + safetensors shards, or a PyTorch
state dict), a MindSpore `.ckpt`, a GGUF file. `open_checkpoint(path)` returns the tensors (a `Checkpoint`) and the
model's config.json fields; the graph builders of model_zoo's registry turn them into a graph (converter/frontends/
hf_frontend.py)."""
from __future__ import annotations

import json
import os

from converter.ir import ConverterError

from .base import Checkpoint, TensorInfo
from .gguf_file import open_gguf
from .mindspore_ckpt import open_mindspore_ckpt
from .safetensors_file import open_safetensors, safetensors_files
from .state_dict import open_state_dict, state_dict_files

__all__ = ["Checkpoint", "TensorInfo", "open_checkpoint", "read_config"]


def read_config(directory: str) -> dict:
    """config.json; for a GLiNER checkpoint (gliner_config.json, no config.json) that file, as model_type "gliner"."""
    path = os.path.join(directory, "config.json")
    gliner = os.path.join(directory, "gliner_config.json")
    if not os.path.isfile(path) and os.path.isfile(gliner):
        return {**_read_json(gliner), "model_type": "gliner"}
    if not os.path.isfile(path):
        raise ConverterError(f"{directory}: no config.json (the model's architecture and sizes)")
    try:
        with open(path) as f:
            config = json.load(f)
    except json.JSONDecodeError as e:
        raise ConverterError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise ConverterError(f"{path}: not a JSON object")
    return config


def open_checkpoint(path: str, config_file: str | None = None) -> tuple[Checkpoint, dict]:
    """The tensors and config of a checkpoint: a directory (config.json beside safetensors shards, a state dict, a
    .ckpt or a .gguf), or one file (.safetensors / .bin / .pt / .pth / .ckpt with config.json beside it or given as
    `config_file`; a .gguf carries its own config)."""
    if not os.path.exists(path):
        raise ConverterError(f"checkpoint '{path}' does not exist")
    if os.path.isfile(path) and path.endswith(".gguf"):
        return open_gguf(path)
    directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if os.path.isfile(path):
        files = [path]
    else:
        files = (safetensors_files(path) or state_dict_files(path) or
                 sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".ckpt")) or
                 sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".gguf")))
        if not files:
            raise ConverterError(f"{path}: no weights found (*.safetensors, pytorch_model.bin / *.pt, *.ckpt or *.gguf)")
    first = files[0]
    if first.endswith(".gguf"):
        if len(files) > 1:
            raise ConverterError(f"{path}: several GGUF files; name the one to convert")
        return open_gguf(first)
    config = _read_json(config_file) if config_file else read_config(directory)
    if first.endswith(".safetensors"):
        return open_safetensors(files), config
    if first.endswith(".ckpt"):
        if len(files) > 1:
            raise ConverterError(f"{path}: several .ckpt files; name the one to convert")
        return open_mindspore_ckpt(first), config
    if first.endswith((".bin", ".pt", ".pth")):
        return open_state_dict(files), config
    raise ConverterError(f"{first}: unknown checkpoint container (expected .safetensors, .bin, .pt, .pth, .ckpt, .gguf)")


def _read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ConverterError(f"{path}: cannot read the config ({e})") from None
