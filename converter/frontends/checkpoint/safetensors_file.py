"""safetensors files read directly: an 8-byte header length, a JSON header (name -> dtype, shape, data offsets),
then the data; every tensor a view of the file's mapping. Each header entry is checked against the file before
anything is read (a truncated shard names its first tensor that does not fit)."""
from __future__ import annotations

import glob
import json
import os
import struct

import numpy as np

from converter.ir import ConverterError

from .base import Checkpoint, MappedFile, TensorInfo

_DTYPES = {"F64": ("float64", np.float64), "F32": ("float32", np.float32), "F16": ("float16", np.float16),
           "BF16": ("bfloat16", np.uint16), "I64": ("int64", np.int64), "I32": ("int32", np.int32),
           "I16": ("int16", np.int16), "I8": ("int8", np.int8), "U8": ("uint8", np.uint8), "BOOL": ("bool", np.bool_)}


def _read_header(path: str, size: int) -> tuple[dict, int]:
    name = os.path.basename(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ConverterError(f"{name}: not a safetensors file ({size} bytes, no header length)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8 or n > 100 << 20:
            raise ConverterError(f"{name}: header length {n} exceeds the file ({size} bytes): truncated or not "
                                 "safetensors")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConverterError(f"{name}: unreadable safetensors header ({e})") from None
    if not isinstance(header, dict):
        raise ConverterError(f"{name}: the safetensors header is not a JSON object")
    return header, 8 + n


def read_safetensors(paths: list[str]) -> tuple[dict[str, TensorInfo], list[MappedFile]]:
    """TensorInfo of every tensor in the files (a name in two files is an error), and the files' mappings."""
    infos: dict[str, TensorInfo] = {}
    maps: list[MappedFile] = []
    for path in paths:
        mapped = MappedFile(path)
        maps.append(mapped)
        header, data_start = _read_header(path, mapped.size)
        name_of_file = os.path.basename(path)
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            try:
                dtype_code, shape, (begin, end) = entry["dtype"], [int(d) for d in entry["shape"]], entry["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise ConverterError(f"{name_of_file}: malformed header entry for '{name}'") from None
            if dtype_code not in _DTYPES:
                raise ConverterError(f"{name_of_file}: tensor '{name}' has dtype {dtype_code}, which is not supported")
            dtype, np_dtype = _DTYPES[dtype_code]
            count = int(np.prod(shape, dtype=np.int64))
            nbytes = count * np.dtype(np_dtype).itemsize
            if begin < 0 or end - begin != nbytes or any(d < 0 for d in shape):
                raise ConverterError(f"{name_of_file}: tensor '{name}' {dtype_code}{shape} spans bytes [{begin}, {end}), "
                                     f"{nbytes} expected")
            if data_start + end > mapped.size:
                raise ConverterError(f"{name_of_file} is truncated: tensor '{name}' ends at byte {data_start + end}, "
                                     f"the file has {mapped.size}")
            if name in infos:
                raise ConverterError(f"tensor '{name}' is in both {os.path.basename(infos[name].file)} and "
                                     f"{name_of_file}")
            offset = data_start + begin

            def view(m=mapped, o=offset, t=np_dtype, c=count, s=tuple(shape)):
                return m.array(o, t, c).reshape(s)
            infos[name] = TensorInfo(tuple(shape), dtype, path, view,
                                     lambda m=mapped, o=offset, n=nbytes: m.release(o, n))
    return infos, maps


def safetensors_files(directory: str) -> list[str]:
    """The shards of a checkpoint directory: those its index lists (all must exist), else every *.safetensors."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            try:
                weight_map = json.load(f)["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ConverterError(f"{index}: not a safetensors index (no weight_map)") from None
        files = sorted(set(weight_map.values()))
        missing = [n for n in files if not os.path.isfile(os.path.join(directory, n))]
        if missing:
            raise ConverterError(f"{directory}: the index lists shards that are missing: {', '.join(missing)}")
        return [os.path.join(directory, n) for n in files]
    return sorted(glob.glob(os.path.join(directory, "*.safetensors")))


def open_safetensors(paths: list[str]) -> Checkpoint:
    infos, maps = read_safetensors(paths)
    return Checkpoint(infos, [m.close for m in maps],
                      f"{len(paths)} safetensors file{'s' if len(paths) != 1 else ''} in "
                      f"{os.path.dirname(os.path.abspath(paths[0])) if paths else '?'}")
