"""RainFusion block-sparse attention on GPUs: a FlashAttention-style Triton kernel over the selected tiles.

One program per (query block, sub-tile of BLOCK_M queries, head) walks its query block's selected key blocks in
chunks of BLOCK_N keys with an online softmax in float32 (exp2, the scale folded into log2 units), so its cost is
proportional to the tiles kept. Same contract as the CPU kernel (`rain_fusion.rain_fusion_attention`): TND / BNSD /
BSND operands read in place through their strides, grouped-query heads, ragged TND lengths, an optional bool
mask (True = excluded), rows attending nothing give 0 and a log-sum-exp of -inf.

float32 operands use exact float32 products (no TF32), float16 / bfloat16 the tensor cores with float32
accumulation (the probabilities are rounded to the value's type before the P V product, as FlashAttention does).
The kernel is built on first use; with TRITON_INTERPRET=1 it runs on CPU tensors through Triton's interpreter
(the tests use that where no GPU is present).
"""
from __future__ import annotations

import math
import os
from typing import Optional

import torch
from torch import Tensor

from ._kernel import rows_view

LOG2E = 1.4426950408889634
FORCE_ENV = "LITE_BOOST_RAIN_FUSION_KERNEL"   # "triton" runs CPU tensors through the interpreter (tests)
TILES_ENV = "LITE_BOOST_RF_TILES"   # "BLOCK_M,BLOCK_N,warps,stages" overrides the tile choice (benchmarks' sweep)


def unavailable_reason() -> Optional[str]:
    """None when Triton is installed, else why not (found without importing it: importing triton fixes its
    interpreter mode for the process)."""
    import importlib.util
    return None if importlib.util.find_spec("triton") is not None else "triton is not installed"


def use_triton(device_type: str) -> bool:
    """Whether tensors on `device_type` go to this kernel: CUDA (and ROCm, which torch calls cuda) always,
    CPU only when forced for the interpreter."""
    return device_type == "cuda" or (device_type == "cpu" and os.environ.get(FORCE_ENV) == "triton")


def _kernels():
    from . import _rain_fusion_tl   # imports triton
    return _rain_fusion_tl


def _block_table(per_sample_q: list[int], per_sample_kv: list[int], block_q: int, tnd: bool) -> Tensor:
    """int64 [query blocks, 6] on the host: sample, first token row, [lo, hi) rows of the block, first key row,
    keys."""
    table = []
    q0 = k0 = 0
    for b, (n, kn) in enumerate(zip(per_sample_q, per_sample_kv)):
        for lo in range(0, n, block_q):
            table.append((b, q0 if tnd else 0, lo, min(lo + block_q, n), k0 if tnd else 0, kn))
        q0, k0 = q0 + n, k0 + kn
    return torch.tensor(table, dtype=torch.int64).reshape(-1, 6)


def _check_selection(select_idx: Tensor, select_num: Tensor, key_blocks: Tensor) -> None:
    """The CPU kernel's checks, vectorised on the selection's device: counts in range, indices in range and
    strictly ascending."""
    g, heads, max_sel = select_idx.shape
    kb = key_blocks[:, None]
    bad_num = (select_num < 0) | (select_num > max_sel) | (select_num > key_blocks[:, None])
    pos = torch.arange(max_sel, device=select_idx.device) < select_num[..., None]
    bad_idx = pos & ((select_idx < 0) | (select_idx >= kb[..., None]))
    bad_order = pos[..., 1:] & (select_idx[..., 1:] <= select_idx[..., :-1])
    if not bool(bad_num.any() | bad_idx.any() | bad_order.any()):
        return
    if bad_num.any():
        qb, h = (int(x) for x in torch.nonzero(bad_num)[0])
        raise ValueError(f"select_num_idx at query block {qb}, head {h} is {int(select_num[qb, h])}; it must be in "
                         f"[0, {min(max_sel, int(key_blocks[qb]))}]")
    if bad_idx.any():
        qb, h, i = (int(x) for x in torch.nonzero(bad_idx)[0])
        raise ValueError(f"select_idx at query block {qb}, head {h} names key block {int(select_idx[qb, h, i])} "
                         f"of {int(key_blocks[qb])}")
    qb, h, _ = (int(x) for x in torch.nonzero(bad_order)[0])
    raise ValueError(f"select_idx at query block {qb}, head {h} is not strictly ascending")


