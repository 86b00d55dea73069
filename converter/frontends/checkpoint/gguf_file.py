"""GGUF files (llama.cpp's format) through the `gguf` package: the model's config.json fields from the file's
metadata, and its tensors under transformers' names (llama.cpp's `token_embd`, `blk.N.attn_q`, ... mapped back).
Float tensors (F32 / F16 / BF16) are views of the file; quantised blocks (Q8_0, Q4_0, K-quants, ...) are
dequantised to float32 when their tensor is written (the converter then stores them in the precision asked for),
except Q4_0 matrices converted to int4, whose codes and scales are our int4 encoding as they stand (q4_0_blocks).
llama.cpp's converter permutes Llama's q/k rows for its rotary layout; those are permuted back."""
from __future__ import annotations

import os
import re

import numpy as np

from converter.ir import ConverterError

from .base import Checkpoint, TensorInfo

# Architectures read from GGUF: llama.cpp's name -> transformers' model_type.
ARCHITECTURES = {"qwen2": "qwen2", "qwen3": "qwen3", "llama": "llama", "qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe"}

_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias", "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                 "output.weight": "lm_head.weight"}
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")


def hf_name(name: str) -> str | None:
    if name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[name]
    m = _BLOCK.match(name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"
    return None


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    value = f.contents()
    return value


def gguf_config(reader, path: str) -> dict:
    """config.json fields of the file's model, from its metadata."""
    arch = _field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ConverterError(f"{os.path.basename(path)}: GGUF architecture {arch!r} is not supported "
                             f"(supported: {', '.join(sorted(ARCHITECTURES))})")

    def get(key, default=None):
        return _field(reader, f"{arch}.{key}", default)
    embed = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if embed is None:
        raise ConverterError(f"{os.path.basename(path)}: no token_embd.weight tensor")
    heads = int(get("attention.head_count"))
    config = {
        "model_type": ARCHITECTURES[arch],
        "hidden_size": int(get("embedding_length")), "num_hidden_layers": int(get("block_count")),
        "num_attention_heads": heads, "num_key_value_heads": int(get("attention.head_count_kv", heads)),
        "intermediate_size": int(get("feed_forward_length", 0) or 0),
        "vocab_size": int(embed.shape[1]),
        "max_position_embeddings": int(get("context_length", 4096)),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(get("rope.freq_base", 10000.0)),
        "tie_word_embeddings": not any(t.name == "output.weight" for t in reader.tensors),
        "hidden_act": "silu",
    }
    key_length = get("attention.key_length")
    if key_length:
        config["head_dim"] = int(key_length)
    if get("expert_count"):
        config["num_experts"] = int(get("expert_count"))
        config["num_experts_per_tok"] = int(get("expert_used_count"))
        config["moe_intermediate_size"] = int(get("expert_feed_forward_length", 0) or 0)
    return config


def q4_0_blocks(data: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """A Q4_0 matrix's scales [rows, cols / 32] (float32 from float16) and codes [rows, cols] (int8, -8..7): each
    18-byte block is a float16 scale d and 16 bytes whose low nibbles are values 0-15 and high nibbles 16-31, value
    (nibble - 8) * d: exactly our int4 storage (code * scale, blocks of 32 along the reduction axis)."""
    rows, cols = shape
    b = np.asarray(data, np.uint8).reshape(rows, cols // 32, 18)
    scales = b[:, :, :2].copy().view(np.float16).reshape(rows, cols // 32).astype(np.float32)
    qs = b[:, :, 2:]
    codes = np.concatenate([qs & 0xF, qs >> 4], axis=2).astype(np.int8) - 8
    return scales, codes.reshape(rows, cols)


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's Llama converter reorders each head's q/k rows (halves interleaved); its inverse."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def open_gguf(path: str) -> tuple[Checkpoint, dict]:
    import gguf
    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:   # a truncated or foreign file fails inside the reader
        raise ConverterError(f"{os.path.basename(path)}: not a readable GGUF file ({type(e).__name__}: {e})") from None
    config = gguf_config(reader, path)
    float_types = {gguf.GGMLQuantizationType.F32: "float32", gguf.GGMLQuantizationType.F16: "float16",
                   gguf.GGMLQuantizationType.BF16: "bfloat16"}
    permute = config["model_type"] == "llama"
    infos: dict[str, TensorInfo] = {}
    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:
            continue   # e.g. rope_freqs: derived from the config here
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        qtype = t.tensor_type
        heads = None
        if permute and name.endswith("q_proj.weight"):
            heads = config["num_attention_heads"]
        elif permute and name.endswith("k_proj.weight"):
            heads = config["num_key_value_heads"]

        cache: dict = {}   # a dequantised (or un-permuted) tensor, kept while it is being written

        def view(t=t, qtype=qtype, shape=shape, heads=heads, cache=cache):
            if "v" in cache:
                return cache["v"]
            if qtype in float_types:
                values = np.asarray(t.data).reshape(shape)
                if qtype == gguf.GGMLQuantizationType.BF16:
                    values = values.view(np.uint16)
                if not heads:
                    return values
            else:
                values = gguf.quants.dequantize(np.asarray(t.data), qtype).reshape(shape).astype(np.float32)
            cache["v"] = _unpermute(values, heads) if heads else values
            return cache["v"]
        dtype = float_types.get(qtype, "float32")
        blocks = None
        if qtype == gguf.GGMLQuantizationType.Q4_0 and len(shape) == 2:
            def int4_blocks(t=t, shape=shape, heads=heads):
                scales, codes = q4_0_blocks(np.asarray(t.data), shape)
                return (_unpermute(scales, heads), _unpermute(codes, heads)) if heads else (scales, codes)
            blocks = int4_blocks
        infos[name] = TensorInfo(shape, dtype, path, view, cache.clear, blocks)
    description = f"GGUF {os.path.basename(path)}"
    return Checkpoint(infos, [], description), config
