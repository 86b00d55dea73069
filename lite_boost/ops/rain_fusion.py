"""`rain_fusion_attention`: attention restricted to selected (query block, key block) tiles (RainFusion).

The signature follows Ascend's RainFusionAttention: `select_idx[g, head, :]` lists, ascending and padded with
-1, the key blocks query block g attends (g numbers the query blocks of every sample, sample after sample),
`select_num_idx[g, head]` counts them. On the CPU the work is the fused attention kernel of the lite runtime
(C++): one task per (query block, head) across the threads, each visiting only its selected tiles with an online
softmax in float32, so the cost is proportional to the number of selected tiles; float16 and bfloat16 are
converted while the kernel packs its tiles. CUDA tensors go to a Triton kernel of the same shape
(`rain_fusion_triton`). Tensors are read in place (their last dim must be contiguous).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from . import _kernel, rain_fusion_triton

LAYOUTS = ("TND", "BNSD", "BSND")


def _contiguous_last(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _lengths(layout: str, t: Tensor, lengths: Optional[list[int]], what: str) -> Optional[list[int]]:
    if layout != "TND":
        if lengths is not None and any(n != t.shape[2 if layout == "BNSD" else 1] for n in lengths):
            raise ValueError(f"{what}: per-sample lengths are only supported with the TND layout")
        return None
    if lengths is None:
        return [t.shape[0]]
    lengths = [int(n) for n in lengths]
    if any(n < 0 for n in lengths) or sum(lengths) != t.shape[0]:
        raise ValueError(f"{what} {lengths} must be non-negative and sum to the {t.shape[0]} tokens of the TND tensor")
    return lengths


@torch.library.custom_op("lite_boost::rain_fusion_attention", mutates_args=(), device_types=("cpu", "cuda"))
def _rain_fusion_op(query: Tensor, key: Tensor, value: Tensor, select_idx: Tensor, select_num_idx: Tensor,
                    block_q: int, block_kv: int, attn_mask: Optional[Tensor], q_lens: Optional[list[int]],
                    kv_lens: Optional[list[int]], q_input_layout: str, kv_input_layout: str,
                    scale_value: float) -> tuple[Tensor, Tensor]:
    if rain_fusion_triton.use_triton(query.device.type):
        return rain_fusion_triton.forward(query, key, value, select_idx, select_num_idx, block_q, block_kv, attn_mask,
                                          q_lens, kv_lens, q_input_layout, kv_input_layout, scale_value)
    batch, heads, q_rows, q_strides = _kernel.rows_view(query, q_input_layout)
    kv_batch, kv_heads, kv_rows, k_strides = _kernel.rows_view(key, kv_input_layout)
    _, _, _, v_strides = _kernel.rows_view(value, kv_input_layout)
    v_dim = value.shape[-1]
    out = query.new_empty(query.shape[:-1] + (v_dim,))
    _, _, _, out_strides = _kernel.rows_view(out, q_input_layout)
    if q_input_layout == "TND":
        batch = len(q_lens)
        lse = torch.empty((query.shape[0], heads), dtype=torch.float32)
        lse_strides = (0, lse.stride(1), lse.stride(0))
    else:
        lse = torch.empty((batch, heads, q_rows), dtype=torch.float32)
        lse_strides = (lse.stride(0), lse.stride(1), lse.stride(2))
    spec = {
        "batch": batch, "q_heads": heads, "kv_heads": kv_heads,
        "q_len": max(q_lens) if q_lens else q_rows, "kv_len": max(kv_lens) if kv_lens else kv_rows,
        "head_dim": query.shape[-1], "v_dim": v_dim, "elem": _kernel.ELEM[query.dtype],
        "q": query.data_ptr(), "k": key.data_ptr(), "v": value.data_ptr(), "out": out.data_ptr(),
        "q_strides": list(q_strides), "k_strides": list(k_strides), "v_strides": list(v_strides),
        "out_strides": list(out_strides), "scale": scale_value, "q_lens": q_lens, "kv_lens": kv_lens,
        "key_block": block_kv, "query_block": block_q, "select_idx": select_idx.data_ptr(),
        "select_num": select_num_idx.data_ptr(), "max_selected": select_idx.shape[2],
        "lse": lse.data_ptr(), "lse_strides": list(lse_strides), "zero_masked_rows": True,
    }
    if attn_mask is not None:
        spec.update(mask=attn_mask.data_ptr(), mask_strides=list(attn_mask.stride()), mask_marks_masked=True)
    _kernel.run(spec)
    return out, lse


@_rain_fusion_op.register_fake
def _(query, key, value, select_idx, select_num_idx, block_q, block_kv, attn_mask, q_lens, kv_lens,
      q_input_layout, kv_input_layout, scale_value):
    out = query.new_empty(query.shape[:-1] + (value.shape[-1],))
    if q_input_layout == "TND":
        return out, query.new_empty((query.shape[0], query.shape[1]), dtype=torch.float32)
    heads, rows = (query.shape[1], query.shape[2]) if q_input_layout == "BNSD" else (query.shape[2], query.shape[1])
    return out, query.new_empty((query.shape[0], heads, rows), dtype=torch.float32)


def rain_fusion_attention(query: Tensor, key: Tensor, value: Tensor, select_idx: Tensor, select_num_idx: Tensor,
                          block_shape: tuple[int, int] | list[int] = (128, 128), attn_mask: Optional[Tensor] = None,
                          actual_seq_lengths: Optional[list[int]] = None,
                          actual_seq_lengths_kv: Optional[list[int]] = None, q_input_layout: str = "BNSD",
                          kv_input_layout: Optional[str] = None, num_key_value_heads: Optional[int] = None,
                          scale_value: Optional[float] = None, inner_precise: int = 0) -> tuple[Tensor, Tensor]:
    """Block-sparse attention: softmax(scale Q K^T [masked]) V over the selected tiles only.

    query/key/value: TND [tokens, heads, D], BNSD [B, heads, S, D] or BSND [B, S, heads, D] (key and value in
    `kv_input_layout`, default the query's), float32, float16 or bfloat16, on the CPU or a CUDA device.
    Grouped-query heads: query head h reads key/value head h // (heads / num_key_value_heads).
    select_idx: int [query blocks, heads, max selected], select_num_idx: int [query blocks, heads]; query
    blocks are block_shape[0] queries, key blocks block_shape[1] keys (the last ones may be shorter).
    attn_mask: optional bool, True marks an excluded (query, key) pair (torch_npu's convention); [S, L] or
    broadcastable to [B, heads, S, L] (BNSD/BSND) / [S, L] for every sample (TND).
    actual_seq_lengths(_kv): per-sample lengths of a TND batch (default: one sample).
    inner_precise: 0 or 1 (the softmax is float32 either way).
    Returns (out, softmax_lse): out in the query's layout and dtype with the value's head size; the natural
    log-sum-exp of each query's scaled scores, float32, [B, heads, S] or [tokens, heads] (-inf for a query
    that attends nothing, whose output is 0), so partial results over disjoint key sets can be merged.
    """
    kv_input_layout = kv_input_layout or q_input_layout
    for name, layout in (("q_input_layout", q_input_layout), ("kv_input_layout", kv_input_layout)):
        if layout not in LAYOUTS:
            raise ValueError(f"{name} must be one of {LAYOUTS}, got {layout!r}")
    if (q_input_layout == "TND") != (kv_input_layout == "TND"):
        raise ValueError("query and key/value must both be TND or both batched (BNSD/BSND)")
    tensors = {"query": query, "key": key, "value": value}
    for name, t in tensors.items():
        if not isinstance(t, Tensor) or t.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{name} must be a CPU or CUDA tensor")
        if t.device != query.device:
            raise ValueError(f"{name} is on {t.device}, the query on {query.device}")
        if t.dtype not in _kernel.ELEM:
            raise ValueError(f"{name} must be float32, float16 or bfloat16, got {t.dtype}")
        want = 3 if (q_input_layout if name == "query" else kv_input_layout) == "TND" else 4
        if t.dim() != want:
            raise ValueError(f"{name} must be {want}-D for its layout, got shape {tuple(t.shape)}")
    if not query.dtype == key.dtype == value.dtype:
        raise ValueError(f"query, key and value dtypes differ: {query.dtype}, {key.dtype}, {value.dtype}")
    if inner_precise not in (0, 1):
        raise ValueError(f"inner_precise must be 0 or 1, got {inner_precise}")
    if len(block_shape) < 2 or int(block_shape[0]) <= 0 or int(block_shape[1]) <= 0:
        raise ValueError(f"block_shape must be two positive sizes [query block, key block], got {block_shape}")
    block_q, block_kv = int(block_shape[0]), int(block_shape[1])
    query, key, value = (_contiguous_last(t) for t in (query, key, value))
    b, heads, s, _ = _kernel.rows_view(query, q_input_layout)
    kb, kv_heads, l, _ = _kernel.rows_view(key, kv_input_layout)
    _, v_heads, vl, _ = _kernel.rows_view(value, kv_input_layout)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query and key head sizes differ: {query.shape[-1]} vs {key.shape[-1]}")
    if kv_heads != v_heads or l != vl:
        raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} disagree on heads or length")
    if num_key_value_heads is not None and num_key_value_heads != kv_heads:
        raise ValueError(f"num_key_value_heads is {num_key_value_heads} but key has {kv_heads} heads")
    if heads % kv_heads:
        raise ValueError(f"query heads ({heads}) must be a multiple of key/value heads ({kv_heads})")
    q_lens = _lengths(q_input_layout, query, actual_seq_lengths, "actual_seq_lengths")
    kv_lens = _lengths(kv_input_layout, key, actual_seq_lengths_kv, "actual_seq_lengths_kv")
    if q_lens is not None and kv_lens is not None and len(q_lens) != len(kv_lens):
        raise ValueError(f"{len(q_lens)} query lengths but {len(kv_lens)} key/value lengths")
    if q_lens is None and b != kb:
        raise ValueError(f"query batch {b} differs from key/value batch {kb}")
    per_sample = q_lens if q_lens is not None else [s] * b
    q_blocks = sum(math.ceil(n / block_q) for n in per_sample)
    if select_idx.dim() != 3 or tuple(select_idx.shape[:2]) != (q_blocks, heads):
        raise ValueError(f"select_idx must be [query blocks = {q_blocks}, heads = {heads}, max selected], "
                         f"got {tuple(select_idx.shape)}")
    if tuple(select_num_idx.shape) != (q_blocks, heads):
        raise ValueError(f"select_num_idx must be [{q_blocks}, {heads}], got {tuple(select_num_idx.shape)}")
    if select_idx.dtype not in (torch.int32, torch.int64) or select_num_idx.dtype not in (torch.int32, torch.int64):
        raise ValueError("select_idx and select_num_idx must be integer tensors")
    select_idx = select_idx.to(torch.int64).contiguous()
    select_num_idx = select_num_idx.to(torch.int64).contiguous()
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool:
            raise ValueError(f"attn_mask must be bool (True = excluded), got {attn_mask.dtype}")
        full = (len(per_sample), heads, max(per_sample), max(kv_lens) if kv_lens else l)
        attn_mask = attn_mask.to(query.device)   # before broadcasting: a copy of an expanded mask is dense
        if attn_mask.dim() > (2 if q_input_layout == "TND" else 4):
            raise ValueError(f"attn_mask {tuple(attn_mask.shape)} has too many dims for the {q_input_layout} layout")
        try:
            attn_mask = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape)).expand(full)
        except RuntimeError:
            raise ValueError(f"attn_mask {tuple(attn_mask.shape)} does not broadcast to {full}") from None
        if attn_mask.stride(-1) not in (0, 1):
            attn_mask = attn_mask.contiguous()
    scale = float(scale_value) if scale_value is not None else 1.0 / math.sqrt(query.shape[-1])
    return _rain_fusion_op(query, key, value, select_idx, select_num_idx, block_q, block_kv, attn_mask, q_lens,
                           kv_lens, q_input_layout, kv_input_layout, scale)