def _tile_config(d: int, dv: int, elem_bytes: int, interpret: bool) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, warps, stages): FlashAttention-2's forward tiles for Hopper/Ampere; small ones for the
    interpreter (it runs one NumPy op per tile op)."""
    forced = os.environ.get(TILES_ENV)
    if forced:
        try:
            block_m, block_n, warps, stages = (int(x) for x in forced.split(","))
        except ValueError:
            raise ValueError(f"{TILES_ENV} must be 'BLOCK_M,BLOCK_N,warps,stages', got {forced!r}") from None
        return block_m, block_n, warps, stages
    if interpret:
        return 64, 64, 4, 1
    widest = max(d, dv)
    if widest <= 64:
        return 128, 64, 4, 3
    if widest <= 128:
        return (128, 64, 8, 3) if elem_bytes == 2 else (64, 32, 4, 2)
    return 64, 32, 4, 2


def forward(query: Tensor, key: Tensor, value: Tensor, select_idx: Tensor, select_num: Tensor, block_q: int,
            block_kv: int, attn_mask: Optional[Tensor], q_lens: Optional[list[int]], kv_lens: Optional[list[int]],
            q_layout: str, kv_layout: str, scale: float) -> tuple[Tensor, Tensor]:
    """(out, lse) as `rain_fusion_attention` returns them; arguments already checked and normalised by it."""
    batch, heads, q_rows, q_strides = rows_view(query, q_layout)
    _, kv_heads, kv_rows, k_strides = rows_view(key, kv_layout)
    _, _, _, v_strides = rows_view(value, kv_layout)
    tnd = q_layout == "TND"
    per_q = q_lens if tnd else [q_rows] * batch
    per_kv = kv_lens if tnd else [kv_rows] * batch
    d, dv = query.shape[-1], value.shape[-1]
    out = query.new_empty(query.shape[:-1] + (dv,))
    _, _, _, o_strides = rows_view(out, q_layout)
    if tnd:
        lse = torch.empty((query.shape[0], heads), dtype=torch.float32, device=query.device)
        l_strides = (0, lse.stride(1), lse.stride(0))
    else:
        lse = torch.empty((batch, heads, q_rows), dtype=torch.float32, device=query.device)
        l_strides = (lse.stride(0), lse.stride(1), lse.stride(2))
    table = _block_table(per_q, per_kv, block_q, tnd)
    if table.shape[0] == 0 or heads == 0:
        lse.fill_(float("-inf"))
        return out.zero_(), lse
    key_blocks = ((table[:, 5] + block_kv - 1) // block_kv).to(query.device)   # each query block's sample's
    table = table.to(query.device)
    select_idx = select_idx.to(device=query.device, dtype=torch.int64).contiguous()
    select_num = select_num.to(device=query.device, dtype=torch.int64).contiguous()
    _check_selection(select_idx, select_num, key_blocks)
    if attn_mask is not None:
        mask = attn_mask.to(query.device).view(torch.uint8)   # same bytes; Triton loads it as integers
        m_strides = tuple(mask.stride())
    else:
        mask, m_strides = select_num, (0, 0, 0, 0)
    kernels = _kernels()
    interpret = kernels.INTERPRET
    block_m, block_n, warps, stages = _tile_config(d, dv, query.element_size(), interpret)
    block_m = min(block_m, max(16, 1 << (block_q - 1).bit_length()))   # no sub-tiles past a small query block
    block_n = min(block_n, max(16, 1 << (block_kv - 1).bit_length()))
    grid = (table.shape[0], math.ceil(block_q / block_m), heads)
    launch = {} if interpret else {"num_warps": warps, "num_stages": stages}
    kernels.fwd[grid](query, key, value, out, lse, select_idx, select_num, mask, table,
              q_strides[0], q_strides[1], q_strides[2], k_strides[0], k_strides[1], k_strides[2],
              v_strides[0], v_strides[1], v_strides[2], o_strides[0], o_strides[1], o_strides[2],
              l_strides[0], l_strides[1], l_strides[2], *m_strides, heads, heads // kv_heads,
              select_idx.shape[2], block_q, block_kv, scale * LOG2E,
              D=d, DV=dv, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=max(16, 1 << (d - 1).bit_length()),
              BLOCK_DV=max(16, 1 << (dv - 1).bit_length()), CHUNKS=math.ceil(block_kv / block_n),
              HAS_MASK=attn_mask is not None, IEEE=query.dtype == torch.float32, INTERPRET=interpret, **launch)
    return out, lse
