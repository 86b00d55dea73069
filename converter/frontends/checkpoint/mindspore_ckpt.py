"""MindSpore `.ckpt` files read without MindSpore: the file is one protobuf message (mindspore/ccsrc's
checkpoint.proto), `Checkpoint { repeated Value value = 1; }`, `Value { string tag = 1; TensorProto tensor = 2; }`,
`TensorProto { repeated int64 dims = 1; string tensor_type = 2; bytes tensor_content = 3; }`. The wire format is
walked by hand over the file's mapping, so each tensor's content stays a view of the file. MindSpore writes a large
tensor as several values of the same tag (slices along the flattened data): those are joined. Parameter names of
MindSpore Transformers' Llama-style models are mapped to transformers' names (`HF_NAMES`)."""
from __future__ import annotations

import os
import re

import numpy as np

from converter.ir import ConverterError

from .base import Checkpoint, MappedFile, TensorInfo

_DTYPES = {"Float32": ("float32", np.float32), "Float16": ("float16", np.float16), "BFloat16": ("bfloat16", np.uint16),
           "Float64": ("float64", np.float64), "Int64": ("int64", np.int64), "Int32": ("int32", np.int32),
           "Int8": ("int8", np.int8), "UInt8": ("uint8", np.uint8), "Bool": ("bool", np.bool_)}

# MindSpore Transformers (mindformers) LlamaForCausalLM / Qwen2 parameter names -> transformers'.
HF_NAMES = [
    (r"^model\.tok_embeddings\.embedding_weight$", "model.embed_tokens.weight"),
    (r"^model\.norm_out\.weight$", "model.norm.weight"),
    (r"^lm_head\.weight$", "lm_head.weight"),
    (r"^model\.layers\.(\d+)\.attention_norm\.weight$", r"model.layers.\1.input_layernorm.weight"),
    (r"^model\.layers\.(\d+)\.ffn_norm\.weight$", r"model.layers.\1.post_attention_layernorm.weight"),
    (r"^model\.layers\.(\d+)\.attention\.wq\.(weight|bias)$", r"model.layers.\1.self_attn.q_proj.\2"),
    (r"^model\.layers\.(\d+)\.attention\.wk\.(weight|bias)$", r"model.layers.\1.self_attn.k_proj.\2"),
    (r"^model\.layers\.(\d+)\.attention\.wv\.(weight|bias)$", r"model.layers.\1.self_attn.v_proj.\2"),
    (r"^model\.layers\.(\d+)\.attention\.wo\.(weight|bias)$", r"model.layers.\1.self_attn.o_proj.\2"),
    (r"^model\.layers\.(\d+)\.feed_forward\.w1\.weight$", r"model.layers.\1.mlp.gate_proj.weight"),
    (r"^model\.layers\.(\d+)\.feed_forward\.w3\.weight$", r"model.layers.\1.mlp.up_proj.weight"),
    (r"^model\.layers\.(\d+)\.feed_forward\.w2\.weight$", r"model.layers.\1.mlp.down_proj.weight"),
]
_COMPILED = [(re.compile(p), r) for p, r in HF_NAMES]


def hf_name(name: str) -> str:
    for pattern, repl in _COMPILED:
        if pattern.match(name):
            return pattern.sub(repl, name)
    return name


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise ValueError("varint runs past its message")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _fields(buf, pos: int, end: int):
    """(field number, wire type, value or (start, length)) of each field in buf[pos:end]."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield field, wire, value
        elif wire == 2:
            n, pos = _varint(buf, pos, end)
            if n > end - pos:
                raise ValueError(f"field {field} of {n} bytes runs past its message ({end - pos} left)")
            yield field, wire, (pos, n)
            pos += n
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"wire type {wire}")
        if pos > end:
            raise ValueError("a field runs past its message")


def open_mindspore_ckpt(path: str) -> Checkpoint:
    mapped = MappedFile(path)
    base = os.path.basename(path)
    if mapped.map is None:
        raise ConverterError(f"{base}: empty file")
    buf = mapped.map
    slices: dict[str, list] = {}
    try:
        for field, wire, span in _fields(buf, 0, mapped.size):
            if field != 1 or wire != 2:
                continue
            tag, dims, ttype, content = None, [], None, None
            for f2, w2, v2 in _fields(buf, span[0], span[0] + span[1]):
                if f2 == 1 and w2 == 2:
                    tag = bytes(buf[v2[0]:v2[0] + v2[1]]).decode()
                elif f2 == 2 and w2 == 2:
                    for f3, w3, v3 in _fields(buf, v2[0], v2[0] + v2[1]):
                        if f3 == 1 and w3 == 0:
                            dims.append(v3)
                        elif f3 == 1 and w3 == 2:   # packed dims
                            p, e = v3[0], v3[0] + v3[1]
                            while p < e:
                                d, p = _varint(buf, p, e)
                                dims.append(d)
                        elif f3 == 2 and w3 == 2:
                            ttype = bytes(buf[v3[0]:v3[0] + v3[1]]).decode()
                        elif f3 == 3 and w3 == 2:
                            content = v3
            if tag is None or ttype is None or content is None:
                continue   # a map tensor or an empty value: nothing the builders read
            slices.setdefault(tag, []).append((dims, ttype, content))
    except (ValueError, UnicodeDecodeError) as e:
        raise ConverterError(f"{base}: not a MindSpore checkpoint or truncated ({e})") from None
    if not slices:
        raise ConverterError(f"{base}: no tensors found (not a MindSpore checkpoint?)")
    infos: dict[str, TensorInfo] = {}
    for tag, parts in slices.items():
        dims, ttype = parts[0][0], parts[0][1]
        if ttype not in _DTYPES:
            raise ConverterError(f"{base}: tensor '{tag}' has type {ttype}, not supported")
        dtype, np_dtype = _DTYPES[ttype]
        size = np.dtype(np_dtype).itemsize
        count = int(np.prod(dims, dtype=np.int64)) if dims else 1
        total = sum(length for _, _, (_, length) in parts)
        if total != count * size:
            raise ConverterError(f"{base}: tensor '{tag}' {ttype}{dims} holds {total} bytes, {count * size} expected")
        spans = [c for _, _, c in parts]

        def view(spans=spans, t=np_dtype, shape=tuple(dims)):
            if len(spans) == 1:
                return mapped.array(spans[0][0], t, spans[0][1] // np.dtype(t).itemsize).reshape(shape)
            return np.concatenate([mapped.array(o, t, n // np.dtype(t).itemsize) for o, n in spans]).reshape(shape)

        def release(spans=spans):
            for o, n in spans:
                mapped.release(o, n)
        name = hf_name(tag)
        if name in infos:
            raise ConverterError(f"{base}: two parameters map to '{name}'")
        infos[name] = TensorInfo(tuple(dims), dtype, path, view, release)
    return Checkpoint(infos, [mapped.close], f"MindSpore checkpoint {base}")
