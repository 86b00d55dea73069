"""PyTorch state dicts (`pytorch_model.bin`, `*.pt`, `*.pth`, sharded with an index): loaded with
`torch.load(weights_only=True)`, which unpickles tensors and plain containers only (never code), memory-mapped
(`mmap=True`) where the file is in torch's zip format so tensors are read as they are written."""
from __future__ import annotations

import json
import os

import numpy as np

from converter.ir import ConverterError

from .base import Checkpoint, TensorInfo

_DTYPES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16",
           "torch.float64": "float64", "torch.int64": "int64", "torch.int32": "int32", "torch.int8": "int8",
           "torch.uint8": "uint8", "torch.bool": "bool"}


def state_dict_files(directory: str) -> list[str]:
    index = os.path.join(directory, "pytorch_model.bin.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            try:
                files = sorted(set(json.load(f)["weight_map"].values()))
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ConverterError(f"{index}: not a state-dict index (no weight_map)") from None
        missing = [n for n in files if not os.path.isfile(os.path.join(directory, n))]
        if missing:
            raise ConverterError(f"{directory}: the index lists shards that are missing: {', '.join(missing)}")
        return [os.path.join(directory, n) for n in files]
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory))
            if n.endswith((".bin", ".pt", ".pth")) and os.path.isfile(os.path.join(directory, n))]


def _tensors(obj, path: str) -> dict:
    """The name -> tensor dict inside what torch.load returned (a state dict, or one under 'state_dict' / 'model')."""
    import torch
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return obj
    if isinstance(obj, dict):
        for key in ("state_dict", "model", "module"):
            if isinstance(obj.get(key), dict):
                return _tensors(obj[key], path)
    raise ConverterError(f"{os.path.basename(path)}: no state dict of tensors in it (a {type(obj).__name__})")


def open_state_dict(paths: list[str]) -> Checkpoint:
    import torch
    infos: dict[str, TensorInfo] = {}
    for path in paths:
        try:
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as e:
                if "mmap" not in str(e):
                    raise
                obj = torch.load(path, map_location="cpu", weights_only=True)   # the legacy (non-zip) format
        except Exception as e:   # weights_only refuses pickled code; a truncated zip fails to open
            raise ConverterError(f"{os.path.basename(path)}: cannot be read as a PyTorch state dict with "
                                 f"weights_only=True ({type(e).__name__}: {e})") from None
        for name, t in _tensors(obj, path).items():
            dtype = _DTYPES.get(str(t.dtype))
            if dtype is None:
                raise ConverterError(f"{os.path.basename(path)}: tensor '{name}' has dtype {t.dtype}, not supported")
            if name in infos:
                raise ConverterError(f"tensor '{name}' is in both {os.path.basename(infos[name].file)} and "
                                     f"{os.path.basename(path)}")

            def view(t=t, dtype=dtype):
                t = t.detach().contiguous()
                return t.view(torch.int16).numpy().view(np.uint16) if dtype == "bfloat16" else t.numpy()
            infos[name] = TensorInfo(tuple(t.shape), dtype, path, view)
    return Checkpoint(infos, [], f"{len(paths)} state-dict file{'s' if len(paths) != 1 else ''}")
